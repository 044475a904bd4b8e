"""The command line: validate (exit codes, one line per error), the spark-submit entry point,
and SIGTERM stopping a running job cleanly (the docs' generated pages: tests/test_docs.py).

Two tests start the real commands as processes (a JVM each, ~10 s); the rest run in-process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlog.mysql.connection import Endpoint
from cdc.app.cli import job_main, main
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.errors import SourceUnreachable
from sinks.delta.tables import read_table

ROOT = Path(__file__).resolve().parent.parent
PASSWORD_ENV = "TEST_CLI_PASSWORD"


def job_file(tmp_path: Path, box: Sandbox, database: str, **top: Any) -> str:
    raw = {"source": {"hostname": box.cdc.host, "port": box.cdc.port, "username": box.cdc.user,
                      "password": "${" + PASSWORD_ENV + "}", "tables": [f"{database}\\..*"],
                      "server_id": "5410-5413"},
           "sink": {"path": str(tmp_path / "lake")}, "checkpoint": str(tmp_path / "checkpoint"), **top}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch, mysql_server: Sandbox) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mysql_server.cdc.password)


def test_validate_good_file(tmp_path: Path, mysql_server: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    path = job_file(tmp_path, mysql_server, "shop")
    assert main(["validate", "--config", path]) == 0
    assert "valid" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [Path(path)], "validate writes nothing"


def test_validate_bad_file_prints_one_line_per_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"username": "cdc", "tables": ["shop\\..*"], "chunk_size": 0, "chunk_sise": 5},
        "sink": {"path": "x"}, "checkpoint": "c", "parallelism": 0}))
    assert main(["validate", "--config", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith(f"error: {path}: ") for line in lines)
    text = "\n".join(lines)
    assert "source.chunk_size: Input should be greater than 0 (got 0)" in text
    assert "source.chunk_sise: unknown key" in text and "parallelism: " in text


def test_validate_missing_file_and_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            mysql_server: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read config")
    path = job_file(tmp_path, mysql_server, "shop")
    monkeypatch.delenv(PASSWORD_ENV)
    assert job_main(["validate", "--config", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: source.password: environment variable {PASSWORD_ENV} is not set"]


def test_validate_check_connection(tmp_path: Path, mysql_server: Sandbox, database: str, admin: Any,
                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY)")
    path = job_file(tmp_path, mysql_server, database)
    assert main(["validate", "--config", path, "--check-connection"]) == 0
    assert f"1 table(s): {database}.orders" in capsys.readouterr().out
    monkeypatch.setenv(PASSWORD_ENV, "wrong-password-7")
    assert main(["validate", "--config", path, "--check-connection"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused user 'cdc'" in err and "wrong-password-7" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_spark_submit_entry_point_implies_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("checkpoint: c\n")
    assert job_main(["--config", str(path), "--once"]) == 2  # parsed as `run --config ... --once`
    assert "source: Field required" in capsys.readouterr().err


# --- real processes ------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_CDC_SPARK_LOG_LEVEL="WARN")
    return env


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"exited early ({proc.returncode}):\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} after {timeout}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.3)


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_spark_submit_resumes(tmp_path: Path, mysql_server: Sandbox, database: str,
                                                        admin: Any) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(50)))
    path = job_file(tmp_path, mysql_server, database, trigger_interval="500ms")
    err = tmp_path / "run.err"
    with err.open("wb") as err_out:
        proc = subprocess.Popen([sys.executable, "-m", "cdc", "run", "--config", path], cwd=ROOT, env=_env(),
                                stdout=subprocess.PIPE, stderr=err_out)
        try:
            _wait_for(err, "batch 1:", proc)  # the snapshot chunk was emitted
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    log = err.read_text()
    assert proc.returncode == 0, log[-3000:]
    assert "SIGTERM received: stopping the query" in log and "run finished" in out.decode()
    with admin.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (100, 'after'), (101, 'after')")
        cur.execute("DELETE FROM t WHERE id < 5")
    done = subprocess.run([str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
                           "cdc_job.py", "--config", path, "--once"], cwd=ROOT, env=_env(),
                          capture_output=True, timeout=300)
    output = done.stdout.decode() + done.stderr.decode() + log + out.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert mysql_server.cdc.password not in output
    mirror = read_table(str(tmp_path / "lake" / database / "t"))
    assert sorted(mirror.column("id").to_pylist()) == [*range(5, 50), 100, 101]
    changelog = read_table(str(tmp_path / "lake" / database / "t_changelog"))
    assert changelog.column("op").to_pylist().count("r") == 50, "the resumed run did not snapshot again"


def test_sandbox_command_serves_a_cdc_server_until_ctrl_c() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cdc", "sandbox", "mysql"], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(6)]
        assert lines[-1].startswith("running"), lines
        export = next(line for line in lines if "export MYSQL_HOST" in line)
        values = dict(part.split("=", 1) for part in export.split()[1:])
        endpoint = Endpoint(values["MYSQL_HOST"], int(values["MYSQL_PORT"]), "cdc",
                            values["MYSQL_PASSWORD"].strip("'"))
        with contextlib.closing(endpoint.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@binlog_format, @@binlog_row_image")
            assert cur.fetchone() == ("ROW", "FULL")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        with pytest.raises(SourceUnreachable):
            endpoint.connect()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
