"""A DDL with no change after it reaches the sinks in the batch whose log slice holds it
(docs/concepts/schema-evolution.md, "When the sinks see a DDL"), as Debezium publishes a schema change when
it reads the statement, not with the table's next change.

Against the MariaDB fixture: the binlog reader hands each DDL over once wherever a slice is cut
for several readers (no Spark); then the job: an ``ALTER TABLE ... ADD COLUMN`` that no write
follows reaches the Kafka schema change topic once, the next batches (and a write under it) do
not publish it again, and the Delta mirror and changelog gain the column; a crash right after the
sinks committed that batch, and its replay, leave it once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from faults import InjectedFault
from kafka_broker import read_topic
from pipeline import Pipeline, kafka_sink
from test_schema_evolution import BASE, T, offset, source_rows, sql

from binlog.mysql.dialect import MySqlDialect
from binlog.mysql.positions import BinlogOffset
from binlog.mysql.types import mysql_column
from binlog.registry import create_dialect
from cdc.app.runner import JobFailed
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.envelope import envelope_schema
from cdc.model.history import SchemaChange, tagged_change, tagged_schema, with_schema
from cdc.model.schema import TableId
from cdc.spark.state import StateStore
from sinks.base import SchemaStep, TableBatch, staged_files
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.files import DeltaFileWriter
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.sink import KafkaSink
from sinks.stream.messages import StreamStageWriter

ADD = "ALTER TABLE t ADD COLUMN note VARCHAR(20)"
WIDEN = "ALTER TABLE t MODIFY qty BIGINT"


@pytest.fixture
def pipeline(spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> Pipeline:
    sql(mysql_server, database, "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(10), qty INT)",
        "CREATE TABLE other (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES " + ",".join(f"({i}, 'n{i}', {i})" for i in range(20)))
    return Pipeline(spark, mysql_server, database, tmp_path)


def ddl_events(bootstrap: str, prefix: str) -> list[dict[str, Any]]:
    """The schema change topic's events (payloads), read_committed."""
    return [json.loads(r.value)["payload"] for r in read_topic(bootstrap, prefix) if r.value]


def statement_position(box: Sandbox, since: BinlogOffset, statement: str) -> tuple[str, int]:
    """Where ``statement``'s query event starts in the binlog after ``since``."""
    with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{since.file}' FROM {since.pos}")
        found = [(row[0], row[1]) for row in cur.fetchall() if row[2] == "Query" and statement in row[5]]
    assert len(found) == 1, found
    return found[0]


# ---- the sinks' halves (no server) ------------------------------------------------------------------

def test_a_ddl_without_rows_is_staged_as_a_schema_step_and_published_from_it(tmp_path: Path) -> None:
    """Both writers stage a tagged set without rows as one schema step (no file); the Kafka sink
    publishes a version from the first set of the batch that carries it (the step: the DDL's own
    source), once; Delta's evolution reads the step's schema."""
    wider = replace(BASE, columns=(*BASE.columns, mysql_column("note", "varchar", "varchar(20)", True)))
    change = SchemaChange(1, ADD, {"connector": "mysql", "pos": 10, "ts_ms": 5}, wider)
    rows = with_schema(envelope_schema(wider).empty_table(), wider, 1, change)
    kafka = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", staging_path=str(tmp_path / "kafka"))
    writers = [StreamStageWriter(kafka, str(tmp_path / "kafka")), DeltaFileWriter(DeltaSinkConfig(path=str(tmp_path)))]
    steps = [w.stage(BASE, rows, "changes") for w in writers]
    for [item] in steps:
        assert SchemaStep.is_step(item) and staged_files([item]) == []
        step = SchemaStep.from_dict(item)
        assert (step.version, step.table_schema(), step.schema_change) == (1, wider, change.to_dict())
    assert [w.stage(BASE, envelope_schema(BASE).empty_table(), "changes") for w in writers] == [[], []]
    assert not any(f.is_file() for f in tmp_path.rglob("*")), "nothing written"

    sink = KafkaSink(kafka, "job")
    later = {"file": "x.arrow", "messages": 1, "rows": 1,
             "schema_change": replace(change, source={**change.source, "pos": 99, "ts_ms": 9}).to_dict()}
    batch = TableBatch(BASE, changes=[steps[0][0], later])
    assert [c.source for c in sink._new_schema_changes([batch])] == [change.source]
    sink.schema_versions = {str(T): 1}  # published by an earlier batch
    assert sink._new_schema_changes([batch]) == []


# ---- the reader: each DDL of a cut slice handed over by one of its readers -----------------------------

def binlog_events(box: Sandbox, start: BinlogOffset, end: BinlogOffset) -> list[tuple[int, str]]:
    """(start, type) of each event in ``(start, end)`` (one binlog file)."""
    assert start.file == end.file
    with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
        return [(row[1], row[2]) for row in cur.fetchall() if row[1] < end.pos]


def test_each_ddl_of_a_slice_cut_anywhere_is_handed_over_once(
        mysql_server: Sandbox, database: str, tmp_path: Path) -> None:
    """Two readers of a slice cut at every event boundary (and a byte on either side), by
    transaction (``cut``, what the planner makes) and by event: the DDLs come out as change rows
    without a row, each once across the two, tagged with its version and statement, at its
    position among the rows; the rows themselves once, as before."""
    sql(mysql_server, database, "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(10), qty INT)",
        "INSERT INTO t VALUES (1, 'a', 1)")
    dialect = create_dialect(Pipeline(None, mysql_server, database, tmp_path).config().source)
    assert isinstance(dialect, MySqlDialect)
    table = TableId(database, "t")
    with contextlib.closing(dialect.connect()) as conn:
        schema = dialect.table_schema(conn, table)
    dialect.use_schema_history(StateStore(str(tmp_path / "state")), {table: schema})
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # one file from here on
    start = offset(mysql_server)
    sql(mysql_server, database, "INSERT INTO t VALUES (2, 'b', 2)", ADD, "UPDATE t SET note = 'x'", WIDEN,
        "INSERT INTO t VALUES (3, 'c', 3000000000, 'y')")
    end = offset(mysql_server)
    reader_ids = itertools.cycle([5400, 5401])  # one reader at a time; each closes before the next

    def read(to: BinlogOffset, decode_from: BinlogOffset | None = None) -> list[tuple[Any, ...]]:
        """(position, version, op or DDL, sink columns) of each row and DDL, in the order read."""
        out: list[tuple[Any, ...]] = []
        with dialect.log_reader(next(reader_ids), [schema]) as reader:
            for batch in reader.change_rows(start, to, decode_from):
                tagged, change = tagged_schema(batch.rows), tagged_change(batch.rows)
                assert tagged is not None
                columns = tuple(tagged[0].column_names)
                if not batch.rows.num_rows:
                    assert change is not None and change.version == tagged[1]
                    out.append((batch.first[1:], tagged[1], change.ddl, columns))
                out += [((r["source"]["pos"], r["source"]["row"]), tagged[1], r["op"], columns)
                        for r in batch.rows.to_pylist()]
        return out

    whole = read(end)
    assert [x[1:3] for x in whole] == [(0, "c"), (1, ADD), (1, "u"), (1, "u"), (2, WIDEN), (2, "c")]
    assert [x[0] for x in whole] == sorted(x[0] for x in whole), "the DDL among the rows in log order"
    assert whole[1][3] == whole[4][3] == ("id", "name", "qty", "note")
    ddl_at = statement_position(mysql_server, start, ADD)[1]
    assert whole[1][0] == (ddl_at, 0), "at the statement's position"
    events = binlog_events(mysql_server, start, end)
    assert {"Query", "Gtid"} <= {kind for _, kind in events}
    for at, _ in events[1:]:
        for cut in {BinlogOffset(start.file, at + d, cut=c) for d in (-1, 0, 1) for c in (False, True)}:
            pieces = read(cut) + read(end, cut)
            assert sorted(pieces, key=lambda x: x[0]) == whole, f"cut at {cut}"


# ---- the job: MariaDB -> Kafka, Delta ---------------------------------------------------------------

def after_fields(bootstrap: str, topic: str, key: int) -> tuple[dict[str, str], dict[str, Any]]:
    """The Connect schema (field -> type) and the payload of the ``after`` image of ``key``'s
    newest message in ``topic``."""
    newest = [json.loads(r.value) for r in read_topic(bootstrap, topic)
              if r.value and (json.loads(r.value)["payload"]["after"] or {}).get("id") == key][-1]
    image = next(f for f in newest["schema"]["fields"] if f["field"] == "after")
    return {f["field"]: f["type"] for f in image["fields"]}, newest["payload"]["after"]


def test_a_ddl_alone_is_published_once_by_the_batch_that_reads_it(
        pipeline: Pipeline, mysql_server: Sandbox, database: str, kafka_broker: Any) -> None:
    """ADD COLUMN and no write of t after it (writes of another table around it, the slice read by
    three readers): the batch that reads it publishes the event, with the statement's position
    and time in ``source``; the next batches, with no change of t and then with one, publish
    nothing more, and t's next message has the column."""
    p = pipeline
    prefix = f"alone{database}"
    bootstrap = kafka_broker.bootstrap_servers
    p.sinks = [kafka_sink(p, bootstrap, prefix)]
    p.source["stream_split_bytes"] = 256  # the DDL's slice is cut for several readers
    p.job["parallelism"] = 3
    p.run()  # the snapshot
    assert ddl_events(bootstrap, prefix) == []
    before = offset(mysql_server)
    sql(mysql_server, database, *(f"INSERT INTO other VALUES ({i}, {i})" for i in range(20)))
    began = int(time.time())
    sql(mysql_server, database, ADD)
    ended = int(time.time())
    sql(mysql_server, database, *(f"INSERT INTO other VALUES ({i}, {i})" for i in range(20, 40)))
    dialect = create_dialect(p.config().source)
    assert isinstance(dialect, MySqlDialect)
    assert len(dialect.slice_cuts(dialect.connect, before, offset(mysql_server), 3)) == 2, "cut for three readers"
    batches = p.run()
    assert any(b.wrote for b in batches) and sum(b.tables.get(f"{database}.t", (0, 0))[1] for b in batches) == 0
    [event] = ddl_events(bootstrap, prefix)
    assert (event["ddl"], event["databaseName"]) == (ADD, database)
    file, pos = statement_position(mysql_server, before, ADD)
    source = event["source"]
    # source.query is null, as in Debezium without include.query (source.include_query)
    assert (source["file"], source["pos"], source["query"], source["table"]) == (file, pos, None, "t")
    assert began - 1 <= source["ts_ms"] // 1000 <= ended + 1 and source["server_id"] > 0, source
    [change] = event["tableChanges"]
    assert [c["name"] for c in change["table"]["columns"]] == ["id", "name", "qty", "note"]

    sql(mysql_server, database, "INSERT INTO other VALUES (100, 1)")
    assert p.run(), "a batch with no change of t"
    sql(mysql_server, database, "INSERT INTO t (id, name, qty, note) VALUES (100, 'a', 1, 'added')")
    p.run()
    assert [e["ddl"] for e in ddl_events(bootstrap, prefix)] == [ADD], "published once"
    fields, after = after_fields(bootstrap, f"{prefix}.{database}.t", 100)
    assert fields == {"id": "int32", "name": "string", "qty": "int32", "note": "string"}
    assert after == {"id": 100, "name": "a", "qty": 1, "note": "added"}


def test_a_ddl_alone_evolves_delta_and_is_published_once_across_a_crash_after_the_commit(
        pipeline: Pipeline, mysql_server: Sandbox, database: str, kafka_broker: Any) -> None:
    """Delta and Kafka (``sink: [delta, kafka]``): the batch that reads an ADD COLUMN with no write
    after it evolves the mirror and the changelog (no changelog row for the DDL) and publishes the
    event, then dies before Spark logs its commit; the replay writes nothing, and the event is
    in the topic once."""
    p = pipeline
    prefix = f"crash{database}"
    bootstrap = kafka_broker.bootstrap_servers
    p.sinks = [{"type": "delta", "path": str(p.lake), "async_mirror": True, "engine": p.engine},
               kafka_sink(p, bootstrap, prefix)]
    p.run()  # the snapshot
    changelog_rows = p.changelog("t").num_rows
    assert p.mirror("t").schema.names == ["id", "name", "qty"]
    sql(mysql_server, database, ADD)
    p.arm("after_sink_commit")
    with pytest.raises((JobFailed, InjectedFault), match="injected fault at after_sink_commit"):
        p.run()
    assert p.mirror("t").schema.names == ["id", "name", "qty", "note"], "evolved by the batch that read the DDL"
    [replayed, *_] = p.run()
    assert not replayed.wrote, replayed
    assert [e["ddl"] for e in ddl_events(bootstrap, prefix)] == [ADD]
    assert p.mirror("t").num_rows == 20
    changelog = p.changelog("t")
    assert changelog.num_rows == changelog_rows, "no changelog row for a DDL"
    assert [f.name for f in changelog.schema.field("after").type] == ["id", "name", "qty", "note"]
    assert [f.name for f in changelog.schema.field("before").type] == ["id", "name", "qty", "note"]

    sql(mysql_server, database, "INSERT INTO t (id, name, qty, note) VALUES (100, 'a', 1, 'added')")
    p.run()
    assert {r["id"]: r for r in p.mirror("t").to_pylist()} == source_rows(mysql_server, database)
    assert [e["ddl"] for e in ddl_events(bootstrap, prefix)] == [ADD]
    fields, after = after_fields(bootstrap, f"{prefix}.{database}.t", 100)
    assert list(fields) == ["id", "name", "qty", "note"] and after["note"] == "added"
