"""A Spark streaming source of Pulsar topics (``pyspark.sql.datasource``), for ``follow-topic``.

No Pulsar connector for Spark resolves from Maven Central here, so this is a Python data source
over the native client's ``Reader``: columns ``topic`` (the followed topic, partitioned or not),
``offset`` and ``value`` (binary; an empty payload, a tombstone, is null), as
:class:`sinks.follow.StreamFollower` wants them.

* **Offsets** (JSON in Spark's ``offsets/N``): per topic partition, the position
  ``"<ledger id>:<entry id>:<batch index>"`` of the last message the batch reads (a Pulsar
  ``MessageId``; a partition absent from the offset is read from its first message).
* **latestOffset** (driver, once per micro-batch): each partition's last message id now, from the
  admin API, never behind ``start``; with ``--max-offsets-per-trigger`` the driver reads the ids of
  the next messages to find where the limit ends; with ``availableNow`` never past the ids at the
  run's start.
* **read** (executors, one task per partition with new messages): a Reader from ``start``
  (exclusive) to ``end`` (inclusive), both fixed in the offset log, so a replayed batch reads the
  same messages. ``offset`` is the message's index in its partition's share of the micro-batch:
  it orders one key's messages (all in one partition, in the order the sink wrote them).

The client settings (service URL, token, TLS) travel pickled inside the data source class (never
in the query's options). A message the offsets name that the brokers no longer hold (retention)
fails the batch with :class:`MessagesGone`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pulsar
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from cdc.model.errors import CdcError, Transient
from sinks.base import SinkError
from sinks.pulsar.admin import PulsarAdmin
from sinks.pulsar.config import PulsarSinkConfig
from sinks.pulsar.producers import new_client, partition_topics
from sinks.stream.follow_rows import ROWS_PER_BATCH, SCHEMA, rows_batch

RECEIVER_QUEUE = 5_000  # messages a Reader prefetches

Position = tuple[int, int, int]  # (ledger id, entry id, batch index): one message of a partition


class PulsarReadFailed(CdcError, Transient):
    """A task could not read its partition's messages (the brokers did not answer in time)."""


class MessagesGone(SinkError):
    """Messages a batch's offsets name are no longer on the brokers (the namespace's retention)."""


def position_text(p: Position) -> str:
    return ":".join(str(n) for n in p)


def parse_position(text: str) -> Position:
    ledger, entry, batch = (int(n) for n in text.split(":"))
    return ledger, entry, batch


def message_position(msg: pulsar.Message) -> Position:
    mid = msg.message_id()
    return mid.ledger_id(), mid.entry_id(), mid.batch_index()


def partition_index(partition: str) -> int:
    """``<topic>-partition-<i>`` -> i; a non-partitioned topic -> -1."""
    m = re.search(r"-partition-(\d+)$", partition)
    return int(m.group(1)) if m else -1


@dataclass(frozen=True)
class TopicSlice(InputPartition):
    """One task: the messages of one topic partition after ``start`` up to ``end`` (positions)."""

    topic: str  # the followed topic (the ``topic`` column)
    partition: str  # the partition's own topic name
    start: str  # the last message before the slice; "" from the partition's first message
    end: str


class PulsarTopicsSource(DataSource):
    """``spark.readStream.format("spark-cdc-pulsar")`` of a follower's topics: a subclass per
    follower carries its settings (:func:`topics_source`)."""

    config: ClassVar[PulsarSinkConfig | None] = None
    topics: ClassVar[tuple[str, ...]] = ()
    max_rows: ClassVar[int | None] = None

    @classmethod
    def name(cls) -> str:
        return "spark-cdc-pulsar"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        config = type(self).config
        assert config is not None, "use topics_source() to make a source with its settings"
        return PulsarTopicsReader(config, type(self).topics, type(self).max_rows)


def topics_source(config: PulsarSinkConfig, topics: list[str], max_rows: int | None = None
                  ) -> type[PulsarTopicsSource]:
    """The data source class of ``topics`` (Spark pickles the class, settings included, to the
    Python processes that plan and read the stream)."""
    return type("BoundPulsarTopicsSource", (PulsarTopicsSource,),
                {"config": config, "topics": tuple(topics), "max_rows": max_rows})


class PulsarTopicsReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and plans on the driver; :meth:`read` on executors."""

    def __init__(self, config: PulsarSinkConfig, topics: tuple[str, ...], max_rows: int | None) -> None:
        self.config = config
        self.topics = topics
        self.max_rows = max_rows
        self.target: dict[str, str] | None = None  # availableNow: the last positions at the run's start
        self._client: pulsar.Client | None = None  # the driver's, for reading ahead under a limit

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    # --- driver ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, str]:
        return {}  # every partition from its first message

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        """Each partition's last message now (capped by an availableNow run's target, then by
        ``limit``); a partition never goes behind ``start`` (driver, once per micro-batch)."""
        end = dict(start)
        for partition, last in self._last_positions().items():
            if self.target is not None:
                if partition not in self.target:
                    continue  # appeared after the availableNow run started
                last = min(last, parse_position(self.target[partition]))
            if partition not in start or last > parse_position(start[partition]):
                end[partition] = position_text(last)
        if isinstance(limit, ReadMaxRows):
            end = self._limited(start, end, limit.max_rows)
        return end

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {p: position_text(last) for p, last in self._last_positions().items()}

    def _last_positions(self) -> dict[str, Position]:
        """Every partition of the followed topics that holds a message, and its last one."""
        admin = PulsarAdmin(self.config)
        out: dict[str, Position] = {}
        for topic in self.topics:
            partitions = admin.partitions(topic)
            if partitions is None:
                continue  # not created yet (the job has not written it)
            for partition in partition_topics(topic, partitions):
                last = admin.last_message_id(partition)
                if last is not None:
                    out[partition] = last
        return out

    def _limited(self, start: dict[str, str], end: dict[str, str], max_rows: int) -> dict[str, str]:
        """``end`` cut so that the batch reads about ``max_rows`` messages, shared evenly by the
        partitions with new messages (the driver reads their ids ahead)."""
        moving = sorted(p for p in end if end[p] != start.get(p))
        if not moving:
            return end
        share = max(1, max_rows // len(moving))
        if self._client is None:
            self._client = new_client(self.config)
        out = dict(end)
        for partition in moving:
            ahead = TopicSlice(partition, partition, start.get(partition, ""), end[partition])
            out[partition] = nth_position(self._client, ahead, share, self._timeout_ms())
        return out

    def _timeout_ms(self) -> int:
        return int(self.config.operation_timeout_s * 1000)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        return [TopicSlice(self._topic_of(p), p, start.get(p, ""), e)
                for p, e in sorted(end.items()) if e != start.get(p)]

    def _topic_of(self, partition: str) -> str:
        base = re.sub(r"-partition-\d+$", "", partition)
        return base if base in self.topics else partition

    def commit(self, end: dict[str, str]) -> None:
        """Nothing to release: a Reader keeps no subscription."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- executors ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicSlice)
        client = new_client(self.config)
        try:
            yield from read_slice(client, partition, self._timeout_ms())
        finally:
            client.close()


def _reader(client: pulsar.Client, s: TopicSlice) -> pulsar.Reader:
    if s.start:
        ledger, entry, batch = parse_position(s.start)
        start = pulsar.MessageId(partition_index(s.partition), ledger, entry, batch)
    else:
        start = pulsar.MessageId.earliest
    return client.create_reader(s.partition, start, receiver_queue_size=RECEIVER_QUEUE)


def _messages(client: pulsar.Client, s: TopicSlice, timeout_ms: int) -> Generator[pulsar.Message, None, None]:
    """The slice's messages in order (executors, or the driver reading ahead).

    Raises:
        MessagesGone: the slice's last message is gone (the reader passed it without seeing it).
        PulsarReadFailed: no message came within ``timeout_ms``.
    """
    end = parse_position(s.end)
    reader = _reader(client, s)
    try:
        while True:
            try:
                msg = reader.read_next(timeout_ms)
            except pulsar.Timeout:
                raise PulsarReadFailed(
                    f"no message from {s.partition} in {timeout_ms} ms while reading up to {s.end}: check "
                    f"the brokers at `service_url`; the batch is read again when the query restarts",
                    partition=s.partition, end=s.end) from None
            at = message_position(msg)
            if at > end:
                raise MessagesGone(
                    f"{s.partition}: message {s.end} is gone from the brokers (the reader went from {s.start or 'the start'} "
                    f"to {position_text(at)}): the namespace's retention dropped messages the follower had not "
                    f"read; give it a retention that covers the follower's lag and rebuild the Delta tables "
                    f"(a new --checkpoint and --target)", partition=s.partition, end=s.end)
            yield msg
            if at == end:
                return
    finally:
        reader.close()


def nth_position(client: pulsar.Client, s: TopicSlice, n: int, timeout_ms: int) -> str:
    """The position of the slice's ``n``-th message, or its end when it holds fewer (driver)."""
    at = s.end
    with contextlib.closing(_messages(client, s, timeout_ms)) as messages:
        for i, msg in enumerate(messages, 1):
            at = position_text(message_position(msg))
            if i >= n:
                break
    return at


def read_slice(client: pulsar.Client, s: TopicSlice, timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """The slice as Arrow batches of ``topic``, ``offset``, ``value`` (executors)."""
    values: list[bytes | None] = []
    first = 0
    for msg in _messages(client, s, timeout_ms):
        values.append(msg.data() or None)
        if len(values) == ROWS_PER_BATCH:
            yield rows_batch(s.topic, first, values)
            first += len(values)
            values = []
    if values:
        yield rows_batch(s.topic, first, values)

