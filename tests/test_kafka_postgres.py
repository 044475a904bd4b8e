"""Postgres -> the stream stores: the Debezium PostgreSQL connector's envelope, exactly once.

The unit tests encode Postgres change rows with the Kafka sink's writer (no server). The pipeline
test runs the real job from a real PostgreSQL into a real broker (Kafka, Pulsar) while a writer
changes the rows being snapshotted, crashes it after the store committed a batch and before
Spark's commit log (or SIGKILLs its driver at random moments), and reads the topic back with a plain consumer (Kafka's read_committed, a
Pulsar reader, a Pravega reader group). The DDL case runs into Kafka.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from faults import InjectedFault
from kafka_broker import read_topic
from pipeline import (
    PACE_S,
    STREAM_STORES,
    StreamStore,
    TopicMessage,
    _identity,
    _normalize,
    _ReadOnlyHistory,
    assert_tombstones,
    every_stream_store,
    kafka_sink,
    key_of_event,
    pravega_entry,
    restarted_pravega,
    stream_store,
    writing,
)
from pipeline_pg import PgPipeline, PgRandomWriter, assert_log_exact
from postgres_server import pg_dialect
from test_debezium_postgres import ANNE, CUSTOMERS, KEY_ONLY, change_row, col, pg_source
from test_pipeline import KillServerAt, kill_a_driver_at_random

from binlog.postgres.types import postgres_table
from cdc.app.runner import JobFailed
from cdc.app.sandbox.kafka import KafkaSandbox
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.debezium.codec import decode_value
from cdc.model.debezium.connect import POSTGRES_SOURCE_FIELDS
from cdc.model.envelope import envelope_schema
from cdc.model.history import SchemaHistory, tagged_schema
from cdc.model.schema import TableId, TableSchema
from cdc.spark.state import StateStore
from sinks.base import InvalidChangeBatch
from sinks.kafka.config import KafkaSinkConfig
from sinks.stream.messages import NEW_KEY_HEADER, OLD_KEY_HEADER, encode_rows

SOURCE_FIELDS = [name for name, _, _ in POSTGRES_SOURCE_FIELDS]


def _config(tmp: Path, **over: Any) -> KafkaSinkConfig:
    return KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", staging_path=str(tmp), **over)


def _rows(schema: TableSchema, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=envelope_schema(schema))


# --- the envelope (no server) --------------------------------------------------------------------


def test_postgres_rows_get_the_postgresql_source_block(tmp_path: Path) -> None:
    """db is the database (from the table's schema), schema/table/txId/lsn/sequence are the
    change's; a primary-key update's delete and create share one position."""
    schema = postgres_table(CUSTOMERS.table_id, CUSTOMERS.columns, CUSTOMERS.primary_key, database="inventory")
    moved = {**ANNE, "id": 2}
    src = pg_source(ts_ms=7, sequence='["900","880"]', txId=42, lsn=880, commit_lsn=900, row=0)
    rows = _rows(schema, [
        change_row(schema, "r", None, ANNE, pg_source(ts_ms=5, snapshot="true", lsn=700,
                                                      sequence='[null,"700"]'), 5),
        change_row(schema, "d", KEY_ONLY, None, src, 7),
        change_row(schema, "c", None, moved, src, 7),
    ])
    out = encode_rows(_config(tmp_path), schema, rows)
    assert out["op"].to_pylist() == ["r", "d", "d", "c"]  # the delete's tombstone follows it
    assert out["pos"].to_pylist() == [":700:0", "900:880:0", "900:880:0", "900:880:0"]
    read, delete, _, create = (orjson.loads(v) if v else None for v in out["value"].to_pylist())
    assert read is not None and delete is not None and create is not None
    assert list(create["payload"]["source"]) == SOURCE_FIELDS
    assert {k: create["payload"]["source"][k] for k in ("connector", "db", "schema", "table", "txId", "lsn",
                                                          "sequence", "snapshot")} == {
        "connector": "postgresql", "db": "inventory", "schema": "public", "table": "customers", "txId": 42,
        "lsn": 880, "sequence": '["900","880"]', "snapshot": "false"}
    assert {k: read["payload"]["source"][k] for k in ("db", "snapshot", "lsn", "txId", "sequence")} == {
        "db": "inventory", "snapshot": "true", "lsn": 700, "txId": None, "sequence": '[null,"700"]'}
    assert create["schema"]["fields"][2]["name"] == "io.debezium.connector.postgresql.Source"
    assert delete["payload"]["before"] == {"id": 1, "first_name": "", "last_name": "", "email": ""}


def test_time_precision_defaults_to_the_postgres_connectors_adaptive(tmp_path: Path) -> None:
    """Debezium's PostgreSQL connector defaults to time.precision.mode=adaptive: time(3) in
    milliseconds (io.debezium.time.Time); adaptive_time_microseconds makes it MicroTime."""
    import datetime as dt

    schema = postgres_table(TableId("public", "t"), (col("id", "int4", "integer", False),
                                                     col("tm", "time", "time(3) without time zone", typmod=3)),
                            ("id",), database="db")
    rows = _rows(schema, [change_row(schema, "c", None, {"id": 1, "tm": dt.timedelta(seconds=1, milliseconds=5)},
                                     pg_source(ts_ms=1, txId=1, lsn=1, commit_lsn=2, row=0), 1)])

    def tm(**over: Any) -> tuple[str, Any]:
        value = orjson.loads(encode_rows(_config(tmp_path, **over), schema, rows)["value"][0].as_py())
        field = next(f for f in value["schema"]["fields"][1]["fields"] if f["field"] == "tm")
        return field["name"], value["payload"]["after"]["tm"]

    assert tm() == tm(time_precision_mode="adaptive") == ("io.debezium.time.Time", 1005)
    assert tm(time_precision_mode="adaptive_time_microseconds") == ("io.debezium.time.MicroTime", 1_005_000)


def test_a_postgres_schema_without_its_database_is_refused(tmp_path: Path) -> None:
    rows = _rows(CUSTOMERS, [change_row(CUSTOMERS, "c", None, ANNE, pg_source(ts_ms=0, lsn=1), 0)])
    with pytest.raises(InvalidChangeBatch, match=r"source.db.*database"):
        encode_rows(_config(tmp_path), CUSTOMERS, rows)


# --- Postgres -> Kafka, exactly once -----------------------------------------------------------


@pytest.fixture
def pipeline(spark: Any, postgres_server: PostgresSandbox, pg_database: str, tmp_path: Path) -> Iterator[PgPipeline]:
    p = PgPipeline(spark, postgres_server, pg_database, tmp_path)
    yield p
    p.cleanup()


def _topic_changes(records: list[TopicMessage], schema: TableSchema) -> list[dict[str, Any]]:
    """A topic's messages as change dicts (op None: a tombstone), with their raw JSON; a message
    without a key (a Pravega event) gets its change's key (:func:`pipeline.key_of_event`)."""
    out: list[dict[str, Any]] = []
    for r in records:
        record = decode_value(r.value, schema)
        if record is None:
            out.append({"op": None, "key": r.key, "headers": r.headers, "partition": r.partition})
            continue
        source = orjson.loads(r.value or b"")["payload"]["source"]
        commit = json.loads(source["sequence"])[0]
        key = r.key if r.key is not None else key_of_event(record.op, record.before, record.after, schema)
        out.append({"op": record.op, "after": record.after, "key": key, "headers": r.headers,
                    "partition": r.partition, "source": source, "lsn": source["lsn"], "commit": None if commit is None else int(commit),
                    "schema_name": orjson.loads(r.value or b"")["schema"]["name"]})
    return out


def _assert_envelopes(p: PgPipeline, log: list[dict[str, Any]]) -> None:
    for m in (m for m in log if m["op"] is not None):
        s = m["source"]
        assert list(s) == SOURCE_FIELDS
        assert (s["connector"], s["name"], s["db"], s["schema"], s["table"]) == (
            "postgresql", "postgres", p.database, p.schema, "t"), s
        assert m["schema_name"] == f"postgres.{p.schema}.t.Envelope"
        if m["op"] == "r":
            assert (s["snapshot"], s["txId"], s["sequence"]) == ("true", None, f'[null,"{s["lsn"]}"]'), s
        else:
            assert s["snapshot"] == "false" and s["txId"] > 0, s
            assert s["sequence"] == f'["{m["commit"]}","{s["lsn"]}"]', s


def _assert_key_update_headers(log: list[dict[str, Any]], headers: bool = True) -> int:
    """Each primary-key update (a d and a c at one position) carries Debezium's key headers (with
    ``headers``: a Pravega event has none); how many there are."""
    changes = [m for m in log if m["op"] is not None]
    by_position: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for m in changes:
        if m["op"] in ("c", "d"):
            by_position.setdefault((m["commit"], m["lsn"]), []).append(m)
    pairs = [ms for ms in by_position.values() if sorted(m["op"] for m in ms) == ["c", "d"]]
    for ms in pairs if headers else []:
        delete, create = sorted(ms, key=lambda m: m["op"], reverse=True)
        assert delete["headers"].get(NEW_KEY_HEADER) == orjson.dumps(orjson.loads(create["key"])["payload"])
        assert create["headers"].get(OLD_KEY_HEADER) == orjson.dumps(orjson.loads(delete["key"])["payload"])
    return len(pairs)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> StreamStore:
    """The stream store a test is parametrized with (``kafka``, ``pulsar``, ``pravega``), on the
    session's broker."""
    return stream_store(request)


@pytest.mark.slow  # three runs of the job (about 1 minute on 2 busy cores)
@pytest.mark.parametrize("store", STREAM_STORES, indirect=True)
def test_postgres_to_a_stream_store_is_exact_across_a_crash_after_its_commit(
        pipeline: PgPipeline, postgres_server: PostgresSandbox, store: StreamStore) -> None:
    """Chunks of 100, 4 per batch: batch 0 stages the snapshot, batch 1 emits it with the
    writer's changes and dies after the store committed it; the restart replays it without
    writing. A plain consumer sees each change once, in key order, each delete with its tombstone
    (Pravega: no tombstones, no key headers; its events' keys are their changes')."""
    prefix = f"pg{pipeline.database}"
    pipeline.sinks = [store.sink(pipeline.workdir, prefix)]
    with contextlib.closing(pipeline.admin()) as admin:
        admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
        admin.execute("INSERT INTO t SELECT i * 2, 'v' || i, i FROM generate_series(0, 399) AS i")
    writer = PgRandomWriter(pipeline, "t", seed=3, key_space=800, pause_s=PACE_S)
    pipeline.arm("after_sink_commit", after=1)
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match="injected fault at after_sink_commit"):
            pipeline.run()
        restarted = pipeline.run()
    pipeline.run()
    replayed = restarted[0]  # Spark replays the batch whose commit log it never wrote
    assert replayed.snapshot_rows + replayed.change_rows > 0 and not replayed.wrote, replayed

    _assert_store_exact(pipeline, store, prefix, writer)


@pytest.mark.slow  # three drivers killed, then a catch-up (about 1.5 minutes on 2 busy cores)
def test_postgres_to_the_stream_stores_is_exact_in_each_across_driver_sigkills(
        pipeline: PgPipeline, postgres_server: PostgresSandbox, request: pytest.FixtureRequest) -> None:
    """One job fans out to Kafka, Pulsar and Pravega. Chunks of 100, 4 per batch, 1,000 rows:
    SIGKILL the driver three times at random moments while a writer inserts, updates, deletes and
    moves primary keys: in planning, in the tasks, with a Kafka transaction open, a Pulsar batch
    partly sent, a Pravega batch prepared and not all committed, one store's batch committed and
    the next one's not. Each restart recovers each store's state from its own records; after a
    last catch-up a plain consumer of each sees each change once, in key order. One job for the
    three stores: each kill costs one driver start, not three (CI time)."""
    stores = every_stream_store(request)
    prefix = f"pk{pipeline.database}"
    pipeline.sinks = [store.sink(pipeline.workdir, prefix) for store in stores]
    with contextlib.closing(pipeline.admin()) as admin:
        admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
        admin.execute("INSERT INTO t SELECT i * 2, 'v' || i, i FROM generate_series(0, 999) AS i")
    pipeline.start_reference()
    spec = json.dumps(pipeline.raw_config())
    rng = random.Random(17)
    writer = PgRandomWriter(pipeline, "t", seed=9, key_space=2000, pause_s=PACE_S)
    with writing(writer):
        for attempt in range(3):  # land anywhere in a batch, the store's commit included
            kill_a_driver_at_random(spec, rng, pipeline.workdir / f"driver-{attempt}.err")
    pipeline.run()
    for store in stores:
        _assert_store_exact(pipeline, store, prefix, writer)


@pytest.mark.slow  # a four-JVM Pravega started twice, three runs of the job
def test_postgres_into_a_pravega_killed_mid_batch_and_restarted_with_its_data_lands_each_change_once(
        pipeline: PgPipeline, tmp_path: Path) -> None:
    """A Pravega of its own that keeps its data (cdc/app/sandbox/pravega_durable.py), all four
    processes SIGKILLed once the sink asked Pravega to commit the first batch with rows and before
    it recorded that, while a writer inserts, updates, deletes and moves primary keys: the job stops
    naming the controller and Spark's commit log does not pass the batch. Restarted on its folders,
    the server still has the transaction, committing: the restart waits until it is committed (else
    the next batch's events could land before its own: keys out of order), the replayed batch
    writes nothing, what follows (the writer's changes, read again from the slot) lands once, and a
    reader group sees each change once, in key order."""
    pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for CPython 3.10 and 3.11 only")
    from cdc.app.sandbox.pravega_durable import start_durable_pravega_sandbox

    server = start_durable_pravega_sandbox(base_dir=str(tmp_path))
    try:
        prefix = f"pgone{pipeline.database}"
        pipeline.sinks = [{**pravega_entry(pipeline.workdir, server.controller_uri, prefix), "operation_timeout_s": 5,
                           "commit_retries": 1, "retry_backoff_s": 0.1}]
        with contextlib.closing(pipeline.admin()) as admin:
            admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
            admin.execute("INSERT INTO t SELECT i * 2, 'v' || i, i FROM generate_series(0, 399) AS i")
        armed = tmp_path / "kill-armed"
        pipeline.faults = KillServerAt(server.pgids(), armed)  # type: ignore[assignment]
        armed.write_text("2")  # the 1st pass: the transaction written; the 2nd: its commit asked for
        writer = PgRandomWriter(pipeline, "t", seed=21, key_space=800, pause_s=PACE_S)
        with writing(writer):
            with pytest.raises(JobFailed, match=rf"could not commit batch \d+ to Pravega at "
                                                rf"controller_uri={re.escape(server.controller_uri)} in 2 attempts") as failed:
                pipeline.run()
            assert not armed.exists(), "the server was killed mid-batch"
            match = re.search(r"could not commit batch (\d+)", str(failed.value))
            assert match is not None
            batch = int(match.group(1))
            assert not (pipeline.checkpoint / "commits" / str(batch)).exists()
            server.kill()  # reaps the killed processes
            server.start()  # same ports and folders: the data is back
            pipeline.sinks[0]["operation_timeout_s"] = 30  # short only to make the kill fail fast
            replayed = pipeline.run()
        pipeline.run()
        assert replayed[0].batch_id == batch and not replayed[0].wrote, f"the replay wrote again: {replayed[0]}"
        assert any(b.wrote for b in replayed[1:]), "the changes after the restart were written"
        _assert_store_exact(pipeline, restarted_pravega(server), prefix, writer)
    finally:
        server.stop()


def _assert_store_exact(p: PgPipeline, store: StreamStore, prefix: str, writer: PgRandomWriter) -> None:
    """The store's topic of t, read by a plain consumer: Debezium's envelopes, each change once in
    key order (each delete with its tombstone where the store has them), its newest images the
    source's rows, and the writer's primary-key updates among them."""
    schema = p.schemas()[TableId(p.schema, "t")]
    assert schema.database == p.database
    topic = f"{prefix}.{p.schema}.t"
    log = _topic_changes(store.messages(topic), schema)
    _assert_envelopes(p, log)
    if store.kind == "pravega":  # an event is its value alone: no tombstones
        assert all(m["op"] is not None for m in log), f"{topic}: a tombstone on Pravega"
    else:
        assert_tombstones(topic, log)
    state: dict[Any, dict[str, Any]] = {}  # the newest message per key; a delete or tombstone removes it
    last: dict[Any, tuple[int, int]] = {}
    for m in log:
        if m["op"] in (None, "d"):
            state.pop(m["key"], None)
        else:
            state[m["key"]] = m["after"]
        if m["op"] not in (None, "r"):
            assert last.get(m["key"], (0, 0)) <= (m["commit"], m["lsn"]), f"key {m['key']!r} out of log order"
            last[m["key"]] = (m["commit"], m["lsn"])
    key = schema.primary_key
    source = {_identity(r, key): r for r in _normalize(p.source_rows("t"), schema)}
    assert {_identity(r, key): r for r in _normalize(list(state.values()), schema)} == source
    assert_log_exact(p, "t", schema, [m for m in log if m["op"] is not None])
    assert writer.statements > 20 and _assert_key_update_headers(log, headers=store.kind != "pravega") > 0


# --- Postgres -> Kafka under DDL -------------------------------------------------------------------

PG_DDL_STEPS = [  # (DDL, the ddl text published for it, writes after it)
    ("ALTER TABLE t ADD COLUMN note varchar(20)", "added column note character varying(20)",
     ["INSERT INTO t (id, v, n, note) VALUES (100, 'a', 1, 'added')", "UPDATE t SET note = 'n-' || id WHERE id < 10"]),
    ("ALTER TABLE t ALTER COLUMN n TYPE bigint", "changed column n integer to bigint",
     ["INSERT INTO t (id, v, n, note) VALUES (101, 'b', 5000000000, 'wide')",
      "UPDATE t SET n = n + 4000000000 WHERE id < 5"]),
    ("ALTER TABLE t DROP COLUMN v", "dropped column v",
     ["INSERT INTO t (id, n, note) VALUES (102, 2, 'dropped')", "UPDATE t SET n = n + 1 WHERE id < 5",
      "DELETE FROM t WHERE id = 7"]),
]
_CONNECT = {pa.int32(): "int32", pa.int64(): "int64", pa.string(): "string"}


def _reference(p: PgPipeline, schema: TableSchema) -> dict[tuple[int, int, str], dict[str, Any]]:
    """Every change of t since the pipeline started, from the reference slot, decoded with the
    job's schema history (read, never written): by (commit LSN, LSN, op), its ``after`` image
    and the sink schema's columns and Connect types in force at it."""
    assert p.started_at is not None
    d = pg_dialect(p.box, p.database, slot_name=p.reference_slot, tables=[f"{p.schema}\\..*"])
    d.use_schema_history(_ReadOnlyHistory(p.state_dir), {schema.table_id: schema})
    with contextlib.closing(d.connect()) as conn:
        end = d.current_offset(conn)
    out: dict[tuple[int, int, str], dict[str, Any]] = {}
    with d.log_reader(0, [schema]) as reader:
        for batch in reader.change_rows(p.started_at, end):
            tagged = tagged_schema(batch.rows)
            assert tagged is not None
            fields = {f.name: _CONNECT[f.type] for f in tagged[0].arrow_schema()}
            for r in batch.rows.to_pylist():
                key = (r["source"]["commit_lsn"], r["source"]["lsn"], r["op"])
                assert key not in out, f"two changes at {key}"
                out[key] = {"after": r["after"], "fields": fields, "version": tagged[1]}
    return out


@pytest.mark.slow  # five runs of the job
def test_postgres_ddl_reaches_kafka_once_with_each_changes_schema_across_a_crash(
        pipeline: PgPipeline, kafka_broker: KafkaSandbox) -> None:
    """ADD COLUMN, ALTER TYPE int to bigint and DROP COLUMN, with writes after each and a run of
    the job after each; the run of the widening dies after Kafka committed its batch, and the
    restart replays it without writing. Then each message's Connect schema is the sink schema in
    force at its change, each DDL is in the schema change topic once (a description: PostgreSQL
    logs no DDL text; its ``source`` the first change under it), each change once."""
    p = pipeline
    prefix = f"pgddl{p.database}"
    bootstrap = kafka_broker.bootstrap_servers
    p.sinks = [kafka_sink(p, bootstrap, prefix)]
    with contextlib.closing(p.admin()) as admin:
        admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
        admin.execute("INSERT INTO t SELECT i, 'v' || i, i FROM generate_series(0, 19) AS i")
    p.run()  # the snapshot
    replayed = None
    for i, (statement, _, writes) in enumerate(PG_DDL_STEPS):
        with contextlib.closing(p.admin()) as admin:
            for s in (statement, *writes):
                admin.execute(s)
        if i == 1:
            p.arm("after_sink_commit")
            with pytest.raises((JobFailed, InjectedFault), match="injected fault at after_sink_commit"):
                p.run()
            replayed = p.run()[0]  # Spark replays the batch whose commit log it never wrote
        else:
            p.run()
    assert replayed is not None and replayed.change_rows > 0 and not replayed.wrote, replayed

    table = TableId(p.schema, "t")
    versions = SchemaHistory(StateStore(str(p.state_dir))).versions(table)
    assert [v.ddl for v in versions] == [None, *(f"relation message (PostgreSQL logs no DDL text): {d}"
                                                 for _, d, _ in PG_DDL_STEPS)]
    messages = [orjson.loads(r.value) for r in read_topic(bootstrap, f"{prefix}.{p.schema}.t") if r.value]
    by_change: dict[tuple[int, int, str], dict[str, Any]] = {}
    for m in messages:
        payload = m["payload"]
        after_schema = next(f for f in m["schema"]["fields"] if f["field"] == "after")
        fields = {f["field"]: f["type"] for f in after_schema["fields"]}
        if payload["op"] == "r":
            assert fields == {"id": "int32", "v": "string", "n": "int32"}, "the snapshot's: version 0"
            continue
        source = payload["source"]
        key = (int(json.loads(source["sequence"])[0]), source["lsn"], payload["op"])
        assert key not in by_change, f"{key} twice in the topic"
        by_change[key] = {"after": payload["after"], "fields": fields, "source": source}

    schema = p.schemas()[table]
    reference = _reference(p, schema)
    assert sorted(by_change) == sorted(reference), "each change once"
    for key, want in reference.items():
        got = by_change[key]
        assert got["fields"] == want["fields"], (key, want["version"], got["fields"])
        assert got["after"] == want["after"], key
    assert {want["version"] for want in reference.values()} == {1, 2, 3}
    assert by_change[next(k for k, w in reference.items() if w["after"] and w["after"]["id"] == 101)]["fields"] == {
        "id": "int32", "v": "string", "n": "int64", "note": "string"}

    events = [orjson.loads(r.value)["payload"] for r in read_topic(bootstrap, prefix) if r.value]
    assert [e["ddl"] for e in events] == [v.ddl for v in versions[1:]], "each version once"
    for event, version in zip(events, versions[1:], strict=True):
        commit, lsn = version.key
        first = by_change[next(k for k in sorted(reference) if k[:2] == (commit, lsn))]
        source = event["source"]
        assert (source["lsn"], source["sequence"], source["txId"]) == (
            lsn, f'["{commit}","{lsn}"]', first["source"]["txId"]), "the first change under it"
        assert (event["databaseName"], event["schemaName"]) == (p.database, p.schema)
        assert [c["name"] for c in event["tableChanges"][0]["table"]["columns"]] == version.schema.column_names
