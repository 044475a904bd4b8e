"""Test helpers for whole-pipeline tests: run the stream, write randomly, check exactness.

The checks are the guarantees of shared/design/ARCHITECTURE.md:
* the Delta mirror equals the source table;
* the changelog holds exactly one ``r`` row per key the snapshot read, and every binlog row
  change exactly once: a change is present if and only if it happened after its key's chunk was
  emitted (at its HW), and no change appears twice or is invented.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import random
import re
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

import pyarrow as pa
import pymysql
import pytest
from faults import FileFaults

from binlog.mysql.positions import BinlogOffset, ChangePosition
from binlog.mysql.reader import BinlogReaderOptions, MySqlBinlogReader, current_offset
from binlog.registry import create_dialect
from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.config import JobConfig
from cdc.model.envelope import split_key_changes
from cdc.model.positions import max_offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.commit import BatchRecord
from cdc.spark.source import table_schemas
from cdc.spark.state import StateStore
from sinks.delta.tables import read_table

REFERENCE_SERVER_ID = 6300
MAINTENANCE_EVERY = 3  # sink.maintenance.every of the test pipelines


@dataclass
class Pipeline:
    """One source database flowing into one lake through one checkpoint, run by the real job.

    ``source`` and ``job`` override keys of the job file; ``sinks`` replaces its ``sink:``.
    """

    spark: Any
    box: Sandbox
    database: str
    workdir: Path
    source: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    sinks: list[dict[str, Any]] | None = None
    started_at: BinlogOffset | None = None

    def __post_init__(self) -> None:
        self.checkpoint = self.workdir / "checkpoint"
        self.lake = self.workdir / "lake"
        self.state_dir = self.workdir / "checkpoint_state"  # next to the checkpoint, not inside
        self.faults = FileFaults(self.workdir / "faults")
        self.async_mirror = True
        self.engine = "delta-rs"  # the Delta engine (the job's default; test_pipeline runs both)
        self.deletion_vectors: bool | str = "auto"  # sink.deletion_vectors (the job's default; test_pipeline runs false too)
        # Tables by name (sink.register_tables, on by default) make a job's first start load delta-spark
        # in the driver's JVM and read each table's log (about 7 s of CPU in a warm session here, 20 s
        # in a fresh driver process); a driver process's restart finds them in its catalog's record and
        # does neither (the test run's shared session has no catalog of its own, and asks every time).
        # The exactly-once suites test the data, so they register only where delta-spark is loaded
        # anyway (its engine); test_catalog and the CLI tests cover names.
        self.register_tables: bool | None = None  # None: with the delta-spark engine only
        # Compaction and VACUUM every few batches (the job's default is 100): the exactly-once suites,
        # crashes and SIGKILLs included, run with maintenance committing between the batches
        self.maintenance = {"every": MAINTENANCE_EVERY}

    def raw_config(self) -> dict[str, Any]:
        c = self.box.cdc
        source = {"type": "mysql", "hostname": c.host, "port": c.port, "username": c.user,
                  "password": c.password, "tables": [f"{self.database}\\..*"], "chunk_size": 100,
                  "chunks_per_batch": 4, "server_id": "5400-5403", **self.source}
        register = self.engine == "delta-spark" if self.register_tables is None else self.register_tables
        sink = self.sinks or {"type": "delta", "path": str(self.lake), "async_mirror": self.async_mirror,
                              "engine": self.engine, "register_tables": register, "maintenance": self.maintenance,
                              "deletion_vectors": self.deletion_vectors}
        return {"source": source, "sink": sink, "checkpoint": str(self.checkpoint),
                "state_dir": str(self.state_dir), "parallelism": 2, **self.job}

    def config(self) -> JobConfig:
        return parse_config(self.raw_config(), warn_plain_password=False)

    def run(self, failover: bool = False) -> list[BatchRecord]:
        """One available-now run: everything up to the binlog end at its start, then stop; the
        sinks finish their background work (the mirror catches up) before it returns."""
        if self.started_at is None:
            with contextlib.closing(self.box.admin.connect()) as conn:
                self.started_at = current_offset(conn)
        runner = JobRunner(self.config(), self.spark, hooks=self.faults, failover=failover)
        runner.run(once=True)
        return runner.batches

    def arm(self, point: str, after: int = 0) -> None:
        self.faults.arm(point, after=after)

    def schemas(self) -> dict[TableId, TableSchema]:
        return table_schemas(create_dialect(self.config().source))

    def mirror(self, table: str) -> pa.Table:
        return read_table(str(self.lake / self.database / table))

    def changelog(self, table: str) -> pa.Table:
        return read_table(str(self.lake / self.database / f"{table}_changelog"))

    def source_rows(self, table: str) -> list[dict[str, Any]]:
        with contextlib.closing(self.box.cdc.connect(self.database)) as conn, \
                conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SELECT * FROM `{table}`")
            return list(cur.fetchall())

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def files_of_last_batch(changelog: Path) -> int:
    """How many files the last batch committed to a Delta changelog (not a compaction's commit):
    one per task that wrote changes of the table."""
    log = changelog / "_delta_log"
    commits = [[json.loads(line) for line in p.read_text().splitlines()] for p in sorted(log.glob("*.json"))]
    last = next(c for c in reversed(commits) if any("txn" in a for a in c))
    return sum(1 for a in last if "add" in a)


def _identity(row: dict[str, Any], key: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row[k] for k in key) if key else tuple(sorted(row.items(), key=lambda kv: kv[0]))


def assert_mirror_equals_source(p: Pipeline, table: str, schema: TableSchema,
                                initial: list[dict[str, Any]] | None = None) -> None:
    """The mirror holds the source's rows. With ``initial`` (the table's rows when the pipeline
    started; a single-column key) DDL may have happened on the way: every mirror column is
    checked under ``lenient`` (:func:`lenient_rows`, the binlog telling each row's last change)."""
    if initial is not None:
        [k] = schema.primary_key
        with contextlib.closing(p.box.admin.connect()) as conn:
            end = current_offset(conn)
        mirror_rows = {r[k]: r for r in p.mirror(table).to_pylist()}
        columns = p.mirror(table).schema.names
        expected = lenient_rows(p.source_rows(table), initial, reference_changes(p, schema, end), k, columns)
        assert sorted(mirror_rows) == sorted(expected), (
            f"{table}: missing {sorted(set(expected) - set(mirror_rows))[:5]}, "
            f"extra {sorted(set(mirror_rows) - set(expected))[:5]}")
        differ = [(i, mirror_rows[i], expected[i]) for i in sorted(expected) if mirror_rows[i] != expected[i]]
        assert not differ, f"{table}: {len(differ)} rows differ (mirror, expected): {differ[:3]}"
        return
    key = schema.primary_key or tuple(schema.column_names)
    mirror = Counter(_identity(r, tuple(key)) for r in _normalize(p.mirror(table).to_pylist(), schema))
    source = Counter(_identity(r, tuple(key)) for r in _normalize(p.source_rows(table), schema))
    missing, extra = source - mirror, mirror - source
    assert not missing and not extra, f"{table}: missing {list(missing)[:5]}, extra {list(extra)[:5]}"
    if schema.primary_key:  # values too, not only keys
        by_key = {_identity(r, key): r for r in _normalize(p.source_rows(table), schema)}
        for r in _normalize(p.mirror(table).to_pylist(), schema):
            assert r == by_key[_identity(r, key)], (table, r, by_key[_identity(r, key)])


def lenient_rows(rows: list[dict[str, Any]], initial: list[dict[str, Any]], changes: list[Any], key: str,
                 columns: list[str]) -> dict[Any, dict[str, Any]]:
    """The mirror ``lenient`` makes of the source ``rows`` (docs/concepts/schema-evolution.md), by key.

    ``changes`` are the binlog changes since ``initial`` (the rows then), in log order, each
    image holding the columns of the schema version it was written under. A row keeps, in a
    column its last change did not have, null (the column came later); in a column the source
    no longer has, that change's value; elsewhere the source's value."""
    last = {r[key]: r for r in initial}
    for c in changes:
        if c.op != "d":
            last[c.after[key]] = c.after
    return {row[key]: {c: (row[c] if c in row else last[row[key]][c]) if c in last[row[key]] else None
                       for c in columns} for row in rows}


def _normalize(rows: list[dict[str, Any]], schema: TableSchema) -> list[dict[str, Any]]:
    return [{c: r[c] for c in schema.column_names} for r in rows]


class _ReadOnlyHistory:
    """The job's schema history (its state directory), read but never written by the checks."""

    def __init__(self, state_dir: Path) -> None:
        self.store = StateStore(str(state_dir))

    def schema_versions(self, table: TableId) -> list[dict[str, Any]]:
        return self.store.schema_versions(table)

    def write_schema_version(self, table: TableId, version: int, data: dict[str, Any]) -> None:
        pass


def reference_changes(p: Pipeline, schema: TableSchema, end: BinlogOffset) -> list[Any]:
    """Every change of the table since the pipeline started, read straight from the binlog
    (decoded with the job's schema history, so a DDL on the way is followed)."""
    assert p.started_at is not None
    config = BinlogReaderOptions(connection=p.box.cdc, server_id=REFERENCE_SERVER_ID, tables=(schema.table_id,),
                                 history=_ReadOnlyHistory(p.state_dir))
    with MySqlBinlogReader(config) as reader:
        return split_key_changes(list(reader.read(p.started_at, end)), schema.primary_key)


def assert_changelog_exact(p: Pipeline, table: str, schema: TableSchema) -> None:
    """One r row per snapshotted key; each binlog change present iff after its chunk's HW."""
    with contextlib.closing(p.box.admin.connect()) as conn:
        end = current_offset(conn)
    log = p.changelog(table).to_pylist()
    key = tuple(schema.primary_key or schema.column_names)
    reads = [r for r in log if r["op"] == "r"]
    read_keys = Counter(_identity(r["after"], key) for r in reads)
    if schema.primary_key:
        dup = [k for k, n in read_keys.items() if n > 1]
        assert not dup, f"{table}: keys read twice by the snapshot: {dup[:5]}"
    hw: dict[tuple[Any, ...], BinlogOffset] = {
        _identity(r["after"], key): BinlogOffset(r["source"]["file"], r["source"]["pos"]) for r in reads}
    last_hw = functools.reduce(max_offset, hw.values()) if hw else p.started_at
    events = Counter((r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["op"]) for r in log if r["op"] != "r")
    twice = [e for e, n in events.items() if n > 1]
    assert not twice, f"{table}: changes written twice: {twice[:5]}"
    reference = {(c.position.file, c.position.pos, c.position.row, c.op): c for c in reference_changes(p, schema, end)}
    invented = set(events) - set(reference)
    assert not invented, f"{table}: changelog rows that are no binlog change: {sorted(invented)[:5]}"
    for ident, change in reference.items():
        k = _identity(change.image(), key)
        pos = ChangePosition(*ident[:3])
        if schema.primary_key and k in hw:
            expected: bool | None = not hw[k].covers(pos)
        elif last_hw is not None and not last_hw.covers(pos):
            expected = True  # after the whole snapshot: must flow
        else:
            expected = None  # key deleted before its chunk was read: either is consistent
        if expected is not None:
            assert (ident in events) == expected, (
                f"{table}: change {ident} on key {k} {'missing' if expected else 'emitted but absorbed'}")


# The exactly-once suites' random writers pause this long between statements: a few hundred a
# second on any machine. Unpaced, a writer made as many as the server took, so a slower run met
# more changes and ran longer still: 180,000 statements in one delta-spark crash test here (88 s).
PACE_S = 0.002

# A statement the server rolled back whole, as an application would retry it: a deadlock with
# another session's statement (a test's own UPDATE among the writer's), a lock wait timeout.
ROLLED_BACK = (1213, 1205)


class WriterThread:
    """Random statements on one table in a thread until stopped (a subclass's :meth:`one`).

    A statement the server rolls back whole (:meth:`was_rolled_back`: a deadlock with another
    session, a lock wait timeout) changed nothing and is skipped, as an application would retry
    it; any other error stops the writer, and :meth:`stop` raises it (the test fails on its cause,
    not on the changes that are missing after it)."""

    pause_s = 0.0  # between statements

    def __init__(self, conn: Any, table: str, seed: int, key_space: int, pause_s: float | None = None) -> None:
        self.conn = conn
        self.table, self.key_space = table, key_space
        if pause_s is not None:
            self.pause_s = pause_s
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.statements = 0
        self.rolled_back = 0
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)
        if self.failure is not None:
            raise AssertionError(f"the random writer of {self.table} failed after {self.statements} statements: "
                                 f"{self.failure!r}") from self.failure

    def _run(self) -> None:
        with contextlib.closing(self.conn):
            while not self.stop_event.is_set():
                with self.lock:
                    try:
                        self.one()
                    except BaseException as exc:
                        if not self.was_rolled_back(exc):
                            self.failure = exc
                            return
                        self.rolled_back += 1
                if self.pause_s:
                    self.stop_event.wait(self.pause_s)

    def one(self) -> None:
        raise NotImplementedError

    def was_rolled_back(self, exc: BaseException) -> bool:
        return False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self.lock:
            yield


class RandomWriter(WriterThread):
    """Random inserts, updates, deletes and key updates on integer-keyed MySQL tables."""

    def __init__(self, box: Sandbox, database: str, table: str, seed: int, key_space: int = 3000,
                 pause_s: float = 0.0) -> None:
        super().__init__(box.admin.connect(database), table, seed, key_space, pause_s)

    def was_rolled_back(self, exc: BaseException) -> bool:
        return isinstance(exc, pymysql.err.OperationalError) and exc.args[0] in ROLLED_BACK

    def one(self) -> None:
        r, t, k = self.rng, self.table, self.rng.randrange(0, self.key_space)
        statement = r.choice([
            f"INSERT IGNORE INTO {t} (id, v, n) VALUES ({k}, 'w{k}', {r.randrange(1000)})",
            f"UPDATE {t} SET v = 'u{r.randrange(1000)}', n = n + 1 WHERE id = {k}",
            f"DELETE FROM {t} WHERE id = {k}",
            f"UPDATE IGNORE {t} SET id = {r.randrange(0, self.key_space)} WHERE id = {k}",
            f"UPDATE {t} SET n = n - 1 WHERE id BETWEEN {k} AND {k + 5}",
        ])
        with self.conn.cursor() as cur:
            cur.execute(statement)
        self.statements += 1


class Writer(Protocol):
    """A background writer: :class:`RandomWriter`, or any thread with a ``stop``."""

    def start(self) -> object: ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def writing(*writers: Writer) -> Iterator[None]:
    """Run the writers in the block; stop them all after it, then raise the first writer's
    failure (unless the block raised: its error is the one to see)."""
    for w in writers:
        w.start()
    failures: list[AssertionError] = []
    try:
        yield
    finally:
        for w in writers:
            try:
                w.stop()
            except AssertionError as exc:
                failures.append(exc)
    if failures:
        raise failures[0]


# ------------------------------------------------------- the stream stores (Kafka, Pulsar, Pravega)

class HasWorkdir(Protocol):
    workdir: Path


def kafka_sink(p: HasWorkdir, bootstrap: str, prefix: str = "cdc") -> dict[str, Any]:
    """A ``sink:`` entry writing the pipeline's tables to Kafka (staging under its workdir)."""
    return kafka_entry(p.workdir, bootstrap, prefix)


def kafka_entry(workdir: Path, bootstrap: str, prefix: str) -> dict[str, Any]:
    return {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": prefix,
            "partitions": 3, "staging_path": str(workdir / "kafka-staging")}


def pulsar_entry(workdir: Path, broker: Any, prefix: str) -> dict[str, Any]:
    """A ``sink:`` entry writing to Pulsar (staging under ``workdir``)."""
    return {"type": "pulsar", "service_url": broker.service_url, "admin_url": broker.admin_url,
            "topic_prefix": prefix, "partitions": 3, "staging_path": str(workdir / "pulsar-staging")}


def pravega_entry(workdir: Path, controller_uri: str, prefix: str) -> dict[str, Any]:
    """A ``sink:`` entry writing to Pravega (streams ``<prefix>.<db>.<table>`` in the default scope,
    3 segments, staging under ``workdir``)."""
    return {"type": "pravega", "controller_uri": controller_uri, "topic_prefix": prefix, "segments": 3,
            "staging_path": str(workdir / "pravega-staging")}


STREAM_STORES = ("kafka", "pulsar", "pravega")
PRAVEGA_SCOPE = "spark-cdc"  # the Pravega sink's default scope


@dataclass(frozen=True)
class TopicMessage:
    """One message as a plain consumer of a stream store sees it (``value`` None: a tombstone);
    Kafka's headers and Pulsar's properties alike as ``headers``. A Pravega event is its value
    alone: ``key`` None (its routing key is not stored), ``partition`` 0, no headers."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


@dataclass(frozen=True)
class StreamStore:
    """A stream store the exactly-once suites run against: the ``sink:`` entry of a pipeline and a
    plain consumer of its topics (tests/kafka_broker.py, tests/pulsar_broker.py,
    tests/pravega_server.py: none of the sink's code). ``kind`` is ``kafka``, ``pulsar`` or
    ``pravega``; ``broker`` the session's broker (Pravega: its server). ``idle_slices``: how many
    empty slices in a row end a Pravega read (:func:`cdc.app.sandbox.pravega.read_events`, about a
    second each)."""

    kind: str
    broker: Any
    idle_slices: int = 1

    def sink(self, workdir: Path, prefix: str) -> dict[str, Any]:
        """The ``sink:`` entry of topics ``<prefix>.<db>.<table>`` (3 partitions or segments),
        staging under ``workdir``."""
        if self.kind == "kafka":
            return kafka_entry(workdir, self.broker.bootstrap_servers, prefix)
        if self.kind == "pravega":
            return pravega_entry(workdir, self.broker.controller_uri, prefix)
        return pulsar_entry(workdir, self.broker, prefix)

    def topic(self, name: str) -> str:
        """The store's name of a topic the sink calls ``name`` (``<prefix>.<db>.<table>``; Pravega's
        stream names have ``-`` for each character it refuses, ``_`` included)."""
        if self.kind == "pravega":
            return re.sub(r"[^a-zA-Z0-9.-]", "-", name)
        return name if self.kind == "kafka" else f"persistent://public/default/{name}"

    def messages(self, name: str) -> list[TopicMessage]:
        """Every message of topic ``name`` (the sink's 3 partitions), partitions in order, each in
        its order."""
        if self.kind == "kafka":
            from kafka_broker import read_topic

            return [TopicMessage(r.partition, r.key, r.value, dict(r.headers))
                    for r in read_topic(self.broker.bootstrap_servers, self.topic(name))]
        if self.kind == "pravega":
            from pravega_server import read_stream

            return [TopicMessage(0, None, value, {})
                    for value in read_stream(self.broker.controller_uri, PRAVEGA_SCOPE, self.topic(name),
                                             self.idle_slices)]
        from pulsar_broker import read_topic as read_pulsar

        return [TopicMessage(r.partition, r.key, r.value, {k: v.encode() for k, v in r.properties.items()})
                for r in read_pulsar(self.broker.service_url, self.topic(name), 3)]

    def log(self, name: str, schema: TableSchema) -> list[dict[str, Any]]:
        """Every message of topic ``name`` as changelog-like rows (op, before, after, source); a
        tombstone is ``op=None``. The checks follow each key's messages: a Pravega event's key is
        taken from the event itself (:func:`key_of_event`)."""
        return _as_changes(self.messages(name), schema)

    def assert_exact(self, p: Pipeline, prefix: str) -> None:
        """:func:`assert_log_of_topic_exact` on the topic of each of the pipeline's tables."""
        for table_id, schema in p.schemas().items():
            name = f"{prefix}.{p.database}.{table_id.table}"
            assert_log_of_topic_exact(p, name, self.log(name, schema), table_id.table, schema,
                                      tombstones=self.kind != "pravega")


def stream_store(request: Any) -> StreamStore:
    """The store a test is parametrized with (``request.param``, indirect), on the session's broker.
    Pravega's case is skipped where its Python client has no wheel (CPython 3.12+)."""
    if request.param == "pravega":
        pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for "
                            "CPython 3.10 and 3.11 only")
    return _on_session_broker(request, request.param)


def every_stream_store(request: Any) -> list[StreamStore]:
    """Each stream store on the session's brokers, for one job that fans out to all of them
    (Pravega left out where its Python client has no wheel: CPython 3.12+)."""
    kinds = [k for k in STREAM_STORES if k != "pravega" or importlib.util.find_spec("pravega_client") is not None]
    return [_on_session_broker(request, k) for k in kinds]


def _on_session_broker(request: Any, kind: str) -> StreamStore:
    """The store ``kind`` on its session fixture's broker (Pravega: its server)."""
    return StreamStore(kind, request.getfixturevalue("pravega_server" if kind == "pravega" else f"{kind}_broker"))


def restarted_pravega(server: Any) -> StreamStore:
    """The store on a Pravega of its own restarted on its folders (a durable sandbox): its segment
    store reads the segments back with a cold cache, and a read can go more than the reader's
    one-second slice without data mid-stream (in one CI run the read-back ended there, short of a
    chunk and of the changes after it). Three empty slices in a row end its reads."""
    return StreamStore("pravega", server, idle_slices=3)


def key_of_event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
                 schema: TableSchema) -> bytes:
    """A change's key as Debezium's key payload JSON, from its own image (the ``before`` of a
    delete, else the ``after``): for a store whose events carry no key (Pravega routes by it but
    does not keep it)."""
    image = before if op == "d" else after
    assert image is not None, f"a {op} event without its image"
    return json.dumps({k: image[k] for k in schema.primary_key or schema.column_names}, default=str).encode()


def _as_changes(records: list[TopicMessage], schema: TableSchema) -> list[dict[str, Any]]:
    from cdc.model.debezium.codec import decode_value

    out: list[dict[str, Any]] = []
    for m in records:
        record = decode_value(m.value, schema)
        if record is None:
            out.append({"op": None, "key": m.key, "partition": m.partition})
            continue
        s = record.source
        key = m.key if m.key is not None else key_of_event(record.op, record.before, record.after, schema)
        out.append({"op": record.op, "before": record.before, "after": record.after, "key": key,
                    "partition": m.partition, "source": {"file": s.file, "pos": s.pos, "row": s.row}})
    return out


def assert_tombstones(topic: str, log: list[dict[str, Any]]) -> None:
    """Each delete is followed, in its partition, by a tombstone of its key, and each tombstone
    follows a delete (``tombstones_on_delete``, on by default); ``log`` in partition order."""
    for i, r in enumerate(log):
        following = log[i + 1] if i + 1 < len(log) else None
        if r["op"] == "d":
            assert following is not None and following["op"] is None, f"{topic}: a delete without its tombstone"
            assert (following["key"], following["partition"]) == (r["key"], r["partition"]), (
                f"{topic}: the tombstone after a delete of {r['key']!r} is another key's")
        if r["op"] is None:
            assert i > 0 and log[i - 1]["op"] == "d", f"{topic}: a tombstone of {r['key']!r} follows no delete"


def assert_log_of_topic_exact(p: Pipeline, topic: str, log: list[dict[str, Any]], table: str,
                              schema: TableSchema, tombstones: bool = True) -> None:
    """The Delta checks, on a topic: the newest message per key equals the source table, one r
    message per snapshotted key, each binlog change exactly once iff after its chunk's HW, each
    key's messages in binlog order (the order a plain consumer reads them in: Kafka's and
    Pulsar's per partition, Pravega's per segment, each key in one), and each delete followed by
    its tombstone (``tombstones``; else there is none: Pravega's)."""
    from cdc.model.schema import TableId

    if tombstones:
        assert_tombstones(topic, log)
    else:
        assert all(r["op"] is not None for r in log), f"{topic}: a tombstone where there are none"
    key = tuple(schema.primary_key or schema.column_names)
    state: dict[Any, dict[str, Any]] = {}
    last_pos: dict[Any, tuple[str, int, int]] = {}
    for r in log:  # the newest message per key; a delete or a tombstone removes the key
        if r["op"] is None:
            state.pop(r["key"], None)
            continue
        if r["op"] != "r":
            pos = (r["source"]["file"], r["source"]["pos"], r["source"]["row"])
            assert last_pos.get(r["key"], pos) <= pos, f"{table}: key {r['key']!r} out of binlog order"
            last_pos[r["key"]] = pos
        if r["op"] == "d":
            state.pop(r["key"], None)
        else:
            state[r["key"]] = r["after"]
    mirror = Counter(_identity(r, key) for r in _normalize(list(state.values()), schema))
    source = Counter(_identity(r, key) for r in _normalize(p.source_rows(table), schema))
    missing, extra = source - mirror, mirror - source
    assert not missing and not extra, f"{topic}: missing {list(missing)[:5]}, extra {list(extra)[:5]}"
    by_key = {_identity(r, key): r for r in _normalize(p.source_rows(table), schema)}
    for r in _normalize(list(state.values()), schema):
        assert r == by_key[_identity(r, key)], (topic, r)
    _assert_log_exact(p, table, schema, [r for r in log if r["op"] is not None])
    assert TableId(p.database, table) in p.schemas()


def _assert_log_exact(p: Pipeline, table: str, schema: TableSchema, log: list[dict[str, Any]]) -> None:
    """:func:`assert_changelog_exact`'s checks on change rows read from anywhere."""
    with contextlib.closing(p.box.admin.connect()) as conn:
        end = current_offset(conn)
    key = tuple(schema.primary_key or schema.column_names)
    reads = [r for r in log if r["op"] == "r"]
    read_keys = Counter(_identity(r["after"], key) for r in reads)
    dup = [k for k, n in read_keys.items() if n > 1]
    assert not dup, f"{table}: keys read twice by the snapshot: {dup[:5]}"
    hw = {_identity(r["after"], key): BinlogOffset(r["source"]["file"], r["source"]["pos"]) for r in reads}
    last_hw = functools.reduce(max_offset, hw.values()) if hw else p.started_at
    events = Counter((r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["op"]) for r in log if r["op"] != "r")
    twice = [e for e, n in events.items() if n > 1]
    assert not twice, f"{table}: changes written twice: {twice[:5]}"
    reference = {(c.position.file, c.position.pos, c.position.row, c.op): c for c in reference_changes(p, schema, end)}
    invented = set(events) - set(reference)
    assert not invented, f"{table}: messages that are no binlog change: {sorted(invented)[:5]}"
    for ident, change in reference.items():
        k = _identity(change.image(), key)
        pos = ChangePosition(*ident[:3])
        if k in hw:
            expected: bool | None = not hw[k].covers(pos)
        elif last_hw is not None and not last_hw.covers(pos):
            expected = True
        else:
            expected = None
        if expected is not None:
            assert (ident in events) == expected, (
                f"{table}: change {ident} on key {k} {'missing' if expected else 'emitted but absorbed'}")
