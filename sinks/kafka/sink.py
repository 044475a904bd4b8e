"""The Kafka sink (``type: kafka``): Debezium JSON change events, exactly once per batch.

Executor side (:class:`~sinks.stream.messages.StreamStageWriter`): change rows are encoded and
staged as files of messages under the job's staging folder; nothing reaches Kafka yet.

Driver side (:class:`KafkaSink`), once per batch: every staged message of the batch (per table,
snapshot rows first, then changes in log order) is produced inside ONE Kafka transaction, whose
``transactional.id`` is derived from the job id, together with a marker ``(job, batch)`` in the
compacted control topic. A ``read_committed`` consumer sees all of a batch or none of it.

* :meth:`KafkaSink.open` creates missing topics, starts the transactional producer
  (``init_transactions`` fences any older producer of the job and aborts its open transaction, or
  completes one it had asked to commit), then reads the control topic to learn the newest batch
  the job committed.
* :meth:`KafkaSink.commit` skips a batch at or below that one (Spark replays a batch whose
  ``commits/N`` it never wrote), else produces it. Only this producer can commit for the job
  (fencing), so the number read at open stays true while the producer lives; after any failed
  attempt the producer is replaced and the control topic read again, because a commit that timed
  out may still have committed. Brokers lost mid-commit: retried with doubling backoff, then a
  clear error; the replay after a restart writes the batch exactly once.

docs/sinks/kafka.md states the protocol and how it holds at each crash point.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from confluent_kafka import KafkaError, KafkaException, Producer

from cdc.model.config import SinkConfig
from cdc.model.debezium.headers import new_run_id
from cdc.model.debezium.schema_change import schema_change_message
from cdc.model.errors import ConfigError
from cdc.model.history import SchemaChange
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from sinks.base import Committed, Sink, SinkError, SinkWriter, TableBatch
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.control import (
    KafkaUnreachable,
    admin_client,
    ensure_topics,
    kafka_error,
    last_commit,
    marker,
)
from sinks.kafka.logs import CLIENT_LOGGING
from sinks.stream.batches import (
    batch_context,
    batch_messages,
    change_context,
    clear_staging,
)
from sinks.stream.commit import Retry, StreamCommitter
from sinks.stream.messages import Message, MessageTooLarge, StreamStageWriter

log = logging.getLogger(__name__)


class ProducerFenced(SinkError):
    """Another run of the same job started a producer with this job's transactional id."""


class KafkaCommitFailed(SinkError):
    """A batch could not be committed to Kafka after the configured retries."""


class KafkaSink(StreamCommitter, Sink):
    """Debezium JSON in ``<topic_prefix>.<db>.<table>`` topics, one transaction per batch."""

    name: ClassVar[str] = "kafka"
    config_class: ClassVar[type[SinkConfig]] = KafkaSinkConfig
    store: ClassVar[str] = "kafka"
    unreachable: ClassVar[tuple[type[Exception], ...]] = (KafkaUnreachable,)

    def __init__(self, config: SinkConfig, job_id: str, spark: Any | None = None,
                 hooks: Hooks = NO_HOOKS) -> None:
        if not isinstance(config, KafkaSinkConfig):
            raise ConfigError(f"the kafka sink needs a KafkaSinkConfig, not {type(config).__name__}")
        super().__init__(config, job_id, spark, hooks)
        self.kafka = self.stream = config
        self.staging = config.staging_root(job_id)
        # one per job and topic prefix: two Kafka sinks of one job (a fan-out to two prefixes or
        # clusters) must not fence each other; a restart of the job fences its old producer
        self.transactional_id = f"spark-cdc-{job_id}-{config.topic_prefix}"
        self.producer: Producer | None = None
        self.last_batch: int | None = None  # None: unknown, read the control topic first
        self.schema_versions: dict[str, int] = {}  # per table, the newest version published
        self.topics: set[str] = set()  # topics known to exist
        self.run_id = new_run_id()  # Debezium's runId: one per start of the job

    def describe(self) -> str:
        return f"kafka at {self.kafka.bootstrap_servers} (topics {self.kafka.topic_prefix}.<db>.<table>)"

    def writer(self) -> SinkWriter:
        return StreamStageWriter(self.kafka, self.staging)

    # --- start-up --------------------------------------------------------------------------

    def open(self, schemas: dict[TableId, TableSchema]) -> None:
        self._ensure_topics(schemas)
        clear_staging(self.staging)  # files of a crashed run: their batch will be staged again
        try:
            self._recover()
        except Retry as exc:
            raise KafkaUnreachable(
                f"cannot start the transactional producer at bootstrap_servers="
                f"{self.kafka.bootstrap_servers} ({exc}): check `bootstrap_servers` and that the "
                f"brokers allow transactions", servers=self.kafka.bootstrap_servers) from None

    def _ensure_topics(self, schemas: Iterable[TableId]) -> None:
        """Create the topics of ``schemas`` (and the control topic) that this sink has not seen."""
        wanted = {self.kafka.topic(t) for t in schemas} - self.topics
        if wanted or not self.topics:
            ensure_topics(admin_client(self.kafka), self.kafka, sorted(wanted))
            self.topics |= wanted | {self.kafka.commits_topic()}

    def _recover(self) -> None:
        """Start a producer (fencing older ones) and read the newest committed batch."""
        self._drop_producer()
        try:
            producer = Producer(self._producer_settings())
        except KafkaException as exc:  # librdkafka names the setting, never its value
            raise SinkError(f"invalid Kafka client settings in the sink's `producer`: {exc}") from None
        try:
            producer.init_transactions(self.kafka.connect_timeout_s)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.fatal():
                raise ProducerFenced(f"cannot start the transactional producer: {err.str()}") from None
            raise Retry(err.str() if err is not None else str(exc)) from None
        self.producer = producer
        last = last_commit(self.kafka, self.job_id,
                           self.kafka.connect_timeout_s + self.kafka.transaction_timeout_ms / 1000)
        self.last_batch, self.schema_versions = last.batch, dict(last.schema_versions)

    def _producer_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"partitioner": "murmur2_random", "linger.ms": 20,
                                    **CLIENT_LOGGING, **self.kafka.client_settings()}
        settings.update({"transactional.id": self.transactional_id, "enable.idempotence": True,
                         "transaction.timeout.ms": self.kafka.transaction_timeout_ms})
        return settings

    def _drop_producer(self) -> None:
        if self.producer is not None:
            # discard what it still holds: a new producer replaces the whole transaction
            with contextlib.suppress(KafkaException):
                self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.producer = None
        self.last_batch = None

    # --- commit ----------------------------------------------------------------------------

    def commit(self, batch_id: int, tables: list[TableBatch]) -> list[Committed]:
        return self.commit_batch(batch_id, tables)

    def _connected(self) -> bool:
        return self.producer is not None and self.last_batch is not None

    def _ensure_topics_of(self, tables: list[TableBatch], changes: list[SchemaChange]) -> None:
        self._ensure_topics(b.schema.table_id for b in tables)  # a table added mid-run
        topic = self.kafka.schema_changes_topic()
        if changes and topic not in self.topics:
            ensure_topics(admin_client(self.kafka), self.kafka, [topic])
            self.topics.add(topic)

    def _publish(self, batch_id: int, tables: list[TableBatch], changes: list[SchemaChange],
                 versions: dict[str, int]) -> dict[str, int]:
        return self._transaction(batch_id, tables, changes, versions)

    def _drop(self) -> None:
        self._drop_producer()

    def _gave_up(self, batch_id: int, attempts: int, last_error: str) -> SinkError:
        return KafkaCommitFailed(
            f"could not commit batch {batch_id} to Kafka at bootstrap_servers="
            f"{self.kafka.bootstrap_servers} in {attempts} attempts (last: {last_error}): check the "
            f"brokers, then restart the job; the batch is replayed and lands exactly once", batch=batch_id)

    def _transaction(self, batch_id: int, tables: list[TableBatch], schema_changes: list[SchemaChange],
                     schema_versions: dict[str, int]) -> dict[str, int]:
        """Produce one batch, its schema change events and its marker in one transaction; commit it."""
        producer = self.producer
        assert producer is not None
        failures: list[tuple[KafkaError, str, bytes | None]] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append((err, msg.topic(), msg.key()))

        counts: dict[str, int] = {}
        try:
            producer.begin_transaction()
            for change in schema_changes:  # before the rows written under it, as Debezium orders them
                connector = str(change.source.get("connector", "mysql"))
                key, value = schema_change_message(connector, change.schema, change.ddl, change.source,
                                                   int(time.time() * 1000),
                                                   schemas_enable=self.kafka.schemas_enable)
                headers = change_context(change, self.run_id) if self.kafka.extended_headers else ()
                self._produce(producer, self.kafka.schema_changes_topic(), Message(key, value, "", "", headers),
                              delivered)
                log.info("kafka: schema change of %s (version %d) to %s: %s", change.schema.table_id,
                         change.version, self.kafka.schema_changes_topic(), change.ddl.strip())
            for batch in tables:
                topic = self.kafka.topic(batch.schema.table_id)
                n = 0
                for m in self._messages(batch):
                    self._produce(producer, topic, m, delivered)
                    n += 1
                counts[topic] = n
            key, value = marker(self.job_id, batch_id, counts, schema_versions)
            self._produce(producer, self.kafka.commits_topic(), Message(key, value, "", ""), delivered)
            left = _serve(producer.flush, self.kafka.commit_timeout_s)
            self._check(failures, batch_id)
            if left:
                raise Retry(f"{left} messages not acknowledged within {self.kafka.commit_timeout_s:g}s")
            self.hooks.reached("sink_commit")  # crash tests: produced, not committed
            producer.commit_transaction(self.kafka.commit_timeout_s)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.fatal():
                raise ProducerFenced(
                    f"the producer of job {self.job_id} was fenced ({err.str()}): another run of the "
                    f"same job (checkpoint) is writing; stop one of them") from None
            raise Retry(err.str() if err is not None else str(exc)) from None
        return counts

    def _messages(self, batch: TableBatch) -> Iterator[Message]:
        context = batch_context(batch, self.run_id) if self.kafka.extended_headers else ()
        return batch_messages(self.staging, batch, self.kafka.schemas_enable, context)

    @staticmethod
    def _produce(producer: Producer, topic: str, m: Message, delivered: Any) -> None:
        while True:
            try:
                producer.produce(topic, value=m.value, key=m.key, headers=list(m.headers) or None,
                                 on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                _serve(producer.poll, 0.05)

    def _check(self, failures: list[tuple[KafkaError, str, bytes | None]], batch_id: int) -> None:
        if not failures:
            return
        err, topic, key = failures[0]
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            raise MessageTooLarge(
                f"a message of topic {topic!r} with key {(key or b'').decode('utf-8', 'replace')[:200]} "
                f"is over the size limit ({err.str()}): raise the topic's `max.message.bytes` (broker "
                f"`message.max.bytes`) and the sink's producer `message.max.bytes` (Java: "
                f"`max.request.size`)", topic=topic)
        if err.fatal():
            raise ProducerFenced(f"the producer of job {self.job_id} failed for good: {err.str()}")
        raise Retry(f"batch {batch_id}: delivery to {topic!r} failed: {err.str()}")

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(self.kafka.commit_timeout_s)
        self.producer = None



def _serve(call: Any, timeout: float) -> int:
    """``producer.flush`` or ``producer.poll``, which run the delivery callbacks: a fatal error
    (a fenced producer) that confluent-kafka 2.16 raises while a callback runs surfaces as a
    SystemError whose cause is the KafkaException; that KafkaException is raised instead.
    """
    try:
        served: int = call(timeout)
    except SystemError as exc:
        if isinstance(exc.__cause__, KafkaException):
            raise exc.__cause__ from None
        raise
    return served
