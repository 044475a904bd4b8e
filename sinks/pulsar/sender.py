"""Driver side: a batch's messages sent as Pulsar batches whose boundaries are a function of the
messages alone, each deduplicated by the broker as one unit.

The broker deduplicates by producer name and sequence id, per *entry*: a batch of messages is one
entry, known to the broker by its first message's sequence id (the C++ client carries no highest
sequence id), and a producer that connects learns the first sequence id of the last entry the
broker persisted. So the sink cuts each partition's share of a batch into **groups** exactly as the
client cuts its batches: a group closes after :data:`GROUP_MESSAGES` messages, or when its payload
reaches :data:`GROUP_BYTES`, or before a message whose payload would take it past
:data:`GROUP_BYTES` (``ProducerImpl``'s ``hasEnoughSpace`` and ``isFull``), and the partition's
last group closes with the batch (the final flush). The producers batch with those very limits and
a publish delay that never fires, so each group travels as one entry. The i-th message of a
partition's share carries the sequence id ``(batch id << 32) | i``; a group is on the brokers
when its first id is at or below the producer's last sequence id, and a replay sends only the
groups above it, cut the same way. The callback of each group's last message checks that the
group was one entry (its batch index), so a client that cut elsewhere fails the batch instead of
being trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pulsar

from sinks.base import SinkError
from sinks.pulsar.producers import (
    GROUP_BYTES,
    GROUP_MESSAGES,
    SEQUENCE_BITS,
    Producers,
    partition_of,
    partition_topics,
)
from sinks.stream.messages import Message, MessageTooLarge


class BatchBoundaryMismatch(SinkError):
    """The Pulsar client cut a batch where the sink did not (another client version?)."""


@dataclass
class _Group:
    """The messages of one partition that travel as one entry."""

    first: int  # the index of its first message in the partition's share of the batch
    messages: list[Message] = field(default_factory=list)
    size: int = 0  # payload bytes

    def fits(self, payload: int) -> bool:
        return not self.messages or self.size + payload <= GROUP_BYTES

    def full(self) -> bool:
        return len(self.messages) >= GROUP_MESSAGES or self.size >= GROUP_BYTES

    def next(self) -> _Group:
        return _Group(self.first + len(self.messages))


class BatchSender:
    """Sends a batch's messages in groups with their sequence ids, skipping the groups the
    brokers already hold (driver side; one per commit attempt).

    Args:
        producers: the attempt's client and producers.
        batch_id: the batch (the high half of every sequence id).
        partitions: topic -> its partitions (0: a non-partitioned topic).
    """

    def __init__(self, producers: Producers, batch_id: int, partitions: dict[str, int]) -> None:
        self.producers = producers
        self.base = batch_id << SEQUENCE_BITS
        self.partitions = partitions
        self.failures: list[tuple[pulsar.Result | None, str]] = []

    def send_all(self, topic: str, messages: Iterable[Message]) -> int:
        """Send ``messages`` to ``topic`` (routed by key); returns how many the batch holds. The
        partitions' last groups go out with the producers' flush."""
        targets = partition_topics(topic, self.partitions[topic])
        producers = [self.producers.get(t) for t in targets]
        last = [p.last_sequence_id() for p in producers]
        groups = [_Group(0) for _ in targets]
        n = 0
        for m in messages:
            part = partition_of(m.key, len(targets))
            group = groups[part]
            payload = len(m.value or b"")
            if not group.fits(payload):
                self._send(producers[part], targets[part], group, last[part])
                group = groups[part] = group.next()
            group.messages.append(m)
            group.size += payload
            if group.full():
                self._send(producers[part], targets[part], group, last[part])
                groups[part] = group.next()
            n += 1
        for part, group in enumerate(groups):
            if group.messages:
                self._send(producers[part], targets[part], group, last[part])
        if any(g.first + len(g.messages) > 1 << SEQUENCE_BITS for g in groups):
            raise SinkError(f"a batch sends over 2^32 messages to one partition of {topic}: lower "
                            f"`source.chunks_per_batch` or `source.max_batch_bytes`", topic=topic)
        return n

    def _send(self, producer: pulsar.Producer, topic: str, group: _Group, last: int) -> None:
        first = self.base | group.first
        if first <= last:
            return  # on the brokers: sent by an earlier attempt
        final = len(group.messages) - 1
        for i, m in enumerate(group.messages):
            producer.send_async(
                m.value or b"", self._delivered(topic, final) if i == final else None,
                partition_key=None if m.key is None else m.key.decode("utf-8"),
                properties={k: v.decode("utf-8") for k, v in m.headers} if m.headers else None,
                sequence_id=first + i)

    def _delivered(self, topic: str, final: int) -> Callable[[pulsar.Result, Any], None]:
        def delivered(result: pulsar.Result, msg_id: Any) -> None:
            if result != pulsar.Result.Ok:
                self.failures.append((result, topic))
            elif msg_id.ledger_id() >= 0 and msg_id.batch_index() != final:  # -1: the brokers had it
                self.failures.append((None, topic))
        return delivered

    def check(self) -> None:
        """Raises:
            pulsar.ProducerFenced: another run of the job took the producers.
            BatchBoundaryMismatch: a group did not travel as one entry.
            MessageTooLarge: the brokers refused a batch's size.
            pulsar.PulsarException: another delivery failed (a new attempt sends what is missing).
        """
        if not self.failures:
            return
        result, topic = self.failures[0]
        if result is None:
            raise BatchBoundaryMismatch(
                f"the Pulsar client sent a batch of {topic} cut elsewhere than the sink's groups of "
                f"{GROUP_MESSAGES} messages / {GROUP_BYTES} bytes: this pulsar-client version batches "
                f"differently; use the version in pyproject.toml", topic=topic)
        if result == pulsar.Result.ProducerFenced:
            raise pulsar.ProducerFenced(result)
        if result == pulsar.Result.MessageTooBig:
            raise MessageTooLarge(
                f"a batch of topic {topic!r} is over the brokers' size limit: raise the brokers' "
                f"`maxMessageSize` and the sink's `max_message_size` together", topic=topic)
        raise pulsar.PulsarException(f"{len(self.failures)} batch(es) not delivered to {topic} ({result})")
