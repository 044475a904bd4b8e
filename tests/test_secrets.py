"""Secrets stay secret (docs/operating/security.md): a distinctive password, given through ``${ENV}`` or
``source.password_file``, must not appear in what a job leaves behind or shows.

A real job runs the way a user starts it (``python -m cdc -v run --config job.yaml --once``, in a
subprocess, debug logging on, Spark's event log on: the event log holds what Spark's UI shows,
its environment page and the SQL plans and options). Then every byte it wrote is searched: its
stdout and stderr, the checkpoint, the state directory, the lake and the event log, as plain
text, percent-encoded (as in a URL) and base64-encoded at each of the three alignments (py4j's
debug log carries pickled objects in base64). The config reference, and the errors for a wrong
password and an unreachable host (MySQL and PostgreSQL), are searched the same way.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.connection import Endpoint
from binlog.mysql.dialect import MySqlDialect
from binlog.postgres.server import PgSettings
from cdc.app.cli import main
from cdc.app.sandbox.mysql import Sandbox, free_port
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.errors import CdcError
from sinks.delta.tables import read_table

ROOT = Path(__file__).resolve().parent.parent
PASSWORD_ENV = "TEST_SECRETS_PASSWORD"


def encodings(secret: str) -> list[bytes]:
    """The forms a secret could be written in: plain, percent-encoded, base64 at each alignment."""
    raw = secret.encode()
    forms = [raw, quote(secret, safe="").encode()]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        forms.append(encoded[4 * ((pad + 2) // 3):-4])  # the characters that depend only on the secret
    return [f for f in forms if len(f) >= 8]


def leaks(secret: str, data: bytes) -> list[bytes]:
    return [f for f in encodings(secret) if f in data]


def assert_no_secret(secret: str, text: str | bytes, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    found = leaks(secret, data)
    assert not found, f"the password appears in {where} (as {found[0]!r})"


@pytest.fixture
def secret_user(mysql_server: Sandbox) -> Iterator[tuple[str, str]]:
    """A CDC user with a distinctive password: (user, password)."""
    user, password = f"sec_{uuid.uuid4().hex[:8]}", f"s3cr3t-{uuid.uuid4().hex}"
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        cur.execute("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s@'%%'", (user,))
    yield user, password
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("DROP USER IF EXISTS %s@'%%'", (user,))


def job_file(workdir: Path, box: Sandbox, database: str, user: str, sinks: list[dict[str, Any]] | None = None,
             **source: Any) -> Path:
    raw = {"source": {"hostname": box.cdc.host, "port": box.cdc.port, "username": user,
                      "tables": [f"{database}\\..*"], "chunk_size": 50, "server_id": "5420-5423", **source},
           "sink": [{"type": "delta", "path": str(workdir / "lake")}, *(sinks or [])],
           "checkpoint": str(workdir / "checkpoint")}
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _env(events: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_CDC_SPARK_LOG_LEVEL="INFO",
               PYSPARK_SUBMIT_ARGS=f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={events.as_uri()} "
                                   "--conf spark.eventLog.compress=false pyspark-shell", **extra)
    return env


KAFKA_SECRET_ENV = "TEST_SECRETS_SASL"


# "env+kafka" takes the password from the environment, with a Kafka sink next to Delta that has a
# secret of its own; "file" takes it from a password_file.
@pytest.mark.parametrize("via", ["file", "env+kafka"])
def test_a_real_job_leaves_the_password_nowhere(via: str, mysql_server: Sandbox, database: str, admin: Any,
                                                 secret_user: tuple[str, str], tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    user, password = secret_user
    sasl = f"s3cr3t-sasl-{uuid.uuid4().hex}"  # sink.producer's sasl.password (the Kafka case)
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(120)))
    work, secrets_dir, events = tmp_path / "work", tmp_path / "secrets", tmp_path / "events"
    for folder in (work, secrets_dir, events):
        folder.mkdir()
    extra_env: dict[str, str] = {}
    if via.startswith("env"):
        sinks = []
        if via == "env+kafka":
            broker = request.getfixturevalue("kafka_broker")
            sinks.append({"type": "kafka", "bootstrap_servers": broker.bootstrap_servers,
                          "topic_prefix": f"sec{uuid.uuid4().hex[:8]}", "staging_path": str(work / "staging"),
                          "producer": {"sasl.username": "cdc", "sasl.password": "${" + KAFKA_SECRET_ENV + "}"}})
            extra_env[KAFKA_SECRET_ENV] = sasl
        path = job_file(work, mysql_server, database, user, sinks, password="${" + PASSWORD_ENV + "}")
        extra_env[PASSWORD_ENV] = password
    else:
        (secrets_dir / "password").write_text(password + "\n")
        path = job_file(work, mysql_server, database, user, None, password_file=str(secrets_dir / "password"))
    done = subprocess.run([sys.executable, "-m", "cdc", "-v", "run", "--config", str(path), "--once"], cwd=ROOT,
                          env=_env(events, **extra_env), capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert b"batch 1:" in done.stderr  # the progress log lines
    for secret in (password, sasl):
        assert_no_secret(secret, done.stdout, "stdout")
        assert_no_secret(secret, done.stderr, "stderr")
    assert read_table(str(work / "lake" / database / "t")).num_rows == 120
    event_logs = [f for f in events.rglob("*") if f.is_file()]
    assert event_logs, "Spark wrote no event log"
    assert b"SparkListenerEnvironmentUpdate" in b"".join(f.read_bytes() for f in event_logs)
    searched = 0
    for folder in (work, events):  # work: checkpoint, checkpoint_state, lake (and the job file)
        for f in folder.rglob("*"):
            if f.is_file():
                for secret in (password, sasl):
                    assert_no_secret(secret, f.read_bytes(), str(f))
                searched += 1
    assert searched > 20


def test_config_reference_holds_no_secret(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("MYSQL_PASSWORD", secret)
    monkeypatch.setenv(PASSWORD_ENV, secret)
    assert main(["config-reference"]) == 0
    out = capsys.readouterr().out
    assert "source.password" in out
    assert_no_secret(secret, out, "config-reference")


@pytest.mark.parametrize("case", ["wrong_password", "unreachable"])
def test_mysql_errors_hold_no_password(case: str, mysql_server: Sandbox, database: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv(PASSWORD_ENV, secret)
    port = free_port() if case == "unreachable" else mysql_server.cdc.port
    source = {"password": "${" + PASSWORD_ENV + "}", "port": port, "connect_timeout_s": 2}
    path = job_file(tmp_path, mysql_server, database, mysql_server.cdc.user, None, **source)
    assert main(["-v", "run", "--config", str(path), "--once"]) == 2
    captured = capsys.readouterr()
    assert "error: " in captured.err
    assert_no_secret(secret, captured.out + captured.err, "the error output")
    # the exception itself, as Spark would ship it from an executor (pickled) and print it
    config = MySqlSourceConfig(hostname="127.0.0.1", port=port, username=mysql_server.cdc.user, password=secret,
                               tables=[f"{database}\\..*"], connect_timeout_s=2)
    with pytest.raises(CdcError) as info:
        MySqlDialect(config).connect()
    for text in (str(info.value), repr(info.value), repr(pickle.loads(pickle.dumps(info.value))),
                 repr(config), str(config), repr(MySqlDialect(config).settings)):
        assert_no_secret(secret, text, "an exception or a repr")


def test_connectorx_errors_hold_no_password(mysql_server: Sandbox) -> None:
    from binlog.mysql.fetch_backends import ConnectorXBackend, translated
    from cdc.model.schema import TableId

    if not ConnectorXBackend.available():
        pytest.skip("connectorx is not installed")
    import connectorx

    from binlog.mysql.fetch_backends import connectorx_uri

    secret = f"s3cr3t-{uuid.uuid4().hex}"
    endpoint = Endpoint("127.0.0.1", free_port(), "cdc", secret, connect_timeout=1)
    with pytest.raises(Exception) as info, translated(endpoint, TableId("d", "t")):
        connectorx.read_sql(connectorx_uri(endpoint), "SELECT 1", return_type="arrow")
    assert_no_secret(secret, f"{info.value}\n{info.value!r}", "a connectorx error")


@pytest.mark.parametrize("case", ["wrong_password", "unreachable"])
def test_postgres_errors_hold_no_password(case: str, postgres_server: PostgresSandbox) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    port = free_port() if case == "unreachable" else postgres_server.cdc.port
    settings = PgSettings("127.0.0.1", port, postgres_server.cdc.user, secret, "postgres", 2.0)
    with pytest.raises(CdcError) as info:
        settings.connect()
    for text in (str(info.value), repr(info.value), repr(pickle.loads(pickle.dumps(info.value))), repr(settings)):
        assert_no_secret(secret, text, "an exception or a repr")


def test_reader_options_are_redacted_in_the_plan(spark: Any, mysql_server: Sandbox, database: str, admin: Any,
                                                 secret_user: tuple[str, str], tmp_path: Path) -> None:
    """A user's own ``readStream.format("mysql-cdc").option("password", ...)``: the options are in
    the logical plan Spark's UI shows; Spark redacts keys matching ``spark.redaction.regex``."""
    from cdc.spark.source import data_source

    user, password = secret_user
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    spark.dataSource.register(data_source("mysql"))
    df = (spark.readStream.format("mysql-cdc").option("hostname", mysql_server.cdc.host)
          .option("port", str(mysql_server.cdc.port)).option("username", user).option("password", password)
          .option("tables", f"{database}\\..*").option("server_id", "5430-5433")
          .option("state_dir", str(tmp_path / "state")).load())
    plan = df._jdf.queryExecution().toString()
    assert "mysql-cdc" in plan or "MysqlCdcDataSource" in plan or "StreamingRelation" in plan, plan[:500]
    assert "password=*********(redacted)" in plan
    assert_no_secret(password, plan, "the streaming plan")
