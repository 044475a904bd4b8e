"""The job users run (cdc/runner.py, cdc/cli.py): start-up errors, startup modes, a whole
database, restarts, refused checkpoints, secrets, and the demo, against the real server.

In-process (the session's Spark); tests/test_cli.py starts the real commands as processes.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from faults import FileFaults
from pipeline import Pipeline, assert_mirror_equals_source

from cdc.app import runner as runner_module
from cdc.app.cli import main
from cdc.app.config import parse_config
from cdc.app.runner import JobFailed, JobRunner
from cdc.app.sandbox.mysql import Sandbox, free_port
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from cdc.spark.session import CHECKPOINT_MANAGER, FILE_CONTEXT_CHECKPOINTS, FILE_SYSTEM_CHECKPOINTS

PASSWORD_ENV = "TEST_JOB_PASSWORD"


def raw_config(box: Sandbox, database: str, workdir: Path, **source: Any) -> dict[str, Any]:
    """A job file's tree: the test database, chunk size 100, lake and checkpoint in ``workdir``."""
    base = {"hostname": box.cdc.host, "port": box.cdc.port, "username": box.cdc.user,
            "password": "${" + PASSWORD_ENV + "}", "tables": [f"{database}\\..*"], "chunk_size": 100,
            "server_id": "5400-5403"}
    return {"source": {**base, **source}, "sink": {"path": str(workdir / "lake")},
            "checkpoint": str(workdir / "checkpoint"), "parallelism": 2}


def config_of(raw: dict[str, Any]) -> JobConfig:
    return parse_config(raw, warn_plain_password=False)


def write_config(path: Path, raw: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch, mysql_server: Sandbox) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mysql_server.cdc.password)


def written(workdir: Path) -> list[str]:
    return sorted(p.name for p in workdir.iterdir() if p.name != "job.yaml")


def source_rows(box: Sandbox, database: str, table: str) -> int:
    with contextlib.closing(box.cdc.connect(database)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        return int(cur.fetchone()[0])


# --- start-up errors: one line naming the fix, exit 2, nothing written ---------------------------

@pytest.fixture
def weak_user(mysql_server: Sandbox) -> Any:
    """A user with SELECT only (no replication privileges)."""
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'weak'@'%' IDENTIFIED BY 'weak-pw-1'")
        cur.execute("GRANT SELECT ON *.* TO 'weak'@'%'")
    yield "weak"
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'weak'@'%'")


@pytest.fixture
def minimal_row_image(mysql_server: Sandbox) -> Any:
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
        try:
            yield
        finally:
            cur.execute("SET GLOBAL binlog_row_image = 'FULL'")


@pytest.mark.parametrize(("case", "message"), [
    ("unreachable", r"cannot reach MySQL at 127\.0\.0\.1:\d+: .*Check source\.hostname"),
    ("wrong_password", r"refused user 'cdc': check source\.username and source\.password"),
    ("missing_privilege", r"REPLICATION"),
    ("binlog_row_image", r"binlog_row_image is MINIMAL .* CDC needs FULL"),
    ("no_table", r"source\.tables .* matched no table"),
    ("no_key", r"nokey"),
])
def test_start_up_errors_are_one_line_and_write_nothing(
    case: str, message: str, request: pytest.FixtureRequest, mysql_server: Sandbox, database: str,
    admin: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE keyed (id INT PRIMARY KEY)")
    source: dict[str, Any] = {}
    if case == "unreachable":
        source["port"] = free_port()
    elif case == "wrong_password":
        monkeypatch.setenv(PASSWORD_ENV, "not-the-password-42")
    elif case == "missing_privilege":
        source["username"] = request.getfixturevalue("weak_user")
        monkeypatch.setenv(PASSWORD_ENV, "weak-pw-1")
    elif case == "binlog_row_image":
        request.getfixturevalue("minimal_row_image")
    elif case == "no_table":
        source["tables"] = [f"{database}\\.nothing_here"]
    elif case == "no_key":
        with admin.cursor() as cur:
            cur.execute("CREATE TABLE nokey (a INT, b VARCHAR(5))")
    path = write_config(tmp_path / "job.yaml", raw_config(mysql_server, database, tmp_path, **source))
    assert main(["run", "--config", path, "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert re.search(message, errors[0]), errors[0]
    assert "not-the-password-42" not in "\n".join(err)
    assert written(tmp_path) == [], "a failed start must write nothing"


def test_bad_startup_gtid_is_refused_before_connecting(tmp_path: Path, mysql_server: Sandbox) -> None:
    # A GTID start is supported (issue 21, tests/test_gtid_failover.py); a malformed set is refused.
    source = {"startup_mode": "specific-offset", "startup_offset": {"gtid": "0-1"}}
    with pytest.raises(ConfigError, match=r"source\.startup_offset\.gtid"):
        config_of(raw_config(mysql_server, "db", tmp_path, **source))
    assert written(tmp_path) == []


# --- startup modes -----------------------------------------------------------------------------

def insert(admin: Any, ids: range) -> None:
    with admin.cursor() as cur:
        for i in ids:  # one statement per row: distinct binlog positions
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, f"v{i}"))


@pytest.mark.parametrize(("mode", "first", "second"), [
    # initial (the default) is covered by the whole-database test below
    ("snapshot", 10, 10),         # snapshot only: later changes do not flow
    ("latest-offset", 0, 3),      # binlog from now
    ("earliest-offset", 10, 13),  # binlog from the oldest file: every insert of t
    ("specific-offset", 6, 9),    # binlog from after the 4th insert
    ("timestamp", 6, 9),          # binlog from the first transaction at/after a time (1 s later)
])
def test_startup_modes(mode: str, first: int, second: int, spark: Any, mysql_server: Sandbox, database: str,
                       admin: Any, tmp_path: Path) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    insert(admin, range(4))
    with admin.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    source: dict[str, Any] = {"startup_mode": mode}
    if mode == "timestamp":  # binlog times are whole seconds: the next second starts the range
        time.sleep(1.1)
        source["startup_timestamp_ms"] = int(time.time() * 1000)
    insert(admin, range(4, 10))
    if mode == "specific-offset":
        source["startup_offset"] = {"file": file, "pos": pos}
    config = config_of(raw_config(mysql_server, database, tmp_path, **source))
    p = Pipeline(spark, mysql_server, database, tmp_path)
    JobRunner(config, spark).run(once=True)
    assert (p.mirror("t").num_rows if (tmp_path / "lake" / database / "t").exists() else 0) == first
    insert(admin, range(10, 13))
    with admin.cursor() as cur:
        cur.execute("UPDATE t SET v = 'changed' WHERE id = 10")
    summary = JobRunner(config, spark).run(once=True)
    mirror = p.mirror("t")
    assert mirror.num_rows == second
    if mode != "snapshot":
        assert {r["id"]: r["v"] for r in mirror.to_pylist()}[10] == "changed"
    assert summary.tables[f"{database}.t"]["mirror rows"] == second


# --- a whole database, restarts, refused checkpoints ---------------------------------------------

FIVE_TABLES = [
    ("ints", "id INT PRIMARY KEY, v VARCHAR(20)", "({i}, 'v{i}')"),
    ("unsigned_big", "id BIGINT UNSIGNED PRIMARY KEY, v INT", "({big} + {i}, {i})"),
    ("strings", "code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT", "('{c}{i:04d}', {i})"),
    ("composite", "a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b)", "({i} % 40, 'k{i}', {i})"),
    ("times", "at DATETIME(3) PRIMARY KEY, v INT",
     "(TIMESTAMPADD(SECOND, {i}, '2024-01-01 00:00:00.125'), {i})"),
]
BIG = 18446744073709550000  # near the top of BIGINT UNSIGNED (max 18446744073709551615)


def create_five_tables(admin: Any, rows: int = 300) -> None:
    with admin.cursor() as cur:
        for name, columns, values in FIVE_TABLES:
            cur.execute(f"CREATE TABLE {name} ({columns})")
            cur.execute(f"INSERT INTO {name} VALUES " + ",".join(
                values.format(i=i, big=BIG, c="aBcD"[i % 4]) for i in range(rows)))


def change_five_tables(admin: Any) -> None:
    with admin.cursor() as cur:
        cur.execute("UPDATE ints SET v = 'changed' WHERE id < 5")
        cur.execute("DELETE FROM ints WHERE id BETWEEN 100 AND 109")
        cur.execute(f"INSERT INTO unsigned_big VALUES ({BIG + 500}, 1), (18446744073709551615, 2)")
        cur.execute(f"UPDATE unsigned_big SET id = id + 1000 WHERE id = {BIG + 7}")
        cur.execute("UPDATE strings SET code = 'zz-moved' WHERE code = 'a0000'")
        cur.execute("INSERT INTO strings VALUES ('Ü-umlaut', 9)")
        cur.execute("DELETE FROM composite WHERE a = 3")
        cur.execute("UPDATE composite SET v = -1 WHERE a = 4")
        cur.execute("DELETE FROM times WHERE v < 10")
        cur.execute("INSERT INTO times VALUES ('2030-06-01 12:00:00.999', 1)")


def test_whole_database_with_five_key_types_then_changes_then_restart(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
) -> None:
    create_five_tables(admin)
    # two chunks per table, all ten staged by the first batch
    config = config_of(raw_config(mysql_server, database, tmp_path, chunk_size=150, chunks_per_batch=10))
    # the first run keeps its checkpoint with Spark's default manager, as every job before
    # 2026-11-28 did (a session's own choice wins); the restart with the job's (fork_free_checkpoints)
    spark.conf.set(CHECKPOINT_MANAGER, FILE_CONTEXT_CHECKPOINTS)
    first = JobRunner(config, spark).run(once=True)
    assert first.batches >= 2 and set(first.tables) == {f"{database}.{n}" for n, *_ in FIVE_TABLES}
    assert spark.conf.get(CHECKPOINT_MANAGER) == FILE_CONTEXT_CHECKPOINTS
    spark.conf.unset(CHECKPOINT_MANAGER)
    change_five_tables(admin)
    second = JobRunner(config, spark).run(once=True)  # a restart: resumes from the checkpoint
    assert spark.conf.get(CHECKPOINT_MANAGER) == FILE_SYSTEM_CHECKPOINTS
    assert 0 < second.rows < 100, "the restart reads only the changes, not the tables again"
    p = Pipeline(spark, mysql_server, database, tmp_path)
    for table_id, schema in p.schemas().items():
        assert_mirror_equals_source(p, table_id.table, schema)
        reads = [r for r in p.changelog(table_id.table).to_pylist() if r["op"] == "r"]
        assert len(reads) == 300, f"{table_id}: the snapshot was read once, not again by the restart"
        assert second.tables[str(table_id)]["mirror rows"] == source_rows(mysql_server, database, table_id.table)


def test_checkpoint_of_another_source_is_refused(spark: Any, mysql_server: Sandbox, database: str,
                                                 admin: Any, tmp_path: Path) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1), (2)")
    JobRunner(config_of(raw_config(mysql_server, database, tmp_path)), spark).run(once=True)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    other = mysql_server.create_database()
    try:
        with contextlib.closing(mysql_server.admin.connect(other)) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        for source, message in [({"hostname": "localhost"}, r"belongs to source 127\.0\.0\.1:\d+, not localhost"),
                                ({"tables": [f"{other}\\..*"]}, f"captures database\\(s\\) {database}")]:
            runner = JobRunner(config_of(raw_config(mysql_server, database, tmp_path, **source)), spark)
            with pytest.raises(ConfigError, match=message):
                runner.run(once=True)
        # tables added to the patterns later are allowed: snapshotted, then streamed
        both = [f"{database}\\..*", f"{other}\\..*"]
        with contextlib.closing(mysql_server.admin.connect(other)) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (7)")
        after = sorted(str(p) for p in tmp_path.rglob("*"))
        assert after == before, "a refused start writes nothing"
        summary = JobRunner(config_of(raw_config(mysql_server, database, tmp_path, tables=both)), spark).run(once=True)
        assert summary.tables[f"{other}.t"]["mirror rows"] == 1
    finally:
        mysql_server.drop_database(other)


def test_a_failure_mid_run_is_one_line_and_the_next_run_resumes(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i})" for i in range(250)))
    config = config_of(raw_config(mysql_server, database, tmp_path, chunks_per_batch=1))
    faults = FileFaults(tmp_path / "faults")
    faults.arm("plan", after=1)  # the driver dies planning batch 2
    with pytest.raises(JobFailed) as info:
        JobRunner(config, spark, hooks=faults).run(once=True)
    assert str(info.value) == "injected fault at plan"
    summary = JobRunner(config, spark).run(once=True)
    assert summary.tables[f"{database}.t"]["mirror rows"] == 250
    assert summary.tables[f"{database}.t"]["changelog rows"] == 250


# --- folders whose names need quoting in a URI ------------------------------------------------------

def test_a_lake_and_checkpoint_in_a_folder_named_with_a_space_and_a_percent_sign_take_every_change(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
) -> None:
    """delta-rs names a table by a percent-encoded URI (``my%20lake``) and a catalog keeps one too:
    every local path the sink derives from them must be decoded (the mirror's merges, its deletion
    vectors, the staged-file check, the catalog's names), or no batch after the snapshot lands."""
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(250)))
    workdir = tmp_path / "my lake 100% done"
    workdir.mkdir()
    config = config_of(raw_config(mysql_server, database, workdir))
    JobRunner(config, spark).run(once=True)
    for round_ in range(2):  # the second round's updates hide rows of files the first one wrote
        with admin.cursor() as cur:
            cur.execute(f"UPDATE t SET v = 'round {round_}' WHERE id % 7 = 0")
            cur.execute(f"DELETE FROM t WHERE id % 50 = {round_ + 1}")
            cur.execute(f"INSERT INTO t VALUES ({300 + round_}, 'new')")
        summary = JobRunner(config, spark).run(once=True)  # the catalog's names are checked again
        assert summary.batches >= 1
    mirror = spark.read.format("delta").load(str(workdir / "lake" / database / "t")).collect()
    with contextlib.closing(mysql_server.cdc.connect(database)) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        source = sorted(cur.fetchall())
    assert sorted((r["id"], r["v"]) for r in mirror) == source
    assert spark.sql(f"SELECT count(*) AS n FROM {database}.t").first()["n"] == len(source)


# --- a --once run with nothing to do ---------------------------------------------------------------

def test_a_once_run_with_nothing_to_do_starts_no_spark_and_one_with_work_or_a_replay_does(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i})" for i in range(250)))
    raw = raw_config(mysql_server, database, tmp_path)
    raw["sink"]["register_tables"] = False  # names would need this session's catalog (tests/test_catalog.py)
    config = config_of(raw)
    JobRunner(config, spark).run(once=True)
    sessions: list[JobConfig] = []

    def session(c: JobConfig) -> Any:  # a tripwire: the runner asks for a session only to run Spark
        sessions.append(c)
        return spark

    monkeypatch.setattr(runner_module, "job_session", session)
    table = f"{database}.t"
    idle = JobRunner(config).run(once=True)
    assert (sessions, idle.batches) == ([], 0)
    assert (idle.tables[table]["mirror rows"], idle.tables[table]["changelog rows"]) == (250, 250)

    with admin.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (250)")
    done = JobRunner(config).run(once=True)
    assert len(sessions) == 1 and done.batches >= 1
    assert (done.tables[table]["mirror rows"], done.tables[table]["changelog rows"]) == (251, 251)

    # Spark's commit log lost its last entry (a driver killed after the sinks' commit): Spark replays it
    commits = tmp_path / "checkpoint" / "commits"
    max(commits.iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1).unlink()
    replayed = JobRunner(config).run(once=True)
    assert len(sessions) == 2
    assert (replayed.tables[table]["mirror rows"], replayed.tables[table]["changelog rows"]) == (251, 251)
    assert JobRunner(config).run(once=True).batches == 0 and len(sessions) == 2


# --- secrets -------------------------------------------------------------------------------------

def test_password_never_reaches_output_logs_or_checkpoint(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    secret = mysql_server.cdc.password
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1), (2), (3)")
    path = write_config(tmp_path / "job.yaml", raw_config(mysql_server, database, tmp_path))
    with caplog.at_level("DEBUG"):
        assert main(["-v", "run", "--config", path, "--once"]) == 0
    out, err = capfd.readouterr()
    assert "run finished" in out and "batch 1:" in caplog.text
    for text in (out, err, caplog.text):
        assert secret not in text
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.name != "job.yaml":
            assert secret.encode() not in f.read_bytes(), f"password written to {f}"

