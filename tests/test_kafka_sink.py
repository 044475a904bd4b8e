"""The Kafka sink against a real broker: Debezium fidelity, exactly once, faults, clear errors.

Every read-back uses a plain confluent-kafka consumer with ``isolation.level=read_committed``
(tests/kafka_broker.py), none of the sink's code. The broker-restart tests run their own broker,
so killing it disturbs no other test. No mocks, no sleeps: waits poll with bounded timeouts.
"""

from __future__ import annotations

import datetime as dt
import logging
import pickle
import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from change_batches import SINGLE_KEY, batch, event, row
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_broker import Record, read_topic

from binlog.mysql.types import mysql_column, mysql_table
from cdc.app.sandbox.jvm import LIGHT_SERVER_JVM_OPTIONS
from cdc.app.sandbox.kafka import KafkaSandbox
from cdc.app.sandbox.mysql import free_port
from cdc.model.debezium.codec import decode_changelog, decode_key, decode_value, encode_value
from cdc.model.debezium.connect import table_codecs
from cdc.model.debezium.headers import CONNECTOR_NAME, LOGICAL_NAME, RUN_ID, TASK_ID
from cdc.model.schema import TableId, TableSchema
from sinks.base import SinkError, TableBatch
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.control import (
    KafkaUnreachable,
    TopicCreationRefused,
    high_watermarks,
    last_committed_batch,
)
from sinks.kafka.logs import LOGGER_NAME, Repeats
from sinks.kafka.sink import KafkaCommitFailed, KafkaSink, ProducerFenced
from sinks.stream.messages import MessageTooLarge, encode_rows

CUSTOMERS = mysql_table(TableId("inventory", "customers"), (
    mysql_column("id", "int", "int(11)", False),
    mysql_column("email", "varchar", "varchar(255)", False),
), ("id",))


def customer(i: int, email: str = "a@x") -> dict[str, Any]:
    return {"id": i, "email": email}


def config(box: KafkaSandbox, tmp: Any, **over: Any) -> KafkaSinkConfig:
    values: dict[str, Any] = {"bootstrap_servers": box.bootstrap_servers,
                              "topic_prefix": f"t{uuid.uuid4().hex[:10]}", "staging_path": str(tmp / "staging"),
                              "connect_timeout_s": 20.0}
    values.update(over)
    return KafkaSinkConfig(**values)


def sink_for(c: KafkaSinkConfig, schema: TableSchema, job: str = "job-1", hooks: Any = None) -> KafkaSink:
    sink = KafkaSink(c, job, hooks=hooks) if hooks is not None else KafkaSink(c, job)
    sink.open({schema.table_id: schema})
    return sink


def staged(sink: KafkaSink, schema: TableSchema, events: list[dict[str, Any]]) -> TableBatch:
    """Stage as an executor does (the writer travels pickled)."""
    writer = pickle.loads(pickle.dumps(sink.writer()))
    reads = [e for e in events if e["op"] == "r"]
    changes = [e for e in events if e["op"] != "r"]
    out = TableBatch(schema)
    if reads:
        out.snapshot = writer.write(schema, batch(schema, reads), "snapshot")
    if changes:
        out.changes = writer.write(schema, batch(schema, changes), "changes")
    return out


def values(records: list[Record]) -> list[dict[str, Any] | None]:
    return [None if r.value is None else orjson.loads(r.value) for r in records]


# ------------------------------------------------------------------ Debezium fidelity (broker)

def test_messages_are_debezium_events_with_tombstones_and_key_update_headers(
        kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    c = config(kafka_broker, tmp_path)
    sink = sink_for(c, CUSTOMERS)
    events = [
        event("r", None, customer(1), 10),
        event("c", None, customer(2), 20),
        event("u", customer(2), customer(2, "b@x"), 30),
        event("d", customer(1), None, 40),
        event("d", customer(2, "b@x"), None, 50), event("c", None, customer(7, "b@x"), 50),  # id 2 -> 7
    ]
    sink.commit(0, [staged(sink, CUSTOMERS, events)])
    sink.close()
    got = read_topic(c.bootstrap_servers, f"{c.topic_prefix}.inventory.customers")
    docs = values(got)
    keys = [orjson.loads(r.key)["payload"] for r in got]
    ops = [None if d is None else d["payload"]["op"] for d in docs]
    assert ops == ["r", "c", "u", "d", None, "d", None, "c"]
    assert keys == [{"id": 1}, {"id": 2}, {"id": 2}, {"id": 1}, {"id": 1}, {"id": 2}, {"id": 2}, {"id": 7}]
    first = docs[0]
    assert first is not None and list(first) == ["schema", "payload"]
    assert list(first["payload"]) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us",
                                      "ts_ns"], "Debezium 3.5's Envelope field order"
    assert [f["field"] for f in first["schema"]["fields"]] == list(first["payload"])
    assert first["schema"]["name"] == "test.inventory.customers.Envelope"
    assert orjson.loads(got[0].key)["schema"]["name"] == "test.inventory.customers.Key"
    headers = [r.headers for r in got]
    context = headers[0]  # Debezium 3's context headers, the same on every message of a run
    assert [n for n, _ in context] == [LOGICAL_NAME, TASK_ID, CONNECTOR_NAME, RUN_ID]
    assert dict(context)[LOGICAL_NAME] == b"test" and dict(context)[CONNECTOR_NAME] == b"mysql"
    assert headers[:5] == [context] * 5
    assert headers[5] == headers[6] == (("__debezium.newkey", b'{"id":7}'), *context)
    assert headers[7] == (("__debezium.oldkey", b'{"id":2}'), *context)
    assert len({r.partition for r in got if orjson.loads(r.key)["payload"] == {"id": 2}}) == 1


def test_schemas_disabled_and_no_tombstones(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    c = config(kafka_broker, tmp_path, schemas_enable=False, tombstones_on_delete=False)
    sink = sink_for(c, CUSTOMERS)
    sink.commit(0, [staged(sink, CUSTOMERS, [event("c", None, customer(1), 1),
                                             event("d", customer(1), None, 2)])])
    got = read_topic(c.bootstrap_servers, c.topic(CUSTOMERS.table_id))
    assert [r.key for r in got] == [b'{"id":1}', b'{"id":1}']
    assert [d["op"] for d in values(got) if d is not None] == ["c", "d"] and all(r.value for r in got)
    assert decode_value(got[1].value, CUSTOMERS) is not None


def test_the_sink_encodes_values_as_debezium_does(tmp_path: Any) -> None:
    """BIGINT UNSIGNED as `long` by default (wrapping, like Debezium), FLOAT as its shortest
    decimal, FLOAT(M,D) as the FLOAT64 of the float32 the server stores, zero dates in NOT NULL
    columns as the epoch."""
    schema = mysql_table(TableId("db", "vals"), (
        mysql_column("id", "int", "int(11)", False),
        mysql_column("u", "bigint", "bigint(20) unsigned", True),
        mysql_column("f", "float", "float", True),
        mysql_column("fmd", "float", "float(7,2)", True),
        mysql_column("d0", "date", "date", False),
        mysql_column("dt0", "datetime", "datetime", False),
        mysql_column("ts0", "timestamp", "timestamp", False),
        mysql_column("dn", "date", "date", True),
    ), ("id",))
    image = {"id": 1, "u": Decimal(2**64 - 1), "f": 3.14, "fmd": 2.5, "d0": None, "dt0": None,
             "ts0": None, "dn": None}
    rows = pa.Table.from_pylist([event("c", None, image, 5)], schema=batch(schema, []).schema)
    for mode, u in (("long", -1), ("precise", "AP//////////")):
        c = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", schemas_enable=False,
                            bigint_unsigned_handling_mode=mode, staging_path=str(tmp_path))
        after = orjson.loads(encode_rows(c, schema, rows)["value"][0].as_py())["after"]
        assert after == {"id": 1, "u": u, "f": 3.14, "fmd": 2.5, "d0": 0, "dt0": 0,
                         "ts0": "1970-01-01T00:00:00Z", "dn": None}
    image["fmd"] = 999.99  # FLOAT(7,2): the float32 999.99 is 999.989990234375 (what Debezium writes)
    rows = pa.Table.from_pylist([event("c", None, image, 5)], schema=batch(schema, []).schema)
    assert b'"fmd":999.989990234375,' in encode_rows(c, schema, rows)["value"][0].as_py()
    fields = {f.column: f.schema for f in table_codecs(schema, c.debezium_options())}
    assert fields["f"]["type"] == "float" and fields["fmd"]["type"] == "double"
    assert b'"f":3.14,' in encode_rows(c, schema, rows)["value"][0].as_py()


def test_a_tombstone_decodes_to_no_rows() -> None:
    for tombstone in (None, b"", ""):
        assert decode_value(tombstone) is None
        assert decode_changelog(tombstone) == []
    assert decode_key(b"") is None


def test_float_values_read_back_as_the_same_float32(tmp_path: Any) -> None:
    schema = mysql_table(TableId("db", "f"), (mysql_column("id", "int", "int(11)", False),
                                              mysql_column("f", "float", "float", True)), ("id",))
    for x in (3.14, 0.1, 1e-7, 3.4e38, -2.5, 16777217.0):
        rows = pa.Table.from_pylist([event("c", None, {"id": 1, "f": x}, 5)], schema=batch(schema, []).schema)
        stored = rows["after"][0].as_py()["f"]  # the float32 value
        c = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", schemas_enable=False, staging_path=str(tmp_path))
        text = encode_rows(c, schema, rows)["value"][0].as_py()
        record = decode_value(text, schema)
        assert record is not None and record.after is not None and record.after["f"] == stored
        assert len(repr(orjson.loads(text)["after"]["f"])) <= 13


# ------------------------------------------------------------------ exactly once

def test_replays_and_restarts_deliver_each_change_once(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    s = SINGLE_KEY
    c = config(kafka_broker, tmp_path, partitions=3)
    batches = [[event("r", None, row(s, (k,), c_int=k), 1) for k in range(4)],
               [event("u", row(s, (1,), c_int=1), row(s, (1,), c_int=10), 100), event("c", None, row(s, (5,)), 101)],
               [event("d", row(s, (2,), c_int=2), None, 200), event("u", row(s, (1,), c_int=10), row(s, (1,), c_int=11), 201)]]
    sink = sink_for(c, s)
    for i, events in enumerate(batches):
        sink.commit(i, [staged(sink, s, events)])
    sink.close()
    for i, events in enumerate(batches):  # Spark replays batches a restarted job had committed
        again = sink_for(c, s)
        assert not any(x.snapshot or x.changes for x in again.commit(i, [staged(again, s, events)]))
        again.close()
    got = read_topic(c.bootstrap_servers, c.topic(s.table_id))
    changes = [decode_value(r.value, s) for r in got if r.value is not None]
    seen = Counter((x.op, x.source.pos) for x in changes if x is not None)
    assert seen == Counter((e["op"], e["source"]["pos"]) for b in batches for e in b)
    assert last_committed_batch(c, "job-1", 30) == 2
    assert not list((tmp_path / "staging").rglob("*.arrow")), "staged files are removed once committed"


def test_a_zombie_producer_is_fenced(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    s = SINGLE_KEY
    c = config(kafka_broker, tmp_path)
    old = sink_for(c, s)
    new = sink_for(c, s)  # the restarted job: init_transactions fences the old producer
    with pytest.raises(ProducerFenced, match="another run of the same job"):
        old.commit(0, [staged(old, s, [event("c", None, row(s, (1,)), 1)])])
    assert new.commit(0, [staged(new, s, [event("c", None, row(s, (1,)), 1)])])[0].changes
    assert len(read_topic(c.bootstrap_servers, c.topic(s.table_id))) == 1


def test_two_kafka_sinks_of_one_job_do_not_fence_each_other(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    s = SINGLE_KEY
    first, second = config(kafka_broker, tmp_path / "a"), config(kafka_broker, tmp_path / "b")
    sinks = [sink_for(first, s), sink_for(second, s)]  # a job's `sink:` list, in order
    for i in range(2):
        for sink in sinks:
            assert sink.commit(i, [staged(sink, s, [event("c", None, row(s, (i,)), i + 1)])])[0].changes
    for c in (first, second):
        assert len(read_topic(c.bootstrap_servers, c.topic(s.table_id))) == 2


# ------------------------------------------------------------------ errors

def test_an_unreachable_broker_names_bootstrap_servers(tmp_path: Any) -> None:
    c = KafkaSinkConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", connect_timeout_s=2,
                        staging_path=str(tmp_path), producer={"sasl.username": "u", "sasl.password": "s3cr3t-pw"})
    with pytest.raises(KafkaUnreachable, match="bootstrap_servers") as err:
        KafkaSink(c, "job").open({SINGLE_KEY.table_id: SINGLE_KEY})
    assert "s3cr3t" not in str(err.value) and "s3cr3t" not in repr(c)
    assert isinstance(err.value, SinkError)


def test_a_wrong_producer_setting_is_named_without_its_value(tmp_path: Any) -> None:
    c = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", staging_path=str(tmp_path),
                        producer={"sasl.pasword": "s3cr3t-pw"})
    with pytest.raises(SinkError, match=r"`producer`.*sasl\.pasword") as err:
        KafkaSink(c, "job").open({SINGLE_KEY.table_id: SINGLE_KEY})
    assert "s3cr3t" not in str(err.value)


def test_a_partition_without_a_leader_yet_is_waited_for(kafka_broker: KafkaSandbox) -> None:
    """Right after the sink creates its control topic, the partition may have no leader yet, or
    the client's metadata may not know it yet. A job's first start waits for it, and does not stop
    as if the brokers were unreachable. CI hit this on 2026-11-26, when test_sink_contract's Kafka
    case failed with "Not leader for partition". Here the topic appears a second after the read
    began."""
    topic = f"late{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    later = threading.Timer(1.0, lambda: admin.create_topics([NewTopic(topic, num_partitions=1)]))
    later.start()
    try:
        assert high_watermarks({"bootstrap.servers": kafka_broker.bootstrap_servers}, topic, [0], timeout=20) == {}
    finally:
        later.join()


def test_a_refused_topic_is_named(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    c = config(kafka_broker, tmp_path, replication_factor=3)  # one broker
    with pytest.raises(TopicCreationRefused, match=rf"topic '{c.topic_prefix}\.shop\.items'"):
        KafkaSink(c, "job").open({SINGLE_KEY.table_id: SINGLE_KEY})


def test_a_message_over_the_limit_names_table_key_and_setting(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    s = SINGLE_KEY
    c = config(kafka_broker, tmp_path, producer={"message.max.bytes": "4000"})
    sink = sink_for(c, s)
    with pytest.raises(MessageTooLarge, match=r"shop\.items with key .*\"id\":3.*max\.request\.size"):
        staged(sink, s, [event("c", None, row(s, (3,), c_str="x" * 5000), 1)])


def test_a_message_the_topic_refuses_names_topic_and_setting(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    s = SINGLE_KEY
    c = config(kafka_broker, tmp_path)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic(c.topic(s.table_id), 1, 1, config={"max.message.bytes": "3000"})])[
        c.topic(s.table_id)].result(30)
    sink = sink_for(c, s)
    with pytest.raises(MessageTooLarge, match=r"max\.message\.bytes.*max\.request\.size"):
        sink.commit(0, [staged(sink, s, [event("c", None, row(s, (3,), c_str="x" * 3500), 1)])])
    assert read_topic(c.bootstrap_servers, c.topic(s.table_id)) == []


# ------------------------------------------------------------------ the broker restarts mid-batch

@pytest.fixture
def own_broker() -> Iterator[KafkaSandbox]:
    box = KafkaSandbox(jvm_options=LIGHT_SERVER_JVM_OPTIONS).start()
    try:
        yield box
    finally:
        box.stop()


class KillBroker:
    """Hooks that kill the broker when the sink has produced a batch and not committed it yet;
    ``restart`` starts it again in a thread (so the sink's retries can find it back)."""

    def __init__(self, box: KafkaSandbox, restart: bool) -> None:
        self.box, self.restart = box, restart
        self.thread: threading.Thread | None = None

    def reached(self, point: str) -> None:
        if point == "sink_commit" and self.thread is None:
            self.box.kill()
            self.thread = threading.Thread(target=self.box.start if self.restart else (lambda: None))
            self.thread.start()


def test_broker_lost_mid_commit_fails_clearly_then_the_replay_lands_once(
        own_broker: KafkaSandbox, tmp_path: Any, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    for shown in logging.getLogger(LOGGER_NAME).filters:  # an earlier test's lines were shown already
        if isinstance(shown, Repeats):
            shown.reset()
    s = SINGLE_KEY
    c = config(own_broker, tmp_path, commit_timeout_s=3, commit_retries=1, retry_backoff_s=0.2,
               connect_timeout_s=3)
    sink = sink_for(c, s)
    sink.commit(0, [staged(sink, s, [event("r", None, row(s, (k,)), 1) for k in range(3)])])
    events = [event("u", row(s, (1,)), row(s, (1,), c_int=5), 10), event("d", row(s, (2,)), None, 11)]
    sink.hooks = KillBroker(own_broker, restart=False)
    with pytest.raises(KafkaCommitFailed, match=r"batch 1 .*bootstrap_servers=.*2 attempts.*exactly once"):
        sink.commit(1, [staged(sink, s, events)])
    # librdkafka's reconnect failures: through logging as warnings, each kind once, not raw stderr
    assert "%3|" not in capfd.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]  # those a poll() served
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == LOGGER_NAME)
    shapes = [re.sub(r"\d+", "#", line) for line in lines]
    assert len(shapes) == len(set(shapes)), lines
    own_broker.start()
    again = sink_for(c.model_copy(update={"connect_timeout_s": 30.0}), s)
    assert again.commit(1, [staged(again, s, events)])[0].changes
    again.close()
    got = [decode_value(r.value, s) for r in read_topic(c.bootstrap_servers, c.topic(s.table_id))]
    assert Counter((x.op, x.source.pos) for x in got if x is not None) == Counter(
        {("r", 1): 3, ("u", 10): 1, ("d", 11): 1})


def test_broker_restarted_during_the_retries_commits_once(own_broker: KafkaSandbox, tmp_path: Any) -> None:
    s = SINGLE_KEY
    c = config(own_broker, tmp_path, commit_timeout_s=10, commit_retries=8, retry_backoff_s=0.5,
               connect_timeout_s=10)
    hooks = KillBroker(own_broker, restart=True)
    sink = sink_for(c, s, hooks=hooks)
    events = [event("c", None, row(s, (k,)), 10 + k) for k in range(5)]
    assert sink.commit(0, [staged(sink, s, events)])[0].changes
    assert hooks.thread is not None
    hooks.thread.join(120)
    sink.close()
    got = [decode_value(r.value, s) for r in read_topic(c.bootstrap_servers, c.topic(s.table_id))]
    assert sorted(x.source.pos for x in got if x is not None) == [10, 11, 12, 13, 14]


def test_tombstone_decoding_of_a_whole_topic(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    """Flink-style changelog rows from the topic: tombstones give none."""
    c = config(kafka_broker, tmp_path)
    sink = sink_for(c, CUSTOMERS)
    sink.commit(0, [staged(sink, CUSTOMERS, [event("c", None, customer(1), 1), event("u", customer(1), customer(1, "z"), 2),
                                             event("d", customer(1, "z"), None, 3)])])
    rows = [k.value for r in read_topic(c.bootstrap_servers, c.topic(CUSTOMERS.table_id))
            for k, _ in decode_changelog(r.value, CUSTOMERS)]
    assert rows == ["+I", "-U", "+U", "-D"]


@pytest.mark.parametrize("schemas_enable", [True, False])
def test_encoding_matches_the_debezium_module(tmp_path: Any, schemas_enable: bool) -> None:
    """The staged key and value are exactly what cdc.model.debezium encodes for each change."""
    from cdc.model.debezium.codec import encode_key, record_from_row

    s = SINGLE_KEY
    c = KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", staging_path=str(tmp_path), schemas_enable=schemas_enable)
    rows = batch(s, [event("c", None, row(s, (1,), c_int=3, c_str="é", c_float=3.14, c_date=dt.date(2020, 1, 2),
                                          c_ubig=Decimal(2**64 - 1), c_time=dt.timedelta(hours=-5)), 1),
                     event("d", row(s, (2,), c_dec=Decimal("1.5")), None, 2)])
    got = encode_rows(c, s, rows)
    for i, r in enumerate(rows.to_pylist()):
        record = record_from_row(r, s)
        opts = {"schemas_enabled": schemas_enable, "options": c.debezium_options()}
        assert got["value"][i].as_py() == encode_value(record, s, **opts)
        assert got["key"][i].as_py() == encode_key(record, s, **opts)
        assert record.source.table == "items"  # the schema names the table
    assert got["value"][2].as_py() is None and got.num_rows == 3, "the delete's tombstone"


# ------------------------------------------------------------------ Spark reads the topic back

def _changelog_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow (executor): Kafka rows -> Flink-style changelog rows with FLIP-107 metadata."""
    out: dict[str, list[Any]] = {k: [] for k in ("kind", "db", "tbl", "op_ts", "file", "pos", "id", "email")}
    for b in batches:
        for value in b.column("value").to_pylist():
            record = decode_value(value, CUSTOMERS)
            if record is None:
                continue  # a tombstone: no rows
            for kind, image in decode_changelog(value, CUSTOMERS):
                for k, x in (("kind", kind.value), ("db", record.source.db), ("tbl", record.source.table),
                             ("op_ts", record.source.ts_ms), ("file", record.source.file),
                             ("pos", record.source.pos), ("id", image["id"]), ("email", image["email"])):
                    out[k].append(x)
    yield pa.RecordBatch.from_pydict(out, schema=_CHANGELOG_ARROW)


_CHANGELOG_ARROW = pa.schema([("kind", pa.string()), ("db", pa.string()), ("tbl", pa.string()),
                              ("op_ts", pa.int64()), ("file", pa.string()), ("pos", pa.int64()),
                              ("id", pa.int32()), ("email", pa.string())])


def test_spark_structured_streaming_reads_the_topic_as_a_changelog(
        spark: Any, kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    c = config(kafka_broker, tmp_path, partitions=2)
    sink = sink_for(c, CUSTOMERS)
    sink.commit(0, [staged(sink, CUSTOMERS, [event("r", None, customer(1), 1), event("r", None, customer(2), 1)])])
    sink.commit(1, [staged(sink, CUSTOMERS, [event("u", customer(1), customer(1, "new"), 5),
                                             event("d", customer(2), None, 6),
                                             event("d", customer(1, "new"), None, 7), event("c", None, customer(9, "new"), 7)])])
    sink.close()
    schema = "kind string, db string, tbl string, op_ts long, file string, pos long, id int, email string"
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", c.bootstrap_servers)
              .option("subscribe", c.topic(CUSTOMERS.table_id))
              .option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .load()
              .select("value")
              .mapInArrow(_changelog_batches, schema))
    name = f"changelog_{uuid.uuid4().hex[:8]}"
    query = (stream.writeStream.format("memory").queryName(name).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "spark-checkpoint")).start())
    assert query.awaitTermination(300)
    rows = spark.sql(f"SELECT * FROM {name}").collect()
    by_pos = sorted(((r.pos, r.kind, r.id, r.email) for r in rows), key=lambda x: (x[0], x[2], "-+".index(x[1][0])))
    assert sorted(by_pos) == sorted([(1, "+I", 1, "a@x"), (1, "+I", 2, "a@x"), (5, "-U", 1, "a@x"),
                                     (5, "+U", 1, "new"), (6, "-D", 2, "a@x"), (7, "-D", 1, "new"),
                                     (7, "+I", 9, "new")])
    assert {(r.db, r.tbl) for r in rows} == {("inventory", "customers")}


def test_a_table_that_joins_a_running_job_gets_its_topic(kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    c = config(kafka_broker, tmp_path)
    sink = sink_for(c, SINGLE_KEY)  # opened before the table existed
    assert sink.commit(0, [staged(sink, CUSTOMERS, [event("c", None, customer(1), 1)])])[0].changes
    assert [decode_key(r.key) for r in read_topic(c.bootstrap_servers, c.topic(CUSTOMERS.table_id))] == [{"id": 1}]
