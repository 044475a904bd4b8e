"""Start-up errors of ``python -m cdc run`` that operators meet: one ``error:`` line naming the
address or path, the config key and the fix; exit 2; no stack trace.

A sink path that cannot be written, a PostgreSQL server that is down, a Kafka broker that is down
(the second job on a held checkpoint: tests/test_status.py). Against the real MariaDB fixture;
the servers that are "down" are free ports nothing listens on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_job import _password, raw_config, write_config  # noqa: F401 - _password: job files read it

from cdc.app.cli import main
from cdc.app.sandbox.mysql import Sandbox, free_port
from cdc.model.errors import ConfigError


def run_errors(path: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["run", "--config", path, "--once"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error: ")]


def test_a_sink_path_that_cannot_be_written(
    mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file: nobody, root included, can create a folder under it")
    raw = raw_config(mysql_server, database, tmp_path)
    raw["sink"] = {"path": str(blocker / "lake")}
    errors = run_errors(write_config(tmp_path / "job.yaml", raw), capsys)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"error: sink.path: cannot write to {blocker / 'lake'} ("), errors[0]
    assert "point sink.path at a folder this job can create and write" in errors[0]


def test_a_postgres_server_that_is_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    raw = {"source": {"type": "postgres", "hostname": "127.0.0.1", "port": port, "username": "cdc",
                      "password": "pw-not-shown-1", "database": "shop", "tables": ["public\\..*"]},
           "sink": {"path": str(tmp_path / "lake")}, "checkpoint": str(tmp_path / "checkpoint")}
    errors = run_errors(write_config(tmp_path / "job.yaml", raw), capsys)
    assert len(errors) == 1, errors
    assert re.search(rf"cannot reach PostgreSQL at 127\.0\.0\.1:{port}\b.*source\.hostname", errors[0]), errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"], "nothing written"


def test_a_kafka_broker_that_is_down(
    mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    port = free_port()
    raw = raw_config(mysql_server, database, tmp_path)
    raw["sink"] = {"type": "kafka", "bootstrap_servers": f"127.0.0.1:{port}", "connect_timeout_s": 3}
    errors = run_errors(write_config(tmp_path / "job.yaml", raw), capsys)
    assert len(errors) == 1, errors
    assert f"bootstrap_servers=127.0.0.1:{port}" in errors[0] and "check `bootstrap_servers`" in errors[0], errors[0]


@pytest.mark.parametrize("as_uri", [False, True])
def test_the_write_check_leaves_no_folder_it_created(tmp_path: Path, as_uri: bool) -> None:
    """A plain path and a file:// URI alike: the probe's folders go again, those that were there stay."""
    from cdc.app.writable import check_writable

    (tmp_path / "kept").mkdir()
    target = tmp_path / "kept" / "new" / "lake"
    check_writable("sink.path", f"file://{target}" if as_uri else str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    assert list((tmp_path / "kept").iterdir()) == []

    blocker = tmp_path / "kept" / "a-file"
    blocker.write_text("a regular file")
    with pytest.raises(ConfigError, match=r"sink\.path: cannot write to .*a-file/lake"):
        check_writable("sink.path", f"file://{blocker}/lake" if as_uri else str(blocker / "lake"))
