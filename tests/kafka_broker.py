"""A real Kafka broker for the tests (one per session), and a plain read_committed reader.

The broker is a :class:`cdc.app.sandbox.kafka.KafkaSandbox` (KRaft, jars/kafka) started on first
use and stopped when the session ends. :func:`read_topic` reads a topic the way any downstream
consumer would (confluent-kafka, ``isolation.level=read_committed``), none of the sink's code.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from session_servers import SessionServer

from cdc.app.sandbox.jvm import LIGHT_SERVER_JVM_OPTIONS
from cdc.app.sandbox.kafka import KafkaSandbox, start_kafka_sandbox

_BROKER = SessionServer(functools.partial(start_kafka_sandbox, jvm_options=LIGHT_SERVER_JVM_OPTIONS))
shared_broker = _BROKER.get  # the session's broker, started on first use (also outside fixtures: SINK_KINDS)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaSandbox]:
    """A running single-node Kafka (broker + controller) on a free loopback port."""
    yield from _BROKER.serve()


@dataclass(frozen=True)
class Record:
    """One message as a consumer sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Record]:
    """Every committed message of ``topic`` (read_committed), in offset order per partition and
    partitions in order; polls until each partition reaches its end (bounded by ``timeout``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 50})
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        if topic not in meta.topics or meta.topics[topic].error is not None:
            return []
        partitions = sorted(meta.topics[topic].partitions)
        # The true end (read_uncommitted): a commit's markers reach the partitions after
        # commit_transaction returns; read_committed delivers the records once they do.
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}",
                          "isolation.level": "read_uncommitted"})
        ends = {}
        for p in partitions:
            low, high = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = high
        probe.close()
        out: list[Record] = []
        if not ends:
            return out
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout
        while ends:
            assert time.monotonic() < deadline, f"{topic}: end not reached in {timeout}s ({ends})"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err.str()
                if msg.offset() >= ends.get(msg.partition(), 0):
                    ends.pop(msg.partition(), None)
                continue
            out.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value(),
                              tuple(msg.headers() or ())))
            if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                ends.pop(msg.partition(), None)
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
