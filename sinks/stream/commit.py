"""The commit every stream-store sink runs on the driver (Kafka's, Pulsar's), once per batch.

A batch at or below the newest one the store records (the control topic's marker) is a replay
and writes nothing; the DDLs the batch is the first to carry are published with it, and the
schema versions published so far advance with the batch. An attempt that fails in a way a new
connection may fix (:class:`Retry`, or the store's "unreachable" error) drops the connection and
is tried again after a pause that doubles from ``retry_backoff_s``, ``commit_retries`` times; any
other failure drops the connection (its state is unknown) and propagates. What a store does at
each step is :class:`StreamCommitter`'s abstract methods.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from typing import ClassVar

from cdc.model.history import SchemaChange
from sinks.base import Committed, SinkError, TableBatch
from sinks.stream.batches import new_schema_changes, remove_staged
from sinks.stream.config import StreamSinkConfig

log = logging.getLogger(__name__)


class Retry(Exception):
    """An attempt failed in a way a new attempt (with a new connection) may fix."""


class StreamCommitter(ABC):
    """The retried, replay-aware commit of a stream-store sink (a mixin of its ``Sink``).

    The sink sets ``stream`` (its config), ``staging``, ``last_batch`` (None: unknown until the
    store is asked) and ``schema_versions``.
    """

    store: ClassVar[str] = "stream"  # in log lines
    unreachable: ClassVar[tuple[type[Exception], ...]] = ()  # the store's errors worth a new attempt
    stream: StreamSinkConfig
    staging: str
    last_batch: int | None
    schema_versions: dict[str, int]

    @abstractmethod
    def _connected(self) -> bool:
        """A live connection whose newest committed batch is known."""

    @abstractmethod
    def _recover(self) -> None:
        """A new connection; ``last_batch`` and ``schema_versions`` read from the store."""

    @abstractmethod
    def _ensure_topics_of(self, tables: list[TableBatch], changes: list[SchemaChange]) -> None:
        """Create what the batch writes to and the store lacks (a table added mid-run, the
        schema change topic)."""

    @abstractmethod
    def _publish(self, batch_id: int, tables: list[TableBatch], changes: list[SchemaChange],
                 versions: dict[str, int]) -> dict[str, int]:
        """Write the batch, its schema change events and its marker; the message count per topic."""

    @abstractmethod
    def _drop(self) -> None:
        """Drop the connection (never raises)."""

    @abstractmethod
    def _gave_up(self, batch_id: int, attempts: int, last_error: str) -> SinkError:
        """The error when every attempt failed (names the brokers and that a restart completes it)."""

    def commit_batch(self, batch_id: int, tables: list[TableBatch]) -> list[Committed]:
        """Commit one batch exactly once (driver)."""
        ordered = sorted(tables, key=lambda b: b.schema.table_id)
        delay = self.stream.retry_backoff_s
        last_error = ""
        retryable: tuple[type[Exception], ...] = (Retry, *self.unreachable)
        for attempt in range(self.stream.commit_retries + 1):
            try:
                return self._attempt(batch_id, ordered)
            except retryable as exc:
                last_error = str(exc)
                self._drop()
                if attempt < self.stream.commit_retries:
                    log.warning("%s: batch %d attempt %d failed (%s); retrying in %.1fs", self.store, batch_id,
                                attempt + 1, last_error, delay)
                    time.sleep(delay)
                    delay *= 2
            except BaseException:
                self._drop()  # an unknown state: the next commit starts afresh
                raise
        raise self._gave_up(batch_id, self.stream.commit_retries + 1, last_error)

    def _new_schema_changes(self, tables: list[TableBatch]) -> list[SchemaChange]:
        """The DDLs this batch is the first to publish (none when ``include_schema_changes`` is off)."""
        if not self.stream.include_schema_changes:
            return []
        return new_schema_changes(tables, self.schema_versions)

    def _attempt(self, batch_id: int, ordered: list[TableBatch]) -> list[Committed]:
        if not self._connected():
            self._recover()
        assert self.last_batch is not None
        if batch_id <= self.last_batch or not any(b.snapshot or b.changes for b in ordered):
            remove_staged(self.staging, ordered)
            return [Committed(str(b.schema.table_id), False, False) for b in ordered]
        changes = self._new_schema_changes(ordered)
        self._ensure_topics_of(ordered, changes)
        versions = {**self.schema_versions, **{str(c.schema.table_id): c.version for c in changes}}
        counts = self._publish(batch_id, ordered, changes, versions)
        self.last_batch, self.schema_versions = batch_id, versions
        remove_staged(self.staging, ordered)
        log.info("%s: batch %d committed (%s)", self.store, batch_id, counts)
        return [Committed(str(b.schema.table_id), bool(b.snapshot), bool(b.changes)) for b in ordered]
