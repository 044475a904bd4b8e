"""``python -m cdc status`` (cdc/app/status.py) on a real job's checkpoint, and the checkpoint lock
(cdc/app/lock.py): a second job on a checkpoint a running job holds is refused and writes nothing.

The jobs run for real against the MariaDB fixture, in-process on the session's Spark.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from faults import FileFaults
from test_job import _password, config_of, raw_config, write_config  # noqa: F401 - _password: job files read it

from cdc.app.cli import main
from cdc.app.lock import OWNER_FILE, Owner
from cdc.app.progress import PlainView
from cdc.app.runner import JobFailed, JobRunner
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.status import read_status


def status_json(path: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["status", "--config", path, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def status_text(path: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["status", "--config", path]) == 0
    return capsys.readouterr().out


def test_a_job_that_never_ran(tmp_path: Path, mysql_server: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path / "job.yaml", raw_config(mysql_server, "db", tmp_path))
    assert status_text(path, capsys).startswith(f"job never ran: no checkpoint at {tmp_path / 'checkpoint'}")
    assert status_json(path, capsys)["ran"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"], "status writes nothing"


@pytest.mark.slow  # two runs of a real job (about 20 s each on a loaded 2-core machine)
def test_status_mid_snapshot_then_streaming(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, {i})" for i in range(250)))
        # exact statistics: the splitter's step follows InnoDB's row estimate, which lags inserts
        # (an estimate of 247 gives chunks of 101 keys)
        cur.execute("ANALYZE TABLE t")
        cur.fetchall()
    raw = raw_config(mysql_server, database, tmp_path, chunks_per_batch=1)
    path = write_config(tmp_path / "job.yaml", raw)
    faults = FileFaults(tmp_path / "faults")
    faults.arm("plan", after=2)  # the driver dies planning a batch after chunk 0 was emitted
    with pytest.raises(JobFailed):
        JobRunner(config_of(raw), spark, hooks=faults).run(once=True, view=PlainView())

    mid = status_json(path, capsys)
    (table,) = mid["tables"]
    assert table["table"] == f"{database}.t" and table["phase"] == "snapshot"
    assert 1 <= table["chunks_done"] < 3 and table["chunks_total"] == 3
    assert table["snapshot_rows"] == 100 * table["chunks_done"] and table["rows_estimate"] is not None
    assert mid["running"] is None, "the failed run released the checkpoint"
    assert table["position"].startswith("mysql-bin.") and table["last_commit_ms"] is not None

    JobRunner(config_of(raw), spark).run(once=True, view=PlainView())
    with admin.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1000, 1), (1001, 1)")
        cur.execute("DELETE FROM t WHERE id = 7")
    JobRunner(config_of(raw), spark).run(once=True, view=PlainView())
    done = status_json(path, capsys)
    (table,) = done["tables"]
    assert (table["phase"], table["chunks_done"], table["chunks_total"]) == ("stream", 3, 3)
    assert (table["snapshot_rows"], table["change_rows"]) == (250, 3)
    assert done["caught_up"] is True and table["lag_s"] == 0.0
    assert done["last_committed"] is not None and done["committed_ms"] is not None

    text = status_text(path, capsys)
    assert "running: no" in text and "(caught up)" in text
    assert any(line.split()[:5] == [f"{database}.t", "stream", "3/3", "250", "3"] for line in text.splitlines()), text

    with admin.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2000, 1)")
    behind = read_status(config_of(raw))
    assert behind.caught_up is False and behind.lag_s is not None, "the source moved on: the lag is the commit's age"


def files_under(root: Path) -> list[str]:
    """Every path under ``root`` (but the running job's heartbeat rewrite, a passing temp name)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if f"{OWNER_FILE}.tmp-" not in p.name)


def settled(root: Path) -> list[str]:
    """The paths once the running job is idle: the same listing twice, a second apart."""
    last: list[str] = []
    while (now := files_under(root)) != last:
        last = now
        time.sleep(1)
    return now


@pytest.mark.slow  # a real job runs in the background (about 20 s on a loaded 2-core machine)
def test_a_second_job_on_a_held_checkpoint_is_refused_and_writes_nothing(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1), (2), (3)")
    raw = {**raw_config(mysql_server, database, tmp_path, chunks_per_batch=1), "trigger_interval": "1s"}
    path = write_config(tmp_path / "job.yaml", raw)
    stop, errors = threading.Event(), []
    runner = JobRunner(config_of(raw), spark)

    def run() -> None:
        try:
            runner.run(stop=stop, view=PlainView())
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    first = threading.Thread(target=run, daemon=True)
    first.start()
    try:
        while not any(r.snapshot_rows for r in runner.batches):  # the running job has written rows
            assert first.is_alive(), errors
            time.sleep(0.2)
        while (s := read_status(config_of(raw), connect=False)).tables[0].phase != "stream" \
                or s.last_committed != s.last_planned:  # then it went idle: nothing more to write
            assert first.is_alive(), errors
            time.sleep(0.2)
        before = settled(tmp_path)
        capsys.readouterr()
        assert main(["run", "--config", path, "--once"]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
        assert len(err) == 1, err
        assert f"is held by a running job on host {socket.gethostname()}, pid {os.getpid()}" in err[0]
        assert "stop that job first, or give this job its own checkpoint" in err[0]
        assert files_under(tmp_path) == before, "a refused start writes nothing"
        running = status_json(path, capsys)["running"]
        assert (running["host"], running["pid"]) == (socket.gethostname(), os.getpid())
    finally:
        stop.set()
        first.join(timeout=300)
    assert not errors, errors
    assert not (tmp_path / "checkpoint_state" / OWNER_FILE).exists(), "a run that ends releases the checkpoint"


def test_a_dead_holder_is_taken_over() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    now = int(time.time() * 1000)
    here = socket.gethostname()
    assert not Owner(here, int(dead.stdout), now, now).alive(), "its process is gone"
    assert Owner(here, os.getppid(), now - 3_600_000, now - 3_600_000).alive(), "a live pid here: however old"
    assert not Owner(here, os.getpid(), now, now).alive(), "this pid, but no run of this process holds it"
    assert Owner("another-host", 1, now, now).alive(), "another host's job: alive while its heartbeat is fresh"
    assert not Owner("another-host", 1, now - 3_600_000, now - 3_600_000).alive()
