"""A real Pulsar broker for the tests (one per session), and a plain reader of its topics.

The broker is a :class:`cdc.app.sandbox.pulsar.PulsarSandbox` (standalone, jars/pulsar) started on
first use and stopped when the session ends. :func:`read_topic` reads a topic the way any
downstream consumer would (the native client's Reader from the earliest message, partition by
partition: :func:`cdc.app.sandbox.pulsar.read_messages`), none of the sink's code.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from session_servers import SessionServer

from cdc.app.sandbox.jvm import LIGHT_SERVER_JVM_OPTIONS
from cdc.app.sandbox.pulsar import PulsarSandbox, read_messages, start_pulsar_sandbox

_BROKER = SessionServer(functools.partial(start_pulsar_sandbox, jvm_options=LIGHT_SERVER_JVM_OPTIONS))
shared_pulsar = _BROKER.get  # the session's broker, started on first use (also outside fixtures: SINK_KINDS)


@pytest.fixture(scope="session")
def pulsar_broker() -> Iterator[PulsarSandbox]:
    """A running standalone Pulsar (broker + bookie, deduplication on) on free loopback ports."""
    yield from _BROKER.serve()


@dataclass(frozen=True)
class Record:
    """One message as a consumer sees it (an empty payload is a tombstone: ``value`` None)."""

    partition: int
    key: bytes | None
    value: bytes | None
    properties: dict[str, str]


def read_topic(service_url: str, topic: str, partitions: int, timeout_ms: int = 30_000) -> list[Record]:
    """Every message of ``topic``: partitions in order, each from its first message to its end
    (``partitions`` 0: a non-partitioned topic), by a plain reader (the sandbox's)."""
    return [Record(*m) for m in read_messages(service_url, topic, partitions, timeout_ms)]
