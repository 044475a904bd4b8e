"""A captured table dropped and created again under the same name (docs/concepts/schema-evolution.md, "New
and dropped tables").

The table leaves the job's offsets when the job finds it gone, and joins them again, with a
snapshot of its own, when it is back. Its sink tables stay as they were meanwhile, so the new
snapshot's ``r`` rows must be upserted by key, not appended: the mirror never holds a key twice,
every key of the new table equals its source row, the old table's rows whose keys the new one
lacks stay (a DROP deletes no rows in the sinks), and the changelog holds each new snapshot row
and each later change exactly once, also across a crash and replay while the new snapshot is
committed.

In these tests the old table has keys -300..299 and the new one 0..599 (0..299 with other
values) plus what a random writer (keys 0..899) does to it: keys -300..-1 are the old table's only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest
from faults import InjectedFault
from pipeline import (
    PACE_S,
    Pipeline,
    RandomWriter,
    _assert_log_exact,
    _identity,
    _normalize,
    kafka_sink,
    writing,
)
from test_new_tables import execute, messages, mysql_position, running, table_schemas, wait_until

from binlog.mysql.positions import BinlogOffset
from cdc.app.runner import JobFailed
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.schema import TableId, TableSchema
from cdc.spark.commit import BatchCommitter, BatchRecord
from cdc.spark.layout import MANIFEST_COLUMN
from cdc.spark.offsets import SourceOffset, TableProgress
from cdc.spark.planner import Planner, PlannerOptions
from cdc.spark.state import StateStore
from sinks.base import SinkWriter, Staged, StreamKind

TABLE = "CREATE TABLE {} (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL DEFAULT 0)"
OLD_KEYS = range(-300, 300)
NEW_KEYS = range(0, 600)
OLD_ONLY = range(-300, 0)  # no writer touches them: they stay in the mirror as the old table left them


# ---- no server ------------------------------------------------------------------------------

def _offset(tables: dict[str, TableProgress], left: tuple[str, ...] = ()) -> SourceOffset:
    return SourceOffset(BinlogOffset("mysql-bin.000001", 4), 0, tables, left=left)


def test_a_table_that_left_the_offsets_joins_them_again_marked_rejoined(tmp_path: Path) -> None:
    """The planner records a table that leaves; when it joins again its progress is ``rejoined``
    (kept in the offset JSON, through every state); a table new to the checkpoint is not."""
    def planner(*names: str) -> Planner:
        schemas = cast(dict[TableId, TableSchema], {TableId("shop", n): None for n in names})
        return Planner(cast(Any, None), schemas, StateStore(str(tmp_path / "state")), PlannerOptions())

    start = _offset({"shop.a": TableProgress("stream"), "shop.t": TableProgress("stream")})
    tables, left = planner("a")._with_current_tables(start)
    assert set(tables) == {"shop.a"} and left == ("shop.t",)

    after_drop = SourceOffset.from_dict(json.loads(json.dumps(_offset(tables, left).to_dict())),
                                        lambda d: BinlogOffset(d["file"], d["pos"]))
    assert after_drop.left == ("shop.t",)
    tables, left = planner("a", "t", "u")._with_current_tables(after_drop)
    assert tables["shop.t"] == TableProgress("pending", rejoined=True), "back: its snapshot is upserted"
    assert tables["shop.u"] == TableProgress("pending"), "new to the checkpoint: appended (the bulk path)"
    assert not tables["shop.a"].rejoined and left == ()

    for progress in (TableProgress("snapshot", 2, 1, 100, {}, False, rejoined=True),
                     TableProgress("stream", rejoined=True), TableProgress("stream")):
        assert TableProgress.from_dict(json.loads(json.dumps(progress.to_dict()))) == progress
    assert "rejoined" not in TableProgress("stream").to_dict(), "offsets of other tables unchanged"
    assert "left" not in _offset(tables).to_dict()


def test_snapshot_reads_staged_as_changes_go_first_and_count_as_snapshot_rows() -> None:
    """BatchCommitter.group: a rejoined table's ``r`` rows (:attr:`Staged.reads`) reach the sinks as
    changes, before the batch's changes of the table (their keys' later changes), and the batch
    record counts them as snapshot rows."""
    from binlog.mysql.types import mysql_column, mysql_table

    t = TableId("shop", "t")
    schema = mysql_table(t, (mysql_column("id", "int", "int(11)", False),), ("id",))
    staged = [Staged(0, "shop.t", "changes", (1, 900), 3, [{"file": "after-ddl"}]),
              Staged(0, "shop.t", "changes", (), 50, [{"file": "reads"}], reads=True),
              Staged(0, "shop.t", "changes", (1, 400), 2, [{"file": "stream"}])]
    manifests = pa.table({MANIFEST_COLUMN: [json.dumps([s.to_dict() for s in staged])]})
    record = BatchRecord(7)
    [[batch]] = BatchCommitter({t: schema}, [cast(Any, None)]).group(manifests, record)
    assert [i["file"] for i in batch.changes] == ["reads", "stream", "after-ddl"]
    assert not batch.snapshot
    assert record.tables == {"shop.t": (50, 5)} and (record.snapshot_rows, record.change_rows) == (50, 5)
    assert Staged.from_dict(staged[1].to_dict()) == staged[1]
    assert "reads" not in staged[0].to_dict()


class _Recording(SinkWriter):
    """A writer that stages nothing and records what it was handed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, list[str]]] = []

    def write(self, schema: TableSchema, rows: pa.Table, stream: StreamKind) -> list[dict[str, Any]]:
        self.calls.append((stream, rows.num_rows, sorted(set(rows["op"].to_pylist()))))
        return [{"file": stream}]


@pytest.mark.parametrize("rejoined", [False, True])
def test_an_emit_task_stages_a_rejoined_tables_rows_as_changes(rejoined: bool, tmp_path: Path) -> None:
    """The executor side (cdc/spark/tasks.py): a chunk of a table that joined again is handed to
    the sinks as ``changes`` (``op='r'`` rows, upserted), marked as reads; any other chunk as
    ``snapshot`` (appended: the bulk path)."""
    from binlog.mysql.types import mysql_column, mysql_table
    from cdc.model.envelope import snapshot_envelope, source_block
    from cdc.spark.layout import StreamLayout
    from cdc.spark.tasks import TaskContext, _Pending

    t = TableId("shop", "t")
    schema = mysql_table(t, (mysql_column("id", "int", "int(11)", False),
                             mysql_column("v", "varchar", "varchar(40)", True)), ("id",))
    writer = _Recording()
    ctx = TaskContext(dialect=cast(Any, None), schemas={t: schema}, store=StateStore(str(tmp_path / "state")),
                      layout=StreamLayout([schema], manifests=True), writers=(writer,))
    source = source_block("mysql", "cdc", t, 1, "true", {"server_id": 0, "file": "mysql-bin.000001",
                                                         "pos": 4, "row": 0})
    envelope = snapshot_envelope(schema, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), source)
    pending = _Pending(ctx)
    batches = [*pending.add(t, envelope, rejoined), *pending.flush()]
    assert writer.calls == [("changes" if rejoined else "snapshot", 3, ["r"])]
    [staged] = [Staged.from_dict(d) for b in batches for text in b.column(MANIFEST_COLUMN).to_pylist()
                for d in json.loads(text)]
    assert (staged.stream, staged.reads, staged.first, staged.rows) == \
        ("changes" if rejoined else "snapshot", rejoined, (), 3)


# ---- real servers ---------------------------------------------------------------------------

def create_old(box: Sandbox, db: str) -> None:
    execute(box, db, TABLE.format("t"), TABLE.format("keep"),
            "INSERT INTO t (id, v) VALUES " + ", ".join(f"({i}, 'old{i}')" for i in OLD_KEYS),
            "INSERT INTO keep (id, v) VALUES " + ", ".join(f"({i}, 'k{i}')" for i in range(50)))


def change_old(box: Sandbox, db: str) -> None:
    """Changes of the old table after its snapshot (on keys both tables hold and on old-only keys)."""
    execute(box, db, "UPDATE t SET v = CONCAT('changed', id), n = 1 WHERE id % 7 = 0",
            "DELETE FROM t WHERE id IN (-299, -298, 5, 6)", "INSERT INTO t (id, v) VALUES (-1000, 'old-only insert')")


def create_new(box: Sandbox, db: str) -> BinlogOffset:
    """The table again, same definition, with rows whose keys overlap the old ones; the binlog
    position right after its CREATE (the new table's log starts there)."""
    execute(box, db, TABLE.format("t"))
    created = mysql_position(box)
    execute(box, db, "INSERT INTO t (id, v, n) VALUES " + ", ".join(f"({i}, 'new{i}', 2)" for i in NEW_KEYS))
    return created


def assert_recreated(p: Pipeline, schema: TableSchema, old_rows: list[dict[str, Any]], created: BinlogOffset,
                     log: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The mirror holds each key once: the new table's rows as in the source, and the old table's
    rows whose keys the new one lacks (when its snapshot reads them), as the old table left them. The changelog (or ``log``,
    change rows read from another sink) holds, from the new table's CREATE on, one ``r`` row per
    key its snapshot read and each later change exactly once. Returns those change rows."""
    key = ("id",)
    mirror = _normalize(p.mirror("t").to_pylist(), schema)
    counts = Counter(_identity(r, key) for r in mirror)
    twice = sorted(k for k, n in counts.items() if n > 1)
    assert not twice, f"keys held twice by the mirror: {twice[:10]} ({len(twice)} in all)"
    source = {_identity(r, key): r for r in _normalize(p.source_rows("t"), schema)}
    by_key = {_identity(r, key): r for r in mirror}
    missing = sorted(set(source) - set(by_key))
    assert not missing, f"keys of the new table missing from the mirror: {missing[:10]}"
    differ = [(by_key[k], source[k]) for k in sorted(source) if by_key[k] != source[k]]
    assert not differ, f"{len(differ)} rows differ from the new table (mirror, source): {differ[:3]}"
    old = {_identity(r, key): r for r in _normalize(old_rows, schema)}
    kept = {k: r for k, r in old.items() if k[0] < 0}  # the old table's only keys
    assert {k: by_key.get(k) for k in kept} == kept, "the old table's rows whose keys the new one lacks stay"
    # and so does an old row whose key the new table deleted before its snapshot read it (the
    # snapshot never saw the key, the delete came before the key's chunk: nothing of it flows)
    extra = {k: by_key[k] for k in set(by_key) - set(source)}
    assert extra == {k: old.get(k) for k in extra}, "keys the new table lacks hold the old table's rows"

    rows = p.changelog("t").to_pylist() if log is None else log
    new = [r for r in rows if (r["source"]["file"], r["source"]["pos"]) >= (created.file, created.pos)]
    p.started_at = created  # the reference log: the new table's, from its CREATE on
    _assert_log_exact(p, "t", schema, new)
    reads = [r for r in new if r["op"] == "r"]
    assert reads and len(reads) < len(new), "the new table's snapshot, then its changes"
    return new


def pipeline(spark: Any, box: Sandbox, db: str, workdir: Path, **job: Any) -> Pipeline:
    p = Pipeline(spark, box, db, workdir, source={"tables": [f"{db}\\.(t|keep)"], "table_discovery_interval": "1s"},
                 job=job)
    p.started_at = mysql_position(box)
    return p


@pytest.mark.slow  # a continuous job with two query restarts: about 60 s on a loaded 2-core machine
def test_a_table_dropped_and_created_again_holds_each_key_once_in_the_mirror(
    spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The running job (discovery every second) sees the drop, goes on without the table, and
    takes the new table in with a snapshot that upserts by key, while a writer changes it."""
    caplog.set_level(logging.INFO, logger="cdc")
    db, name = database, f"{database}.t"
    create_old(mysql_server, db)
    p = pipeline(spark, mysql_server, db, tmp_path / "job", trigger_interval="300ms")
    with running(p) as job:
        wait_until(lambda: job.streams([name], mysql_position(mysql_server)), "the old table's snapshot", job)
        change_old(mysql_server, db)
        changed = mysql_position(mysql_server)  # the job reads them before the drop: a table that
        wait_until(lambda: job.streams([name], changed), "the old table's changes", job)  # left is not read
        old_rows = p.source_rows("t")
        execute(mysql_server, db, "DROP TABLE t")
        wait_until(lambda: bool(messages(caplog, f"captured table {name} is gone")), "the drop to be seen", job)
        wait_until(lambda: name in (job.committed() or _offset({})).left, "the table to leave the offsets", job)
        created = create_new(mysql_server, db)
        writer = RandomWriter(mysql_server, db, "t", seed=31, key_space=900, pause_s=0.01)
        with writing(writer):
            wait_until(lambda: job.streams([name], created), "the new table to join and finish its snapshot", job)
            time.sleep(1)  # changes of the new table after its snapshot, too
        end = mysql_position(mysql_server)
        wait_until(lambda: job.streams([name], end), "the job to catch up", job)
        offset = job.committed()
        assert offset is not None and offset.tables[name].rejoined and name not in offset.left
    schema = table_schemas(job, "t")[TableId(db, "t")]
    new = assert_recreated(p, schema, old_rows, created)
    assert writer.statements > 50
    reads = sum(1 for op in p.changelog("t")["op"].to_pylist() if op == "r")  # both tables' snapshots
    assert sum(b.tables.get(name, (0, 0))[0] for b in job.runner.batches) == reads, \
        "the new snapshot's rows are counted as snapshot rows"
    assert any(r["op"] == "r" for r in new)


def _recreate_under_writer(p: Pipeline, box: Sandbox, db: str) -> tuple[list[dict[str, Any]], BinlogOffset, RandomWriter]:
    """Old table snapshotted and changed, dropped (an available-now run without it), then created
    again with rows; a writer on the new table, not started."""
    create_old(box, db)
    p.run()
    change_old(box, db)
    p.run()  # the old table's changes: the run after the drop no longer reads its log
    old_rows = p.source_rows("t")
    execute(box, db, "DROP TABLE t")
    p.run()  # the table leaves the offsets
    created = create_new(box, db)
    return old_rows, created, RandomWriter(box, db, "t", seed=37, key_space=900, pause_s=0.005)


@pytest.mark.slow  # five available-now runs (or a driver process): about 60 s on a loaded 2-core machine
@pytest.mark.parametrize("point", ["after_sink_commit", "mirror", "sigkill"])
def test_a_recreated_table_crashed_while_its_snapshot_commits_recovers_exactly(
    point: str, spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path,
) -> None:
    """A crash in the batch that commits the new table's first snapshot rows: after the sinks
    committed it and before Spark's commit log (the replay must write nothing again); a mirror
    MERGE of them that dies (the mirror catches up from the changelog); the driver process
    SIGKILLed after the changelog commit, before the mirror's."""
    db = database
    p = pipeline(spark, mysql_server, db, tmp_path / "job")
    old_rows, created, writer = _recreate_under_writer(p, mysql_server, db)
    with writing(writer):
        if point == "sigkill":
            from driver_process import Driver

            driver = Driver(p.raw_config(), p.workdir)
            try:
                driver.pause_at("sink_commit")  # only the new table has rows to commit in this driver
                driver.wait_until(lambda: driver.paused("sink_commit"), "the new table's first rows committed")
            finally:
                driver.kill()
            committed = driver.committed()
            assert committed is not None and committed["tables"][f"{db}.t"].get("rejoined"), committed
        else:
            # the run's first batch stages the new table's chunks, its second emits them
            p.arm(point, after=1 if point == "after_sink_commit" else 0)
            with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
                p.run()
        restarted = p.run()
    p.run()  # catch up with the writer
    if point == "after_sink_commit":
        replayed = restarted[0]  # Spark replays the batch whose commit log it never wrote
        assert replayed.snapshot_rows > 0, f"the replayed batch had the new table's snapshot rows: {replayed}"
        assert not replayed.wrote, f"the replay wrote again: {replayed}"
    assert_recreated(p, p.schemas()[TableId(db, "t")], old_rows, created)


@pytest.mark.slow  # three available-now runs into Delta and Kafka
def test_a_recreated_table_into_delta_and_kafka(
    spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path, kafka_broker: Any,
) -> None:
    """``sink: [delta, kafka]``, with a crash between the two sinks' commits of the new table's
    first snapshot rows: Delta as above; Kafka publishes them as snapshot reads (``op: r``,
    ``source.snapshot`` not "false"), once each, before their keys' later changes."""
    from kafka_broker import read_topic

    from cdc.model.debezium.codec import SourceInfo, decode_value

    db, prefix = database, f"rc{database}"
    p = pipeline(spark, mysql_server, db, tmp_path / "job")
    p.sinks = [{"type": "delta", "path": str(p.lake), "engine": "delta-rs"},
               kafka_sink(p, kafka_broker.bootstrap_servers, prefix)]
    old_rows, created, writer = _recreate_under_writer(p, mysql_server, db)
    p.arm("between_sinks", after=1)  # the batch that commits the first snapshot rows: Delta has it, Kafka not
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match="injected fault at between_sinks"):
            p.run()
        p.run()
    p.run()
    schema = p.schemas()[TableId(db, "t")]
    assert_recreated(p, schema, old_rows, created)

    log: list[dict[str, Any]] = []
    newest: dict[Any, dict[str, Any] | None] = {}
    for r in read_topic(kafka_broker.bootstrap_servers, f"{prefix}.{db}.t"):
        record = decode_value(r.value, schema)
        if record is None:
            continue  # a tombstone
        s = record.source
        assert isinstance(s, SourceInfo)
        if (s.file, s.pos) < (created.file, created.pos):
            continue  # the old table's messages
        assert (record.op == "r") == (s.snapshot != "false"), record
        log.append({"op": record.op, "after": record.after, "source": {"file": s.file, "pos": s.pos, "row": s.row}})
        key = (record.after or record.before or {})["id"]
        newest[key] = None if record.op == "d" else record.after
    _assert_log_exact(p, "t", schema, log)
    source = {r["id"]: r for r in _normalize(p.source_rows("t"), schema)}
    topic = {r["id"]: r for r in _normalize([r for r in newest.values() if r is not None], schema)}
    assert topic == source, "the newest message of each key of the new table is its row"


@pytest.mark.slow  # four available-now runs on PostgreSQL
def test_postgres_a_table_dropped_and_created_again_holds_each_key_once_in_the_mirror(
    spark: Any, postgres_server: Any, pg_database: str, tmp_path: Path,
) -> None:
    """The same on PostgreSQL (the planner and the emit tasks are shared): the new snapshot
    upserts by key, the old table's only keys stay, the new table's log is in the changelog once."""
    from pipeline_pg import PgPipeline, PgRandomWriter, assert_log_exact
    from test_new_tables import pg_position

    from binlog.postgres.positions import LsnOffset

    p = PgPipeline(spark, postgres_server, pg_database, tmp_path / "job")
    with contextlib.closing(p.admin()) as conn:
        conn.execute(TABLE.format("t"))
        conn.execute(TABLE.format("keep"))
        conn.execute("INSERT INTO t (id, v) SELECT i, 'old' || i FROM generate_series(-300, 299) i")
        conn.execute("INSERT INTO keep (id, v) SELECT i, 'k' || i FROM generate_series(0, 49) i")
    p.run()
    with contextlib.closing(p.admin()) as conn:
        conn.execute("UPDATE t SET v = 'changed' || id, n = 1 WHERE id % 7 = 0")
        conn.execute("DELETE FROM t WHERE id IN (-299, -298, 5, 6)")
    p.run()  # the old table's changes: the run after the drop no longer reads its log
    old_rows = p.source_rows("t")
    with contextlib.closing(p.admin()) as conn:
        conn.execute("DROP TABLE t")
    p.run()
    with contextlib.closing(p.admin()) as conn:
        conn.execute(TABLE.format("t"))
    created = pg_position(p)
    with contextlib.closing(p.admin()) as conn:
        conn.execute("INSERT INTO t (id, v, n) SELECT i, 'new' || i, 2 FROM generate_series(0, 599) i")
    writer = PgRandomWriter(p, "t", seed=41, key_space=900, pause_s=PACE_S)
    with writing(writer):
        p.run()
    p.run()
    schema = p.schemas()[TableId(p.schema, "t")]
    key = ("id",)
    mirror = _normalize(p.mirror("t").to_pylist(), schema)
    counts = Counter(_identity(r, key) for r in mirror)
    assert not [k for k, n in counts.items() if n > 1], "a key held twice by the mirror"
    source = {_identity(r, key): r for r in _normalize(p.source_rows("t"), schema)}
    by_key = {_identity(r, key): r for r in mirror}
    old = {_identity(r, key): r for r in _normalize(old_rows, schema)}
    assert {k: by_key.get(k) for k in source} == source, "the new table's rows"
    assert {k: by_key.get(k) for k in old if k[0] < 0} == {k: r for k, r in old.items() if k[0] < 0}, \
        "the old table's only keys, as it left them"
    extra = {k: by_key[k] for k in set(by_key) - set(source)}
    assert extra == {k: old.get(k) for k in extra}, "keys the new table lacks hold the old table's rows"
    log = [{"op": r["op"], "after": r["after"], "lsn": r["source"]["lsn"], "commit": r["source"]["commit_lsn"]}
           for r in p.changelog("t").to_pylist()]
    assert isinstance(created, LsnOffset)
    new = [r for r in log if r["lsn"] >= created.lsn]
    p.started_at = created
    assert_log_exact(p, "t", schema, new)
    assert [r for r in new if r["op"] == "r"] and writer.statements > 50
