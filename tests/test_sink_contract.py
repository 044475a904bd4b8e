"""The Sink contract (sinks/base.py), checked for every registered sink against a reference model.

Each case drives a sink the way the job does: rows are staged by the sink's writer (in the job,
on executors), then the driver commits the batch. A *probe* per sink reads back what a consumer
sees: the current row per key (the mirror, or the newest message per key) and every change in
order (the changelog, or the topic). Proven for each sink:

* random batches of r/c/u/d (primary-key updates included, several staged sets per batch as
  several tasks make them) leave the sink equal to the model, batch after batch;
* every change is delivered exactly once, in log order per key;
* a batch committed twice (on the same sink, or after a restart) changes nothing the second time;
* a crash after staging and before the commit, and a crash in the middle of a commit, recover:
  the replayed batch lands exactly once.

No database is needed; sinks run against their real stores (Delta tables in a temp folder).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise, product
from typing import Any

import pyarrow as pa
import pytest
from change_batches import (
    COMPOSITE_KEY,
    KEY_VALUES,
    SINGLE_KEY,
    apply,
    batch,
    event,
    frozen_rows,
    key_of,
    model_rows,
    row,
)
from deltalake import DeltaTable
from faults import FileFaults, InjectedFault
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc.model.schema import TableSchema
from sinks.base import Committed, Sink, TableBatch
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.sink import DeltaSink
from sinks.delta.tables import read_table


@dataclass
class SinkKind:
    """How the suite makes and reads one kind of sink.

    Attributes:
        make: ``(root, job_id, hooks) -> sink`` (not opened): a new object is a restarted job.
        state: the rows a consumer sees now, per key (``root``, schema).
        changes: every change row delivered, in delivery order (``root``, schema).
        examples: random sequences per schema (fewer where each commit is a Spark job).
    """

    make: Callable[[str, str, Any], Sink]
    state: Callable[[str, TableSchema], list[dict[str, Any]]]
    changes: Callable[[str, TableSchema], list[dict[str, Any]]]
    examples: int = 20


def _delta_read(root: str, schema: TableSchema, kind: str) -> list[dict[str, Any]]:
    uri = DeltaSinkConfig(path=root).uri(schema.table_id, "mirror" if kind == "mirror" else "changelog")
    if not DeltaTable.is_deltatable(uri):
        return []
    rows: list[dict[str, Any]] = read_table(uri).to_pylist()
    return rows


def _delta(mirror_mode: str, engine: str = "delta-rs") -> SinkKind:
    def make(root: str, job_id: str, hooks: Any) -> Sink:
        # Every example's tables share names: they are not registered in the test session's catalog.
        config = DeltaSinkConfig(path=root, engine=engine, async_mirror=mirror_mode == "async",  # type: ignore[arg-type]
                                 register_tables=False)
        spark = None
        if engine == "delta-spark":
            from spark_session import run_session

            spark = run_session()  # the test run's session
        return DeltaSink(config, job_id, spark=spark, hooks=hooks)

    def changes(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        # A table has no row order: the changelog's order is its rows' log positions.
        rows = _delta_read(root, schema, "changelog")
        return sorted(rows, key=lambda r: (r["source"]["file"], r["source"]["pos"], r["source"]["row"]))

    return SinkKind(make, lambda root, s: _delta_read(root, s, "mirror"), changes)


def _kafka() -> SinkKind:
    """Kafka: the state is the newest message per key (tombstones and deletes remove the key),
    the changes every change message in topic order, read by a plain read_committed consumer."""
    import hashlib

    from kafka_broker import read_topic, shared_broker

    from cdc.model.debezium.codec import decode_value
    from sinks.kafka.config import KafkaSinkConfig
    from sinks.kafka.sink import KafkaSink

    def config(root: str) -> KafkaSinkConfig:
        prefix = "contract-" + hashlib.sha1(root.encode()).hexdigest()[:12]  # one topic per test
        return KafkaSinkConfig(bootstrap_servers=shared_broker().bootstrap_servers, topic_prefix=prefix,
                               partitions=3, staging_path=f"{root}/kafka-staging",
                               bigint_unsigned_handling_mode="precise")

    def make(root: str, job_id: str, hooks: Any) -> Sink:
        return KafkaSink(config(root), job_id, hooks=hooks)

    def changes(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        c = config(root)
        out = []
        for r in read_topic(c.bootstrap_servers, c.topic(schema.table_id)):
            record = decode_value(r.value, schema, options=c.debezium_options())
            if record is not None:
                out.append({"op": record.op, "before": record.before, "after": record.after,
                            "source": {"file": record.source.file, "pos": record.source.pos,
                                       "row": record.source.row}})
        return out

    def state(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        c = config(root)
        rows: dict[bytes | None, dict[str, Any]] = {}
        for r in read_topic(c.bootstrap_servers, c.topic(schema.table_id)):
            record = decode_value(r.value, schema, options=c.debezium_options())
            if record is None or record.op == "d":
                rows.pop(r.key, None)
            else:
                assert record.after is not None
                rows[r.key] = record.after
        return list(rows.values())

    return SinkKind(make, state, changes)


def _pulsar() -> SinkKind:
    """Pulsar: as Kafka's, read by a plain Reader of each partition from its first message (an
    empty payload is a tombstone)."""
    import hashlib

    from pulsar_broker import read_topic, shared_pulsar

    from cdc.model.debezium.codec import decode_value
    from sinks.pulsar.config import PulsarSinkConfig
    from sinks.pulsar.sink import PulsarSink

    def config(root: str) -> PulsarSinkConfig:
        prefix = "contract-" + hashlib.sha1(root.encode()).hexdigest()[:12]  # one topic per test
        broker = shared_pulsar()
        return PulsarSinkConfig(service_url=broker.service_url, admin_url=broker.admin_url, topic_prefix=prefix,
                                partitions=3, staging_path=f"{root}/pulsar-staging",
                                bigint_unsigned_handling_mode="precise")

    def make(root: str, job_id: str, hooks: Any) -> Sink:
        return PulsarSink(config(root), job_id, hooks=hooks)

    def records(root: str, schema: TableSchema) -> list[tuple[bytes | None, Any]]:
        c = config(root)
        return [(r.key, decode_value(r.value, schema, options=c.debezium_options()))
                for r in read_topic(c.service_url, c.topic(schema.table_id), 3)]

    def changes(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        return [{"op": record.op, "before": record.before, "after": record.after,
                 "source": {"file": record.source.file, "pos": record.source.pos, "row": record.source.row}}
                for _, record in records(root, schema) if record is not None]

    def state(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        rows: dict[bytes | None, dict[str, Any]] = {}
        for key, record in records(root, schema):
            if record is None or record.op == "d":
                rows.pop(key, None)
            else:
                assert record.after is not None
                rows[key] = record.after
        return list(rows.values())

    return SinkKind(make, state, changes)


def _pravega() -> SinkKind:
    """Pravega: an event is the Debezium value alone (no key, no tombstone): the state is the
    newest event per key of its image, the changes every event, read by a reader group from the
    stream's head (segment by segment; each key stays in one segment)."""
    import hashlib

    from pravega_server import read_stream, shared_pravega

    from cdc.model.debezium.codec import decode_value
    from sinks.pravega.config import PravegaSinkConfig
    from sinks.pravega.sink import PravegaSink

    def config(root: str) -> PravegaSinkConfig:
        prefix = "contract-" + hashlib.sha1(root.encode()).hexdigest()[:12]  # one stream per test
        return PravegaSinkConfig(controller_uri=shared_pravega().controller_uri, topic_prefix=prefix,
                                 segments=3, staging_path=f"{root}/pravega-staging",
                                 bigint_unsigned_handling_mode="precise")

    def make(root: str, job_id: str, hooks: Any) -> Sink:
        # the session's server fixture skips where the client has no wheel; this kind starts it outside a fixture
        pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for CPython 3.10 "
                                                     "and 3.11 only")
        return PravegaSink(config(root), job_id, hooks=hooks)

    def changes(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        c = config(root)
        out = []
        for value in read_stream(c.controller_uri, c.scope, c.topic(schema.table_id)):
            record = decode_value(value, schema, options=c.debezium_options())
            assert record is not None, "no tombstones on Pravega"
            out.append({"op": record.op, "before": record.before, "after": record.after,
                        "source": {"file": record.source.file, "pos": record.source.pos, "row": record.source.row}})
        return out

    def state(root: str, schema: TableSchema) -> list[dict[str, Any]]:
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in changes(root, schema):
            key = key_of(schema, r["before"] if r["op"] == "d" else r["after"])
            if r["op"] == "d":
                rows.pop(key, None)
            else:
                rows[key] = r["after"]
        return list(rows.values())

    return SinkKind(make, state, changes)


SINK_KINDS = {
    "delta-async-mirror": _delta("async"),
    "delta-inline-mirror": _delta("inline"),
    # (examples per key shape: each shape runs its own test)
    "delta-spark": dataclasses.replace(_delta("async", "delta-spark"), examples=3),  # each MERGE: Spark jobs
    "kafka": dataclasses.replace(_kafka(), examples=5),  # each read-back polls the broker
    "pulsar": dataclasses.replace(_pulsar(), examples=5),  # each open creates producers, reads the control topic
    "pravega": dataclasses.replace(_pravega(), examples=2),  # each read-back waits out the reader's idle slice (~1 s)
}


@pytest.fixture(params=sorted(SINK_KINDS))
def kind(request: pytest.FixtureRequest) -> SinkKind:
    return SINK_KINDS[request.param]


@pytest.fixture
def root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="sink-contract-") as d:
        yield d


def opened(kind: SinkKind, root: str, schema: TableSchema, hooks: Any = None) -> Sink:
    sink = kind.make(root, "job-1", hooks or FileFaults(f"{root}/.faults"))
    sink.open({schema.table_id: schema})
    return sink


def stage(sink: Sink, schema: TableSchema, events: list[dict[str, Any]], tasks: int = 1) -> TableBatch:
    """Stage a batch's events as the job's tasks do: snapshot rows and log changes apart, the
    changes cut into ``tasks`` consecutive pieces, each staged by its own writer (pickled)."""
    import pickle

    out = TableBatch(schema)
    reads = [e for e in events if e["op"] == "r"]
    changes = [e for e in events if e["op"] != "r"]
    if reads:
        writer = pickle.loads(pickle.dumps(sink.writer()))
        out.snapshot += writer.write(schema, batch(schema, reads), "snapshot")
        out.snapshot_rows += len(reads)
    size = max(1, -(-len(changes) // tasks))
    for at in range(0, len(changes), size):
        writer = pickle.loads(pickle.dumps(sink.writer()))
        out.changes += writer.write(schema, batch(schema, changes[at:at + size]), "changes")
        out.change_rows += len(changes[at:at + size])
    return out


def committed_anything(result: list[Committed]) -> bool:
    return any(c.snapshot or c.changes for c in result)


def change_key(schema: TableSchema, r: dict[str, Any]) -> tuple[str, Any]:
    image = r["before"] if r["op"] == "d" else r["after"]
    return r["op"], key_of(schema, image)


# ---------------------------------------------------------------- random sequences vs the model

def _draw_events(data: st.DataObject, schema: TableSchema,
                 state: dict[tuple[Any, ...], dict[str, Any]], pos: int) -> list[dict[str, Any]]:
    """A valid batch: r only for keys absent from the sink, and never with c/u/d on one key (the
    source guarantees both: a key is read once, and its changes flow after its chunk)."""
    keys = list(product(*(KEY_VALUES[k] for k in schema.primary_key)))
    state = dict(state)
    r_keys: set[tuple[Any, ...]] = set()
    cud_keys: set[tuple[Any, ...]] = set()
    events: list[dict[str, Any]] = []
    for _ in range(data.draw(st.integers(0, 8), label="events")):
        present = [k for k in state if k not in r_keys]
        absent = [k for k in keys if k not in state and k not in r_keys]
        fresh = [k for k in absent if k not in cud_keys]
        kinds = (["r"] if fresh else []) + (["c"] if absent else []) + (["u", "d"] if present else [])
        kinds += ["pk"] if present and absent else []
        if not kinds:
            break
        choice = data.draw(st.sampled_from(kinds), label="kind")
        pool = fresh if choice == "r" else absent if choice == "c" else present
        key = data.draw(st.sampled_from(pool), label="key")
        new_key = data.draw(st.sampled_from(absent), label="new_key") if choice == "pk" else key
        after = row(schema, new_key, c_int=data.draw(st.integers(-5, 5), label="value"),
                    c_str=data.draw(st.text(max_size=4), label="text"))
        op = {"r": "r", "c": "c", "u": "u", "pk": "u", "d": "d"}[choice]
        if op == "u" and new_key != key:  # a primary-key update arrives as a delete and a create
            pair = [event("d", state[key], None, pos + len(events)), event("c", None, after, pos + len(events))]
        else:
            pair = [event(op, state.get(key) if op in ("u", "d") else None,
                          None if op == "d" else after, pos + len(events))]
        events += pair
        (r_keys if op == "r" else cud_keys).update({key, new_key})
        apply(state, schema, pair)
    return events


@pytest.mark.parametrize("schema", [SINGLE_KEY, COMPOSITE_KEY], ids=["single-key", "composite-key"])
def test_random_batches_match_the_model_exactly_once(kind: SinkKind, schema: TableSchema) -> None:
    @settings(max_examples=kind.examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def sequences(data: st.DataObject) -> None:
        random_sequence_matches_the_model(kind, schema, data)

    sequences()


def random_sequence_matches_the_model(kind: SinkKind, schema: TableSchema, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(prefix="sink-model-") as root:
        faults = FileFaults(f"{root}/.faults")
        sink = opened(kind, root, schema, faults)
        model: dict[tuple[Any, ...], dict[str, Any]] = {}
        sent: list[dict[str, Any]] = []
        for batch_id in range(data.draw(st.integers(1, 4), label="batches")):
            events = _draw_events(data, schema, model, pos=1000 * (batch_id + 1))
            tasks = data.draw(st.integers(1, 3), label="tasks")
            crash = data.draw(st.sampled_from(["none", "after-staging", "mid-commit"]), label="crash")
            staged = stage(sink, schema, events, tasks)
            if crash == "after-staging":  # the driver dies before committing: a restart re-stages
                sink = opened(kind, root, schema, faults)
                staged = stage(sink, schema, events, tasks)
            elif crash == "mid-commit" and (staged.snapshot or staged.changes):
                faults.arm("sink_commit")
                with pytest.raises(InjectedFault):
                    sink.commit(batch_id, [staged])
                sink = opened(kind, root, schema, faults)  # restart: replay the same batch
                staged = stage(sink, schema, events, tasks)
            sink.commit(batch_id, [staged])
            sink.close()
            again = opened(kind, root, schema, faults)  # a restarted job replays it once more
            assert not committed_anything(again.commit(batch_id, [stage(again, schema, events, tasks)]))
            again.close()
            apply(model, schema, events)
            sent += events
            assert model_rows(model) == frozen_rows(kind.state(root, schema))
        delivered = [{k: r[k] for k in ("op", "before", "after")} for r in kind.changes(root, schema)]
        expected = [{k: e[k] for k in ("op", "before", "after")} for e in sent]
        assert frozen_rows(delivered) == frozen_rows(expected), "each change exactly once"
        per_key = {}
        for r in delivered:  # log order per key: each key's changes arrive in the order sent
            per_key.setdefault(key_of(schema, r["before"] or r["after"]), []).append(r["op"])
        for key, ops in per_key.items():
            assert ops == [e["op"] for e in expected if key_of(schema, e["before"] or e["after"]) == key]


# ---------------------------------------------------------------- fixed cases

def test_one_key_changed_across_tasks_ends_with_its_last_change(kind: SinkKind, root: str) -> None:
    s = SINGLE_KEY
    sink = opened(kind, root, s)
    sink.commit(0, [stage(sink, s, [event("r", None, row(s, (1,), c_int=0), 1)])])
    versions = [row(s, (1,), c_int=i) for i in range(7)]
    events = [event("u", a, b, 10 + i) for i, (a, b) in enumerate(pairwise(versions))]
    sink.commit(1, [stage(sink, s, events, tasks=3)])
    sink.close()
    assert [r["c_int"] for r in kind.state(root, s)] == [6]


def test_a_commit_twice_commits_once(kind: SinkKind, root: str) -> None:
    s = SINGLE_KEY
    sink = opened(kind, root, s)
    staged = stage(sink, s, [event("c", None, row(s, (1,)), 5), event("r", None, row(s, (2,)), 5)])
    first = sink.commit(3, [staged])
    assert committed_anything(first)
    assert not committed_anything(sink.commit(3, [staged]))
    assert not committed_anything(sink.commit(2, [staged])), "an older batch is also recognised"
    sink.close()
    assert len(kind.changes(root, s)) == 2


def test_an_empty_batch_commits_nothing(kind: SinkKind, root: str) -> None:
    sink = opened(kind, root, SINGLE_KEY)
    assert not committed_anything(sink.commit(0, [stage(sink, SINGLE_KEY, [])]))
    sink.close()
    assert kind.state(root, SINGLE_KEY) == [] and kind.changes(root, SINGLE_KEY) == []


def test_another_job_id_is_another_record(kind: SinkKind, root: str) -> None:
    s = SINGLE_KEY
    first = kind.make(root, "first-checkpoint", FileFaults(f"{root}/.faults"))
    first.open({s.table_id: s})
    first.commit(7, [stage(first, s, [event("c", None, row(s, (1,)), 5)])])
    first.close()
    second = kind.make(root, "second-checkpoint", FileFaults(f"{root}/.faults"))
    second.open({s.table_id: s})
    assert committed_anything(second.commit(0, [stage(second, s, [event("u", row(s, (1,)), row(s, (1,), c_int=2), 6)])]))
    second.close()
    assert [r["c_int"] for r in kind.state(root, s)] == [2]


def test_staged_rows_are_invisible_until_committed(kind: SinkKind, root: str) -> None:
    s = SINGLE_KEY
    sink = opened(kind, root, s)
    staged = stage(sink, s, [event("r", None, row(s, (1,)), 1), event("c", None, row(s, (2,)), 2)])
    assert kind.state(root, s) == [] and kind.changes(root, s) == []
    sink.commit(0, [staged])
    sink.close()
    assert sorted(r["id"] for r in kind.state(root, s)) == [1, 2]


def test_rows_of_a_wrong_shape_are_refused_when_staged(kind: SinkKind, root: str) -> None:
    from sinks.base import InvalidChangeBatch

    sink = opened(kind, root, SINGLE_KEY)
    bad = batch(SINGLE_KEY, [event("c", None, row(SINGLE_KEY, (1,)), 1)]).drop_columns(["source"])
    with pytest.raises(InvalidChangeBatch, match="lacks columns"):
        sink.writer().write(SINGLE_KEY, bad, "changes")
    assert isinstance(bad, pa.Table)
