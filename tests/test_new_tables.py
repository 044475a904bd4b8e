"""Tables that join and leave a running job (docs/concepts/schema-evolution.md, "New and dropped tables").

A continuous job runs in a thread of the test process (the real runner, the shared Spark
session) with ``source.table_discovery_interval: 1s`` while random writers change its tables.
Tables are created, written, and dropped under it; the checks are the exactness checks of the
whole-pipeline suites (tests/pipeline.py, tests/pipeline_pg.py): each mirror equals its source,
and each changelog holds one ``r`` row per key its snapshot read and every later change exactly
once, including the changes made to a new table before, while and after the job noticed it.
A driver process (tests/driver_process.py) SIGKILLed during a join, and restarted, is held to
the same checks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pipeline import (
    Pipeline,
    RandomWriter,
    assert_changelog_exact,
    assert_mirror_equals_source,
    writing,
)
from pipeline_pg import PgPipeline, PgRandomWriter
from pipeline_pg import assert_changelog_exact as assert_pg_changelog_exact
from pipeline_pg import assert_mirror_equals_source as assert_pg_mirror_equals_source

from binlog.mysql.positions import BinlogOffset
from binlog.mysql.reader import current_offset
from binlog.registry import create_dialect
from cdc.app.checkpoint import CheckpointFiles
from cdc.app.config import parse_config
from cdc.app.runner import JobPaths, JobRunner, claim_checkpoint
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.errors import ConfigError, SchemaChanged
from cdc.model.history import SchemaHistory
from cdc.model.positions import Offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.offsets import SourceOffset
from cdc.spark.state import StateStore

WAIT_S = 120.0  # the longest a step may take on a loaded 2-core machine


def wait_until(condition: Callable[[], bool], what: str, job: Job, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.thread.is_alive(), f"the job ended while waiting for {what}: {job.errors}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


class Job:
    """The real runner, continuous (not ``--once``), in a thread until :meth:`stop`."""

    def __init__(self, p: Pipeline | PgPipeline) -> None:
        self.config = p.config()
        self.runner = JobRunner(self.config, p.spark, hooks=p.faults)
        self.dialect = create_dialect(self.config.source)
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.runner.run(stop=self.stop_event)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def committed(self) -> SourceOffset | None:
        """The offset of the newest batch Spark committed."""
        return CheckpointFiles(self.config.checkpoint).committed_offset(self.dialect.offset_from_dict)

    def streams(self, tables: list[str], through: Offset) -> bool:
        """Every one of ``tables`` streams (its snapshot is done) and the job committed the log
        through ``through``."""
        end = self.committed()
        return end is not None and not end.position.is_before(through) and \
            all(end.tables.get(t) is not None and end.tables[t].state == "stream" for t in tables)

    def left(self, table: str) -> bool:
        """``table`` is no longer in the newest committed batch's offsets (the query that captured
        it ran on until it had read the log past its drop, then restarted without it)."""
        end = self.committed()
        return end is not None and table not in end.tables

    def wrote(self, table: str) -> bool:
        """The job committed rows of ``table`` (``db.table``) in this run."""
        return any(sum(r.tables.get(table, (0, 0))) for r in self.runner.batches)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=WAIT_S)
        assert not self.thread.is_alive(), "the job did not stop"


@contextlib.contextmanager
def running(p: Pipeline | PgPipeline) -> Iterator[Job]:
    job = Job(p)
    job.thread.start()
    try:
        yield job
    finally:
        job.stop()
    assert not job.errors, job.errors


def table_schemas(job: Job, *names: str) -> dict[TableId, TableSchema]:
    """The tables' definitions as the job's dialect reads them (no start-up checks)."""
    with contextlib.closing(job.dialect.connect()) as conn:
        found = job.dialect.discover_tables(conn, job.config.source.tables)
        return {t: job.dialect.table_schema(conn, t) for t in found if t.table in names}


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def mysql_position(box: Sandbox) -> BinlogOffset:
    with contextlib.closing(box.admin.connect()) as conn:
        return current_offset(conn)


def execute(box: Sandbox, database: str, *statements: str) -> None:
    with contextlib.closing(box.admin.connect(database)) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


TABLE = "CREATE TABLE {} (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL DEFAULT 0)"


# ---- no server ------------------------------------------------------------------------------

def source_config(**keys: Any) -> Any:
    raw = {"source": {"username": "cdc", "password": "pw", "tables": ["shop\\..*"], **keys},
           "sink": {"type": "delta", "path": "./lake"}, "checkpoint": "./checkpoints/shop"}
    return parse_config(raw, warn_plain_password=False).source


def test_the_discovery_interval_is_a_duration_or_off() -> None:
    assert source_config().discovery_interval_s == 30.0
    assert source_config(table_discovery_interval="500ms").discovery_interval_s == 0.5
    assert source_config(table_discovery_interval="0").discovery_interval_s is None
    assert source_config(table_discovery_interval="off").discovery_interval_s is None
    with pytest.raises(ConfigError, match=r"source\.table_discovery_interval: .*duration like '500ms'"):
        source_config(table_discovery_interval="often")


def test_a_database_whose_captured_tables_were_dropped_keeps_its_checkpoint(tmp_path: Path) -> None:
    """Its last captured table dropped, a database no longer appears in discovery: with the same
    ``tables`` patterns the checkpoint is still the job's; patterns that drop it are refused."""
    store, paths = StateStore(str(tmp_path / "state")), JobPaths(str(tmp_path / "checkpoint"), str(tmp_path / "state"))
    source = {"type": "mysql", "hostname": "db", "port": 3306, "tables": ["(shop|old)\\..*"]}
    first = claim_checkpoint(store, paths, {**source, "databases": ["old", "shop"]})
    assert claim_checkpoint(store, paths, {**source, "databases": ["shop"]}) == first
    assert store.read_json("source.json")["databases"] == ["old", "shop"]
    with pytest.raises(ConfigError, match=r"captures database\(s\) old that source.tables"):
        claim_checkpoint(store, paths, {**source, "tables": ["shop\\..*"], "databases": ["shop"]})


def test_a_table_joins_with_a_version_of_its_definition_when_its_stored_history_is_stale(tmp_path: Path) -> None:
    """SchemaHistory.joined: a table whose history (written by a driver killed before any batch
    read it) ends with another definition than the catalog's now gets a version at the join's
    position, which rows after it find; the same definition, a second call, or no history make
    none; under ``exception`` the job stops instead."""
    from binlog.mysql.types import mysql_column, mysql_table

    t = TableId("shop", "t_new")
    columns = (mysql_column("id", "int", "int(11)", False), mysql_column("v", "varchar", "varchar(40)", True))
    before = mysql_table(t, columns, ("id",))
    now = mysql_table(t, (*columns, mysql_column("extra", "varchar", "varchar(20)", True)), ("id",))
    store = StateStore(str(tmp_path / "state"))
    assert SchemaHistory(store).joined(now, (1, 500), "mysql-bin.000001:500") is None  # no history: start()
    SchemaHistory(store).start(before)  # the killed driver's query
    assert SchemaHistory(store).joined(before, (1, 500), "mysql-bin.000001:500") is None  # read back equal

    with pytest.raises(SchemaChanged, match=r"behavior is 'exception'.*new snapshot"):
        SchemaHistory(store, "exception").joined(now, (1, 500), "mysql-bin.000001:500")
    assert len(SchemaHistory(store).versions(t)) == 1
    made = SchemaHistory(store).joined(now, (1, 500), "mysql-bin.000001:500")
    assert made is not None and made.version == 1 and made.schema == now
    assert "when the table joined the running job" in (made.ddl or "")
    history = SchemaHistory(store)  # as an executor's reader loads it
    assert history.at(t, (1, 499)) == history.versions(t)[0] and history.at(t, (1, 500)) == made
    assert history.joined(now, (1, 900), "mysql-bin.000001:900") is None  # already its latest
    assert history.sink_schema(t, 1).column_names == ["id", "v", "extra"]  # lenient: the sinks add it


# ---- real servers ---------------------------------------------------------------------------


@pytest.mark.slow  # a continuous job with two query restarts: about 40 s on a loaded 2-core machine
def test_a_created_table_joins_and_a_dropped_one_leaves_while_the_job_runs(
    spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="cdc.app")
    db = database
    execute(mysql_server, db, TABLE.format("t_a"), TABLE.format("t_c"),
            "INSERT INTO t_a (id, v) VALUES " + ", ".join(f"({i}, 'a{i}')" for i in range(0, 3000, 10)),
            "INSERT INTO t_c (id, v) VALUES " + ", ".join(f"({i}, 'c{i}')" for i in range(50)))
    p = Pipeline(spark, mysql_server, db, tmp_path / "job",
                 source={"tables": [f"{db}\\.t_.*"], "table_discovery_interval": "1s"},
                 job={"trigger_interval": "300ms"})
    p.started_at = mysql_position(mysql_server)
    a_writer = RandomWriter(mysql_server, db, "t_a", seed=1, pause_s=0.01)
    with running(p) as job, writing(a_writer):
        wait_until(lambda: job.wrote(f"{db}.t_a"), "the snapshot of t_a", job)
        # t_b: rows before the job can notice it (the CREATE and the first rows in one go), then a
        # writer across the notice, the query's restart, the snapshot's chunks and after
        execute(mysql_server, db, TABLE.format("t_b"),
                "INSERT INTO t_b (id, v) VALUES " + ", ".join(f"({i}, 'b{i}')" for i in range(0, 3000, 7)),
                "UPDATE t_b SET n = 5 WHERE id < 700", "DELETE FROM t_b WHERE id BETWEEN 700 AND 1400",
                TABLE.format("other"), "INSERT INTO other (id) VALUES (1), (2)",
                "CREATE TABLE t_nokey (x INT, y TEXT)", "INSERT INTO t_nokey VALUES (1, 'one')")
        created = mysql_position(mysql_server)
        b_writer = RandomWriter(mysql_server, db, "t_b", seed=2, pause_s=0.01)
        with writing(b_writer):
            wait_until(lambda: job.streams([f"{db}.t_b"], created), "t_b to join and finish its snapshot", job)
            time.sleep(1)  # changes of t_b after its snapshot, too
        c_rows = p.source_rows("t_c")
        c_schema = table_schemas(job, "t_c")[TableId(db, "t_c")]
        execute(mysql_server, db, "DROP TABLE t_c")
        wait_until(lambda: bool(messages(caplog, f"captured table {db}.t_c is gone")), "the drop to be seen", job)
        execute(mysql_server, db, "INSERT INTO t_b (id, v) VALUES (100000, 'after the drop')")
        a_writer.stop()
        end = mysql_position(mysql_server)
        wait_until(lambda: job.streams([f"{db}.t_a", f"{db}.t_b"], end) and job.left(f"{db}.t_c"),
                   "the job to catch up without t_c after the drop", job)

    schemas = table_schemas(job, "t_a", "t_b")
    for table in ("t_a", "t_b"):
        assert_mirror_equals_source(p, table, schemas[TableId(db, table)])
        assert_changelog_exact(p, table, schemas[TableId(db, table)])
    reads = [r for r in p.changelog("t_b").to_pylist() if r["op"] == "r"]
    changes = [r for r in p.changelog("t_b").to_pylist() if r["op"] != "r"]
    assert reads and changes, "t_b's first rows came with its snapshot, its later changes from the log"
    assert b_writer.statements > 100 and a_writer.statements > 100
    # the dropped table's Delta tables stay, readable, with its rows and changes up to the drop
    assert sorted(r["id"] for r in p.mirror("t_c").to_pylist()) == sorted(r["id"] for r in c_rows)
    assert_changelog_exact(p, "t_c", c_schema)
    # a table that does not match is ignored; a keyless one is named with the fix, not captured
    assert not (p.lake / db / "other").exists() and not (p.lake / db / "t_nokey").exists()
    assert len(messages(caplog, f"table {db}.t_b matches source.tables: it joins")) == 1
    [warning] = messages(caplog, f"table {db}.t_nokey matches source.tables but cannot join the running job yet")
    assert "chunk_key_columns" in warning, warning
    assert not messages(caplog, f"{db}.other")


def test_the_changes_made_just_before_a_drop_reach_the_sinks_before_the_table_leaves(
    spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A captured table written and dropped right after a batch: the watcher (every 200 ms) sees
    it gone long before the next batch (every 3 s) would read those writes. The query runs on until
    it has committed the log through the drop, so they reach the sinks, then it leaves."""
    caplog.set_level(logging.INFO, logger="cdc.app")
    db = database
    execute(mysql_server, db, TABLE.format("t_a"), TABLE.format("t_c"),
            "INSERT INTO t_a (id, v) VALUES (1, 'a')",
            "INSERT INTO t_c (id, v) VALUES " + ", ".join(f"({i}, 'c{i}')" for i in range(50)))
    p = Pipeline(spark, mysql_server, db, tmp_path / "job",
                 source={"tables": [f"{db}\\.t_.*"], "table_discovery_interval": "200ms"},
                 job={"trigger_interval": "3s"})
    p.started_at = mysql_position(mysql_server)
    with running(p) as job:
        start = mysql_position(mysql_server)
        wait_until(lambda: job.streams([f"{db}.t_a", f"{db}.t_c"], start), "both snapshots", job)
        c_schema = table_schemas(job, "t_c")[TableId(db, "t_c")]
        files = CheckpointFiles(job.config.checkpoint)
        last = files.last("commits")
        execute(mysql_server, db, "INSERT INTO t_a (id, v) VALUES (2, 'a')")  # a batch to wait for
        wait_until(lambda: files.last("commits") != last, "a batch to commit", job)
        # at once after that batch: the next one is about 3 s away, the watcher's look 0.2 s
        execute(mysql_server, db, "UPDATE t_c SET v = 'last words' WHERE id < 10",
                "DELETE FROM t_c WHERE id >= 40", "INSERT INTO t_c (id, v) VALUES (1000, 'born late')")
        c_rows = p.source_rows("t_c")
        execute(mysql_server, db, "DROP TABLE t_c")
        wait_until(lambda: bool(messages(caplog, f"captured table {db}.t_c is gone")), "the drop to be seen", job)
        execute(mysql_server, db, "INSERT INTO t_a (id, v) VALUES (3, 'after the drop')")
        end = mysql_position(mysql_server)
        wait_until(lambda: job.streams([f"{db}.t_a"], end) and job.left(f"{db}.t_c"),
                   "the job to catch up without t_c after the drop", job)
    mirror = sorted((r["id"], r["v"]) for r in p.mirror("t_c").to_pylist())
    assert mirror == sorted((r["id"], r["v"]) for r in c_rows), "the mirror as the table was at its drop"
    assert_changelog_exact(p, "t_c", c_schema)
    assert messages(caplog, "the query runs on until it has read the log through")
    assert_mirror_equals_source(p, "t_a", table_schemas(job, "t_a")[TableId(db, "t_a")])


KILL_POINTS = {  # where in a join the driver is SIGKILLed: all before the restarted query's first commit
    "held": "the job held its query for the new table (hold.json written; the old query ends)",
    "planning": "the restarted query, its stream reader made, plans its first batch (held by a pause)",
    "staging": "the restarted query's first batch read the new table's first chunk (held by a pause "
               "after the SELECT, before the staged file is written)",
}


@pytest.mark.slow  # a snapshot run, two driver processes (one SIGKILLed mid-join), a catch-up run
@pytest.mark.parametrize("point", [
    "held",
    "planning",
    "staging",
])
def test_a_driver_killed_while_a_table_joins_recovers_exactly(
    point: str, spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path,
) -> None:
    """SIGKILL of the driver process (its JVM and Python workers with it) during a join, before
    the restarted query's first commit (:data:`KILL_POINTS`). While it is down the new table gets
    a column, which some rows fill; a new driver takes the join over under the writers, and a
    catch-up run ends: the new table's rows arrive once, with the new column, and the other table
    loses nothing."""
    from driver_process import Driver, stages, table_state

    db, new = database, f"{database}.t_new"
    execute(mysql_server, db, TABLE.format("t_a"),
            "INSERT INTO t_a (id, v) VALUES " + ", ".join(f"({i}, 'a{i}')" for i in range(0, 3000, 10)))
    p = Pipeline(spark, mysql_server, db, tmp_path / "job",
                 source={"tables": [f"{db}\\.t_.*"], "table_discovery_interval": "1s"})
    p.started_at = mysql_position(mysql_server)
    p.run()  # t_a's snapshot: in the drivers only t_new stages chunks
    a_writer = RandomWriter(mysql_server, db, "t_a", seed=3, pause_s=0.005)
    new_writer = RandomWriter(mysql_server, db, "t_new", seed=4, key_space=2500, pause_s=0.005)
    hold = p.state_dir / "hold.json"
    with writing(a_writer):
        driver = Driver(p.raw_config(), p.workdir)
        try:
            if point == "staging":
                driver.pause_at("stage")  # only t_new stages chunks in the drivers
            driver.wait_for_batches(1)  # t_a streams
            execute(mysql_server, db, TABLE.format("t_new"))
            created = mysql_position(mysql_server)
            execute(mysql_server, db, "INSERT INTO t_new (id, v) VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(2000)))
            with writing(new_writer):
                if point == "staging":
                    driver.wait_until(lambda: driver.paused("stage"), KILL_POINTS[point])
                else:
                    driver.wait_until(hold.exists, "the job to hold its query for t_new")
                    if point == "planning":  # the held query plans nothing, so only the restarted one stops
                        driver.pause_at("plan")
                        driver.wait_until(lambda: driver.paused("plan"), KILL_POINTS[point])
                driver.kill()
                planned, committed = driver.planned(), driver.committed()
                assert table_state(committed, new) is None, "killed before the restarted query's first commit"
                assert stages(planned, new) == (point == "staging"), planned
                assert hold.exists() == (point == "held")
                execute(mysql_server, db, "ALTER TABLE t_new ADD COLUMN extra VARCHAR(20)",
                        "UPDATE t_new SET extra = CONCAT('x', id) WHERE id < 500")
                # a new driver takes the join over while the writers go on
                driver = Driver(p.raw_config(), p.workdir)
                driver.wait_until(lambda: table_state(driver.committed(), new) == "stream", "t_new to finish its snapshot")
                driver.wait_for_batches(2)  # changes of t_new after its snapshot, too
        finally:
            driver.kill()
    p.run()  # catch up: the mirror too (its MERGE runs behind the commits; the SIGKILL cut it short)
    schemas = {s.table_id.table: s for s in p.schemas().values()}
    assert_mirror_equals_source(p, "t_a", schemas["t_a"])
    assert_changelog_exact(p, "t_a", schemas["t_a"])
    # The reference log of t_new is decoded with the job's history of t_new, which starts at the
    # definition the job read when t_new joined. Killed while held, that definition has the column
    # added while the job was down: a reader from before the CREATE follows the CREATE and the ALTER
    # itself. Killed while staging, the job followed the ALTER (its version 1): the reader starts
    # after the CREATE, which it would otherwise take for a DDL before that version. Killed while
    # planning, the first driver had recorded version 0 without the column; no batch read t_new's
    # log, so the ALTER was not followed, and the new driver recorded the definition it read as
    # version 1 at the position where t_new joined its offsets: the reader starts there (every row
    # the job emitted is after it), as the job's history does not describe the log before it.
    if point == "staging":
        p.started_at = created
    if point == "planning":
        versions = StateStore(str(p.state_dir)).schema_versions(TableId(db, "t_new"))
        assert [v["version"] for v in versions] == [0, 1], versions
        assert "when the table joined the running job" in versions[1]["ddl"], versions[1]
        assert "extra" in [c["name"] for c in versions[1]["schema"]["columns"]]
        file, pos = versions[1]["position"].rsplit(":", 1)
        p.started_at = BinlogOffset(file, int(pos))
    assert_mirror_equals_source(p, "t_new", schemas["t_new"])
    assert_changelog_exact(p, "t_new", schemas["t_new"])
    log = p.changelog("t_new").to_pylist()
    assert {r["op"] for r in log} >= {"r", "c", "u", "d"}, "t_new's rows from its snapshot, then its changes"
    assert any(r["extra"] is not None for r in p.mirror("t_new").to_pylist())
    assert a_writer.statements > 100 and new_writer.statements > 100


@pytest.mark.slow  # a continuous job with one query restart: about 30 s on a loaded 2-core machine
def test_a_table_dropped_during_its_snapshot_leaves_and_the_job_goes_on(
    spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The next chunk of a dropped table cannot be split or read, and the query fails; the job
    finds the table gone and starts a new query without it (the interval is long, so no regular
    look sees the drop first)."""
    caplog.set_level(logging.INFO, logger="cdc.app")
    db = database
    execute(mysql_server, db, TABLE.format("t_a"), TABLE.format("t_big"), "INSERT INTO t_a (id) VALUES (1), (2)",
            "INSERT INTO t_big (id, v) VALUES " + ", ".join(f"({i}, 'big{i}')" for i in range(3000)))
    p = Pipeline(spark, mysql_server, db, tmp_path / "job",
                 source={"tables": [f"{db}\\.t_.*"], "table_discovery_interval": "10m", "chunks_per_batch": 1},
                 job={"trigger_interval": "300ms"})
    p.started_at = mysql_position(mysql_server)
    with running(p) as job:
        wait_until(lambda: job.wrote(f"{db}.t_big"), "the first chunks of t_big", job)
        execute(mysql_server, db, "DROP TABLE t_big", "INSERT INTO t_a (id, v) VALUES (3, 'after the drop')",
                "UPDATE t_a SET n = 7 WHERE id = 1")
        end = mysql_position(mysql_server)
        # The batch that read the DROP can commit (its chunk was staged before) before the next
        # one fails on t_big and the job restarts without it: wait for a batch of the new query.
        wait_until(lambda: job.streams([f"{db}.t_a"], end)
                   and f"{db}.t_big" not in job.committed().tables,  # type: ignore[union-attr]
                   "the job to go on without t_big", job)
    assert messages(caplog, "after a captured table was dropped: it starts again without it")
    schemas = table_schemas(job, "t_a")
    assert_mirror_equals_source(p, "t_a", schemas[TableId(db, "t_a")])
    assert_changelog_exact(p, "t_a", schemas[TableId(db, "t_a")])
    partial = p.mirror("t_big").to_pylist()  # what its snapshot emitted before the drop: readable
    assert 0 < len(partial) < 3000 and all(r["v"] == f"big{r['id']}" for r in partial)


@pytest.mark.slow  # a continuous job with two query restarts: about 40 s on a loaded 2-core machine
def test_postgres_a_created_table_joins_through_the_publication_the_job_manages(
    spark: Any, postgres_server: PostgresSandbox, pg_database: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The job creates its publication FOR TABLE a. A new table b the CDC role owns is added to it
    (ALTER PUBLICATION ... ADD TABLE) and joins; a table c it may not add is named with the exact
    statement, and joins once an owner ran it."""
    caplog.set_level(logging.INFO, logger="cdc.app")
    p = PgPipeline(spark, postgres_server, pg_database, tmp_path / "job",
                   source={"publication_name": "job_pub", "table_discovery_interval": "1s"},
                   job={"trigger_interval": "300ms"})
    s, cdc = p.schema, postgres_server.cdc.user
    with contextlib.closing(p.admin()) as conn:
        conn.execute(f'GRANT CREATE ON DATABASE "{pg_database}" TO "{cdc}"')  # to create its publication
        conn.execute(TABLE.format("a"))
        conn.execute(f'ALTER TABLE a OWNER TO "{cdc}"')
        conn.execute("INSERT INTO a (id, v) SELECT i, 'a' || i FROM generate_series(0, 2999, 10) i")
    p.start_reference()
    a_writer = PausedPgWriter(p, "a", seed=1)
    with running(p) as job, writing(a_writer):
        wait_until(lambda: job.wrote(f"{s}.a"), "the snapshot of a", job)
        with contextlib.closing(p.admin()) as conn:
            conn.execute(TABLE.format("b"))
            conn.execute(f'ALTER TABLE b OWNER TO "{cdc}"')
            conn.execute("INSERT INTO b (id, v) SELECT i, 'b' || i FROM generate_series(0, 2999, 7) i")
            conn.execute(TABLE.format("c"))  # owned by the admin: the CDC role cannot publish it
            conn.execute("INSERT INTO c (id, v) SELECT i, 'c' || i FROM generate_series(0, 99) i")
        created = pg_position(p)
        b_writer = PausedPgWriter(p, "b", seed=2)
        with writing(b_writer):
            wait_until(lambda: job.streams([f"{s}.b"], created), "b to join and finish its snapshot", job)
        statement = f'ALTER PUBLICATION "job_pub" ADD TABLE "{s}"."c";'
        wait_until(lambda: bool(messages(caplog, statement)), "the statement that publishes c", job)
        with contextlib.closing(p.admin()) as conn:
            conn.execute(statement)
            conn.execute("UPDATE c SET n = 1 WHERE id < 50")
        a_writer.stop()
        end = pg_position(p)
        wait_until(lambda: job.streams([f"{s}.a", f"{s}.b", f"{s}.c"], end), "c to join", job)

    schemas = table_schemas(job, "a", "b", "c")
    for table in ("a", "b", "c"):
        assert_pg_mirror_equals_source(p, table, schemas[TableId(s, table)])
        assert_pg_changelog_exact(p, table, schemas[TableId(s, table)])
    assert [r for r in p.changelog("b").to_pylist() if r["op"] != "r"], "b's later changes came from the log"
    [warning] = messages(caplog, f"table {s}.c matches source.tables but cannot join the running job yet")
    assert statement in warning


class PausedPgWriter(PgRandomWriter):
    """:class:`PgRandomWriter` with a pause between statements (a 2-core machine runs the job too)."""

    pause_s = 0.01


def pg_position(p: PgPipeline) -> Offset:
    from binlog.postgres.positions import LsnOffset

    with contextlib.closing(p.admin()) as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        return LsnOffset.parse(row[0])


