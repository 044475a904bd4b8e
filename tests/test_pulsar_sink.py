"""The Pulsar sink beyond the contract suite: its configuration, a broker without deduplication,
a broker restarted in the middle of a batch, and the key routing; and the follow-topic source
(sinks/pulsar/source.py) on its own.

The sink contract (tests/test_sink_contract.py) and the exactly-once pipeline cases
(tests/test_pipeline.py) run it too; these cases need the real broker of the session
(tests/pulsar_broker.py) but no database and no Spark.
"""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
from change_batches import SINGLE_KEY, event, row
from faults import InjectedFault
from pulsar_broker import read_topic
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from test_sink_contract import stage

from cdc.app.config import parse_config
from cdc.app.sandbox.pulsar import PulsarSandbox
from cdc.model.debezium.codec import decode_value
from cdc.model.debezium.headers import RUN_ID
from cdc.model.errors import ConfigError
from sinks.pulsar.admin import DeduplicationOff, PulsarAdmin
from sinks.pulsar.config import PulsarSinkConfig
from sinks.pulsar.producers import Producers, partition_of
from sinks.pulsar.sender import BatchSender
from sinks.pulsar.sink import PulsarSink
from sinks.pulsar.source import (
    MessagesGone,
    PulsarTopicsReader,
    TopicSlice,
    parse_position,
)
from sinks.stream.follow_rows import ARROW_SCHEMA
from sinks.stream.messages import NEW_KEY_HEADER, OLD_KEY_HEADER, Message

# org.apache.pulsar.client.impl.Murmur3Hash32.getInstance().makeHash(key) % 7 for the keys "a",
# "key-1" and {"id":1}, printed by pulsar-client 4.2.4 (jars/pulsar) on this machine
JAVA_MURMUR3_MOD_7 = [4, 6, 3]


def _config(broker: PulsarSandbox, tmp: Path, **over: Any) -> PulsarSinkConfig:
    return PulsarSinkConfig(service_url=broker.service_url, admin_url=broker.admin_url,
                            topic_prefix=f"t{abs(hash(str(tmp))) % 10**8}", partitions=3,
                            staging_path=str(tmp / "staging"), **over)


# --- configuration (no server) ----------------------------------------------------------------


def test_the_token_never_shows_and_bad_urls_name_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSAR_TOKEN", "s3cr3t-token")
    source = {"type": "mysql", "hostname": "h", "username": "u", "tables": ["d.t"]}
    raw = {"checkpoint": "/tmp/c", "source": source,
           "sink": {"type": "pulsar", "service_url": "pulsar://h:6650", "admin_url": "http://h:8080",
                    "auth_token": "${PULSAR_TOKEN}"}}
    config = parse_config(raw)
    sink = config.sink[0]
    assert isinstance(sink, PulsarSinkConfig) and sink.auth_token is not None
    assert sink.auth_token.get_secret_value() == "s3cr3t-token"
    assert "s3cr3t" not in repr(sink) and "s3cr3t" not in str(config)
    with pytest.raises(ConfigError, match=r"sink\.service_url.*pulsar://host:port"):
        parse_config({**raw, "sink": {**raw["sink"], "service_url": "http://h:6650"}})


def test_keys_route_as_the_java_clients_murmur3_hash() -> None:
    """The Java client's ``HashingScheme.Murmur3_32Hash`` routing; no key: partition 0."""
    assert partition_of(None, 3) == 0
    assert partition_of(b"anything", 1) == 0
    assert [partition_of(k, 7) for k in (b"a", b"key-1", b'{"id":1}')] == JAVA_MURMUR3_MOD_7


# --- against the session's broker ---------------------------------------------------------------


def test_a_namespace_without_deduplication_is_refused_with_the_fix(pulsar_broker: PulsarSandbox,
                                                                   tmp_path: Path) -> None:
    config = _config(pulsar_broker, tmp_path, namespace="nodedup")
    admin = PulsarAdmin(config)
    admin.check(admin.call("PUT", "/admin/v2/namespaces/public/nodedup"), "creating the namespace")
    admin.check(admin.call("POST", "/admin/v2/namespaces/public/nodedup/deduplication", False), "turning dedup off")
    sink = PulsarSink(config, "job-1")
    with pytest.raises(DeduplicationOff, match=r"set-deduplication public/nodedup --enable"):
        sink.open({SINGLE_KEY.table_id: SINGLE_KEY})


def test_a_broker_restarted_mid_batch_leaves_each_message_once(pulsar_broker: PulsarSandbox,
                                                               tmp_path: Path) -> None:
    """The broker is killed while the batch's first table is being sent and comes back a few
    seconds later: the client resends what it had in flight (the broker drops what it had
    persisted), or the attempt fails and the next one sends what is missing. Each change once,
    a primary-key update with its headers."""
    s = SINGLE_KEY
    config = _config(pulsar_broker, tmp_path, send_timeout_s=5, retry_backoff_s=2, commit_retries=6)
    restarted = threading.Event()

    class RestartBroker:
        def reached(self, point: str) -> None:
            if point == "sink_commit" and not restarted.is_set():
                restarted.set()
                pulsar_broker.restart()

    sink = PulsarSink(config, "job-1", hooks=RestartBroker())
    sink.open({s.table_id: s})
    reads = [event("r", None, row(s, (i,), c_int=i), 1) for i in range(1, 301)]
    sink.commit(0, [stage(sink, s, reads, tasks=1)])
    moved = [event("d", row(s, (1,), c_int=1), None, 5), event("c", None, row(s, (1000,), c_int=1), 5)]
    changes = [event("u", row(s, (i,), c_int=i), row(s, (i,), c_int=-i), 10 + i) for i in range(2, 200)]
    sink.commit(1, [stage(sink, s, moved + changes, tasks=3)])
    sink.close()
    assert restarted.is_set()

    records = read_topic(config.service_url, config.topic(s.table_id), 3)
    decoded = [(r, decode_value(r.value, s, options=config.debezium_options())) for r in records]
    ops = [(d.op, (d.after or d.before or {}).get("id")) for _, d in decoded if d is not None]
    assert len(ops) == len(set(ops)) == 300 + 2 + 198, "each change once"
    state: dict[Any, int] = {}
    for r, d in decoded:
        if d is None or d.op == "d":
            state.pop(r.key, None)
        else:
            assert d.after is not None
            state[r.key] = d.after["c_int"]
    assert sorted(state.values()) == sorted([1, *(-i for i in range(2, 200)), *range(200, 301)])
    assert {k for r, _ in decoded for k in r.properties if k in (NEW_KEY_HEADER, OLD_KEY_HEADER)} == {
        NEW_KEY_HEADER, OLD_KEY_HEADER}, "a primary-key update's headers are properties"
    assert all(RUN_ID in r.properties for r, _ in decoded), "Debezium's context headers on every message"


# --- the follow-topic source (sinks/pulsar/source.py), without Spark ----------------------------


def _read(reader: PulsarTopicsReader, start: dict[str, str], end: dict[str, str]) -> list[tuple[Any, ...]]:
    """What the batch (start, end] reads: (topic, partition, offset, value), each task's rows."""
    rows = []
    for s in reader.partitions(start, end):
        assert isinstance(s, TopicSlice)
        for batch in reader.read(pickle.loads(pickle.dumps(s))):
            assert batch.schema == ARROW_SCHEMA
            rows += [(t, s.partition, o, v) for t, o, v in zip(*batch.to_pydict().values(), strict=True)]
    return rows


def test_the_follow_topic_source_reads_fixed_slices_again_the_same(pulsar_broker: PulsarSandbox,
                                                                  tmp_path: Path) -> None:
    """Offsets fixed at planning: a batch read twice gives the same rows, the next batch starts
    after it, a partition never goes back, empty payloads read as null; the read limit and an
    availableNow run's target bound a batch; a missing message is named."""
    config = _config(pulsar_broker, tmp_path)
    topic, absent = config.full(f"{config.topic_prefix}.src"), config.full(f"{config.topic_prefix}.absent")
    PulsarAdmin(config).create_partitioned(topic, 3)
    client = pulsar.Client(config.service_url)
    producers = [client.create_producer(f"{topic}-partition-{i}", batching_enabled=False) for i in range(2)]

    def send(part: int, values: list[bytes]) -> None:
        for v in values:
            producers[part].send(v)

    send(0, [b"a0", b"", b"a2"])  # partition 2 stays empty
    send(1, [b"b0"])
    reader = pickle.loads(pickle.dumps(PulsarTopicsReader(config, (topic, absent), None)))
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert sorted(first) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    rows = _read(reader, start, first)
    assert rows == [(topic, f"{topic}-partition-0", 0, b"a0"), (topic, f"{topic}-partition-0", 1, None),
                    (topic, f"{topic}-partition-0", 2, b"a2"), (topic, f"{topic}-partition-1", 0, b"b0")]
    send(0, [b"a3"])
    assert _read(reader, start, first) == rows, "a replay reads the same messages"
    assert reader.latestOffset(first, ReadAllAvailable()) != first

    send(1, [f"b{i}".encode() for i in range(1, 11)])
    limited = reader.latestOffset(first, ReadMaxRows(4))  # two partitions move: 2 messages each
    assert [r[3] for r in _read(reader, first, limited)] == [b"a3", b"b1", b"b2"]
    reader.prepareForTriggerAvailableNow()
    send(0, [b"late"])
    end = reader.latestOffset(limited, ReadAllAvailable())
    assert [r[3] for r in _read(reader, limited, end)] == [f"b{i}".encode() for i in range(3, 11)]
    assert reader.latestOffset(end, ReadAllAvailable()) == end, "nothing after the run's target"
    reader.stop()

    ledger, entry, _ = parse_position(end[f"{topic}-partition-0"])
    gone = {**end, f"{topic}-partition-0": f"{ledger}:{entry}:5"}  # never written: a batch index of 5
    with pytest.raises(MessagesGone, match="retention"):
        _read(reader, first, gone)
    client.close()


# --- the sender's Pulsar batches (sinks/pulsar/sender.py) ---------------------------------------


def entry_sizes(service_url: str, partition: str) -> list[int]:
    """How many messages each entry (one Pulsar batch) of a topic partition holds, in order."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    sizes: dict[tuple[int, int], int] = {}
    try:
        reader = client.create_reader(partition, pulsar.MessageId.earliest)
        while reader.has_message_available():
            mid = reader.read_next(30_000).message_id()
            sizes[(mid.ledger_id(), mid.entry_id())] = sizes.get((mid.ledger_id(), mid.entry_id()), 0) + 1
    finally:
        client.close()
    return [n for _, n in sorted(sizes.items())]


def test_the_senders_groups_travel_as_the_clients_batches(pulsar_broker: PulsarSandbox, tmp_path: Path) -> None:
    """A group closes at 1,000 messages, with the message that brings it to 128 KiB, or before
    the one that would take it past; a larger message goes alone, and the partition's last group
    goes with the flush. Each group is one entry on the broker."""
    config = _config(pulsar_broker, tmp_path)
    topic = config.full(f"{config.topic_prefix}.groups")
    PulsarAdmin(config).create_partitioned(topic, 1)
    values = [b"t"] * 2500 + [b"k" * 1000] * 300 + [b"B" * 200_000] + [b"t"] * 10
    producers = Producers(config, "spark-cdc-groups")
    try:
        sender = BatchSender(producers, 1, {topic: 1})
        assert sender.send_all(topic, (Message(b"k", v, "r", "") for v in values)) == len(values)
        producers.flush()
        sender.check()
    finally:
        producers.close()
    # 1,000 and 1,000 tiny ones; 500 tiny and 130 of 1 KB (131,500 bytes would pass 131,072);
    # 131 of 1 KB; the last 39 (the large one would pass); the large one; the last 10
    assert entry_sizes(config.service_url, f"{topic}-partition-0") == [1000, 1000, 630, 131, 39, 1, 10]


def test_a_batch_partly_on_the_brokers_is_completed_once_by_its_replay(pulsar_broker: PulsarSandbox,
                                                                      tmp_path: Path) -> None:
    """The first attempt dies once every partition holds some of the batch's Pulsar batches (its
    last group per partition still waits for the flush); the replay sends only the groups above
    what each producer's broker persisted: each change once, each partition in order."""
    s = SINGLE_KEY
    config = _config(pulsar_broker, tmp_path)
    admin = PulsarAdmin(config)
    partitions = [f"{config.topic(s.table_id)}-partition-{i}" for i in range(3)]

    class DieOnceSomeAreSent:
        armed = True

        def reached(self, point: str) -> None:
            if point != "sink_commit" or not self.armed:
                return
            self.armed = False
            deadline = time.monotonic() + 60
            while any(admin.last_message_id(p) is None for p in partitions):
                assert time.monotonic() < deadline, "no Pulsar batch reached the broker in 60 s"
                time.sleep(0.05)
            raise InjectedFault("injected fault at sink_commit")

    sink = PulsarSink(config, "job-1", hooks=DieOnceSomeAreSent())
    sink.open({s.table_id: s})
    reads = [event("r", None, row(s, (i,), c_int=i), 1) for i in range(1, 1201)]  # ~4.7 KB: ~27 per group
    staged = stage(sink, s, reads, tasks=2)
    with pytest.raises(InjectedFault):
        sink.commit(0, [staged])
    first = [sum(entry_sizes(config.service_url, p)) for p in partitions]
    assert all(n > 0 for n in first)
    sink.commit(0, [staged])
    sink.close()
    records = read_topic(config.service_url, config.topic(s.table_id), 3)
    ids = [decode_value(r.value, s, options=config.debezium_options()).after["id"] for r in records]  # type: ignore[union-attr]
    assert sorted(ids) == list(range(1, 1201)), "each change once"
    for part in range(3):
        mine = [i for r, i in zip(records, ids, strict=True) if r.partition == part]
        assert mine == sorted(mine), "each partition in the batch's order"
    assert sum(first) < 1200, "the first attempt left its last groups unsent"
