"""What Java clients see of the Kafka sink's messages (the JVM of the Spark session, through py4j).

* The partition of every keyed message equals the Java producer's default choice,
  ``Utils.toPositive(Utils.murmur2(keyBytes)) % partitions`` (kafka-clients on Spark's classpath):
  a Java or Kafka Connect producer of the same keys lands them in the same partitions.
* Spark's Kafka source (the Java consumer, read_committed) reads back exactly the bytes of the
  keys, values (tombstones as null) and headers that the sink encoded, in the same order per
  partition.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from change_batches import batch, event
from test_kafka_sink import CUSTOMERS, config, customer, sink_for, staged

from cdc.app.sandbox.kafka import KafkaSandbox
from cdc.model.debezium.headers import context_headers
from sinks.stream.messages import Message, encode_rows, with_headers

PARTITIONS = 5


def java_partition(spark: Any, key: bytes, partitions: int) -> int:
    utils = spark._jvm.org.apache.kafka.common.utils.Utils
    return int(utils.toPositive(utils.murmur2(bytearray(key)))) % partitions


def test_partitions_and_bytes_match_the_java_client(spark: Any, kafka_broker: KafkaSandbox, tmp_path: Any) -> None:
    c = config(kafka_broker, tmp_path, partitions=PARTITIONS)
    events = [event("r", None, customer(i, f"user{i}@example.com"), 1) for i in range(200)]
    changes = [event("u", customer(3), customer(3, "é@x"), 5), event("d", customer(4), None, 6),
               event("d", customer(7), None, 7), event("c", None, customer(1007), 7)]  # a key update
    sink = sink_for(c, CUSTOMERS)
    sink.commit(0, [staged(sink, CUSTOMERS, events)])
    sink.commit(1, [staged(sink, CUSTOMERS, changes)])
    sink.close()

    expected: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    context = context_headers("test", "mysql", sink.run_id)  # Debezium 3's, on every message
    for rows in (events, changes):
        table = encode_rows(c, CUSTOMERS, batch(CUSTOMERS, rows))
        messages = (Message(k, v, o, p) for k, v, o, p in zip(*(table[n].to_pylist() for n in table.column_names),
                                                                strict=True))
        for m in with_headers(messages, c.schemas_enable):
            assert m.key is not None
            expected[java_partition(spark, m.key, PARTITIONS)].append((m.key, m.value, m.headers + context))
    assert len(expected) == PARTITIONS, "200 keys spread over every partition"
    assert any(h for msgs in expected.values() for _, _, h in msgs), "the key update carries headers"

    read = (spark.read.format("kafka").option("kafka.bootstrap.servers", c.bootstrap_servers)
            .option("subscribe", c.topic(CUSTOMERS.table_id)).option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed").load()
            .orderBy("partition", "offset").collect())
    got: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for r in read:
        headers = tuple((h.key, bytes(h.value)) for h in (r.headers or []))
        got[r.partition].append((bytes(r.key), None if r.value is None else bytes(r.value), headers))
    assert dict(got) == dict(expected)
