"""The Pulsar sink (``type: pulsar``): Debezium JSON change events, each exactly once.

Executor side (:class:`~sinks.stream.messages.StreamStageWriter`, shared with Kafka): change rows
are encoded and staged as files of messages under the job's staging folder; nothing reaches
Pulsar yet.

Driver side (:class:`PulsarSink`), once per batch: every staged message of the batch (per table,
snapshot rows first, then changes in log order) is sent by the job's producer of its topic
partition with a **sequence id derived from the batch id and its index** in that partition's share
of the batch, in Pulsar batches cut as a function of the messages alone
(:mod:`sinks.pulsar.sender`); then a marker ``(job, batch)`` goes to the control topic.
Broker-side deduplication keeps, per producer name and partition, the sequence id of the last
batch it persisted and drops anything at or below it, and a producer learns that id when it
connects: so a batch sent again after any crash (the driver's, or a broker's restart mid-batch)
adds exactly the messages that were missing, in their order. docs/sinks/pulsar.md states the protocol
and each crash point.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, ClassVar

import pulsar

from cdc.model.config import SinkConfig
from cdc.model.debezium.headers import new_run_id
from cdc.model.debezium.schema_change import schema_change_message
from cdc.model.errors import ConfigError
from cdc.model.history import SchemaChange
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from sinks.base import Committed, Sink, SinkError, SinkWriter, TableBatch
from sinks.pulsar.admin import PulsarAdmin, PulsarUnreachable
from sinks.pulsar.config import PulsarSinkConfig
from sinks.pulsar.producers import Producers, partition_topics, read_markers
from sinks.pulsar.sender import BatchSender
from sinks.stream.batches import (
    batch_context,
    batch_messages,
    change_context,
    clear_staging,
)
from sinks.stream.commit import Retry, StreamCommitter
from sinks.stream.markers import CommitMarker, marker_value
from sinks.stream.messages import Message, StreamStageWriter

log = logging.getLogger(__name__)

CONTROL_COMPACTION_BYTES = 1 << 20  # the control topic is compacted past 1 MiB of markers


class ProducerBusy(SinkError):
    """Someone else's producer holds a topic the sink writes (another job with the same prefix?)."""


class ProducerFenced(SinkError):
    """Another run of the same job started producers: this run can no longer write."""


class PulsarCommitFailed(SinkError):
    """A batch could not be committed to Pulsar after the configured retries."""


class PulsarSink(StreamCommitter, Sink):
    """Debezium JSON in ``persistent://<tenant>/<namespace>/<topic_prefix>.<db>.<table>`` topics."""

    name: ClassVar[str] = "pulsar"
    config_class: ClassVar[type[SinkConfig]] = PulsarSinkConfig
    store: ClassVar[str] = "pulsar"
    unreachable: ClassVar[tuple[type[Exception], ...]] = (PulsarUnreachable,)

    def __init__(self, config: SinkConfig, job_id: str, spark: Any | None = None,
                 hooks: Hooks = NO_HOOKS) -> None:
        if not isinstance(config, PulsarSinkConfig):
            raise ConfigError(f"the pulsar sink needs a PulsarSinkConfig, not {type(config).__name__}")
        super().__init__(config, job_id, spark, hooks)
        self.pulsar = self.stream = config
        self.staging = config.staging_root(job_id)
        self.producer_name = f"spark-cdc-{job_id}"
        self.run_id = new_run_id()  # Debezium's runId: one per start of the job
        self.admin = PulsarAdmin(config)
        self.producers: Producers | None = None
        self.last_batch: int | None = None  # None: unknown, ask the brokers first
        self.schema_versions: dict[str, int] = {}  # per table, the newest version published
        self.partitions: dict[str, int] = {}  # topic -> partitions (0: an existing non-partitioned topic)

    def describe(self) -> str:
        return (f"pulsar at {self.pulsar.service_url} (topics persistent://{self.pulsar.tenant}/"
                f"{self.pulsar.namespace}/{self.pulsar.topic_prefix}.<db>.<table>)")

    def writer(self) -> SinkWriter:
        return StreamStageWriter(self.pulsar, self.staging)

    # --- start-up --------------------------------------------------------------------------

    def open(self, schemas: dict[TableId, TableSchema]) -> None:
        self._ensure_topics(self.pulsar.topic(t) for t in schemas)
        clear_staging(self.staging)  # files of a crashed run: their batch will be staged again
        try:
            self._recover()
        except Retry as exc:
            raise PulsarUnreachable(
                f"cannot start the job's producers at service_url={self.pulsar.service_url} ({exc}): "
                f"check `service_url`, the network and the TLS and token settings",
                service_url=self.pulsar.service_url) from None

    def _ensure_topics(self, topics: Iterable[str]) -> None:
        """Create the missing topics (and the control topic), learn their partitions, and check that
        deduplication applies to each (driver; once per topic and run)."""
        control = self.pulsar.commits_topic()
        for topic in sorted({*topics, control} - set(self.partitions)):
            n = self.admin.partitions(topic)
            if n is None:
                n = 1 if topic in (control, self.pulsar.schema_changes_topic()) else self.pulsar.partitions
                self.admin.create_partitioned(topic, n)  # one partition: one order of DDLs and markers
                if topic == control and not self.admin.compact_at(topic, CONTROL_COMPACTION_BYTES):
                    log.warning("pulsar: could not set a compaction threshold on %s; compact it now and "
                                "then (`pulsar-admin topics compact`) so a job's start reads it quickly", topic)
            self.partitions[topic] = n
            self.admin.require_deduplication(topic)

    def _recover(self) -> None:
        """A new client; the job's newest committed batch (its marker, and the marker producer's
        last sequence id, which is that batch's id)."""
        self._drop_producers()
        producers = Producers(self.pulsar, self.producer_name)
        try:
            control = self._control_topic()
            marker_producer = producers.get(control, batching=False)
            marker = read_markers(producers.client, control, self.job_id,
                                  int(self.pulsar.operation_timeout_s * 1000))
        except pulsar.ProducerBusy as exc:
            producers.close()
            raise self._busy(str(exc)) from None
        except pulsar.PulsarException as exc:
            producers.close()
            raise Retry(str(exc)) from None
        known = marker_producer.last_sequence_id()
        if known > marker.batch:  # the marker's content was lost (retention); its batch id was not
            log.warning("pulsar: the control topic lacks job %s's marker of batch %d (the brokers' "
                        "deduplication state has it): the schema change events published so far are "
                        "not known, a DDL may be published again", self.job_id, known)
            marker = CommitMarker(known, marker.schema_versions)
        self.producers = producers
        self.last_batch, self.schema_versions = marker.batch, dict(marker.schema_versions)

    def _control_topic(self) -> str:
        return partition_topics(self.pulsar.commits_topic(), self.partitions[self.pulsar.commits_topic()])[0]

    def _busy(self, detail: str) -> ProducerBusy:
        return ProducerBusy(
            f"another producer writes to a topic of the sink ({detail}): each job needs a `topic_prefix` of "
            f"its own (as Debezium's `topic.prefix`), and nothing else may write to its topics", detail=detail)

    def _fenced(self) -> ProducerFenced:
        return ProducerFenced(
            f"the producers of job {self.job_id} were fenced: another run of the same job (checkpoint) "
            f"started writing; stop one of them")

    def _drop_producers(self) -> None:
        if self.producers is not None:
            self.producers.close()
        self.producers = None
        self.last_batch = None

    # --- commit ----------------------------------------------------------------------------

    def commit(self, batch_id: int, tables: list[TableBatch]) -> list[Committed]:
        return self.commit_batch(batch_id, tables)

    def _connected(self) -> bool:
        return self.producers is not None and self.last_batch is not None

    def _ensure_topics_of(self, tables: list[TableBatch], changes: list[SchemaChange]) -> None:
        self._ensure_topics(self.pulsar.topic(b.schema.table_id) for b in tables)  # a table added mid-run
        if changes:
            self._ensure_topics([self.pulsar.schema_changes_topic()])

    def _drop(self) -> None:
        self._drop_producers()

    def _gave_up(self, batch_id: int, attempts: int, last_error: str) -> SinkError:
        return PulsarCommitFailed(
            f"could not commit batch {batch_id} to Pulsar at service_url={self.pulsar.service_url} in "
            f"{attempts} attempts (last: {last_error}): check the brokers, then restart the job; the "
            f"batch is sent again and each message lands once", batch=batch_id)

    def _publish(self, batch_id: int, tables: list[TableBatch], changes: list[SchemaChange],
                 versions: dict[str, int]) -> dict[str, int]:
        """Send one batch's schema change events and messages, then its marker (each message once:
        what a producer's broker already persisted is skipped)."""
        producers = self.producers
        assert producers is not None
        sender = BatchSender(producers, batch_id, self.partitions)
        try:
            if changes:  # before the rows written under them
                sender.send_all(self.pulsar.schema_changes_topic(), [self._schema_change(c) for c in changes])
            counts: dict[str, int] = {}
            for i, batch in enumerate(tables):
                topic = self.pulsar.topic(batch.schema.table_id)
                context = batch_context(batch, self.run_id) if self.pulsar.extended_headers else ()
                counts[topic] = sender.send_all(topic, batch_messages(self.staging, batch, self.pulsar.schemas_enable,
                                                                      context))
                if i == 0:
                    self.hooks.reached("sink_commit")  # crash tests: a batch partly sent
            producers.flush()
            sender.check()
            self.hooks.reached("sink_commit")  # crash tests: every message sent, the marker not
            self._send_marker(producers, batch_id, counts, versions)
        except pulsar.ProducerBusy as exc:
            raise self._busy(str(exc)) from None
        except pulsar.ProducerFenced:
            raise self._fenced() from None
        except pulsar.PulsarException as exc:
            raise Retry(f"{type(exc).__name__}: {exc}") from None
        return counts

    def _schema_change(self, change: SchemaChange) -> Message:
        key, value = schema_change_message(str(change.source.get("connector", "mysql")), change.schema,
                                           change.ddl, change.source, int(time.time() * 1000),
                                           schemas_enable=self.pulsar.schemas_enable)
        log.info("pulsar: schema change of %s (version %d) to %s: %s", change.schema.table_id,
                 change.version, self.pulsar.schema_changes_topic(), change.ddl.strip())
        return Message(key, value, "", "",
                       change_context(change, self.run_id) if self.pulsar.extended_headers else ())

    def _send_marker(self, producers: Producers, batch_id: int, counts: dict[str, int],
                     schema_versions: dict[str, int]) -> None:
        producer = producers.get(self._control_topic(), batching=False)
        if producer.last_sequence_id() >= batch_id:
            return  # recorded before a crash: deduplication would drop it anyway
        producer.send(marker_value(self.job_id, batch_id, counts, schema_versions),
                      partition_key=self.job_id, sequence_id=batch_id)

    def close(self) -> None:
        if self.producers is not None:
            self.producers.close()
        self.producers = None
