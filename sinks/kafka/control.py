"""Driver side: the sink's Kafka clients, its topics, and the control topic of committed batches.

* :func:`admin_client` / :func:`ensure_topics`: reach the brokers (an error names
  ``bootstrap_servers``) and create missing topics (an error names the topic).
* The control topic (compacted, one partition) holds one marker per committed batch, keyed by
  the job id: ``{"job": ..., "batch": N, "messages": {...}}``. Markers are written inside the
  batch's transaction, so a ``read_committed`` reader sees a marker iff the batch's messages are
  visible. :func:`last_committed_batch` reads it to its end and returns the job's newest batch.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sinks.base import SinkError
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.logs import CLIENT_LOGGING
from sinks.stream.markers import CommitMarker, marker_value


class KafkaUnreachable(SinkError):
    """The brokers at ``bootstrap_servers`` do not answer."""


class TopicCreationRefused(SinkError):
    """The brokers refused to create a topic the sink needs."""


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The :class:`KafkaError` a confluent-kafka exception carries (None for other errors)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def admin_client(config: KafkaSinkConfig) -> AdminClient:
    """An admin client that has reached the brokers.

    Raises:
        KafkaUnreachable: no broker answered within ``connect_timeout_s``.
    """
    try:
        admin = AdminClient({**config.client_settings(), **CLIENT_LOGGING})
    except KafkaException as exc:  # librdkafka names the setting, never its value
        raise SinkError(f"invalid Kafka client settings in the sink's `producer`: {exc}") from None
    try:
        meta = admin.list_topics(timeout=config.connect_timeout_s)
    except KafkaException as exc:
        raise unreachable(config, exc) from None
    if not meta.brokers:
        raise unreachable(config, None)
    return admin


def unreachable(config: KafkaSinkConfig, exc: BaseException | None) -> KafkaUnreachable:
    err = kafka_error(exc) if exc is not None else None
    reason = err.str() if err is not None else "no broker in the metadata"
    return KafkaUnreachable(
        f"cannot reach Kafka at bootstrap_servers={config.bootstrap_servers} within "
        f"{config.connect_timeout_s:g}s ({reason}): check `bootstrap_servers` and the network "
        f"(and the `producer` security settings)", servers=config.bootstrap_servers)


def ensure_topics(admin: AdminClient, config: KafkaSinkConfig, topics: list[str]) -> None:
    """Create the missing ``topics`` (the configured partitions and replication factor) and the
    control topic (compacted, one partition).

    Raises:
        TopicCreationRefused: the brokers refused one (the message names it and says why).
        KafkaUnreachable: the brokers stopped answering.
    """
    try:
        existing = set(admin.list_topics(timeout=config.connect_timeout_s).topics)
    except KafkaException as exc:
        raise unreachable(config, exc) from None
    control, schema_changes = config.commits_topic(), config.schema_changes_topic()
    wanted = [NewTopic(t, num_partitions=1 if t == schema_changes else config.partitions,
                       replication_factor=config.replication_factor)  # schema changes: one order
              for t in topics if t not in existing]
    if control not in existing:
        wanted.append(NewTopic(control, num_partitions=1, replication_factor=config.replication_factor,
                               config={"cleanup.policy": "compact"}))
    if not wanted:
        return
    futures = admin.create_topics(wanted, operation_timeout=config.connect_timeout_s,
                                  request_timeout=config.connect_timeout_s)
    for topic, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # another job created it meanwhile
            reason = err.str() if err is not None else str(exc)
            raise TopicCreationRefused(
                f"Kafka refused to create topic {topic!r}: {reason}: create it yourself, or fix "
                f"the sink's `partitions`/`replication_factor` or the principal's CREATE permission",
                topic=topic) from None


def last_committed_batch(config: KafkaSinkConfig, job_id: str, timeout: float) -> int:
    """The newest batch id the control topic records for ``job_id`` (-1 when none); see
    :func:`last_commit`."""
    return last_commit(config, job_id, timeout).batch


def last_commit(config: KafkaSinkConfig, job_id: str, timeout: float) -> CommitMarker:
    """The control topic's record of ``job_id``'s newest committed batch.

    Reads the topic with ``isolation.level=read_committed`` from its start until every partition
    reaches the end the brokers reported when the read began, open transactions included (see
    :func:`high_watermarks`): a marker committed before the call is seen, including one whose
    transaction the caller's ``init_transactions`` just completed.

    Raises:
        KafkaUnreachable: the brokers did not answer, or the end was not reached in ``timeout``.
    """
    topic = config.commits_topic()
    consumer = Consumer({
        **config.client_settings(), "group.id": f"spark-cdc-control-{uuid.uuid4().hex}",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True, "auto.offset.reset": "earliest", **CLIENT_LOGGING,
        "fetch.wait.max.ms": 50,
    })
    last = CommitMarker()
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
        ends = high_watermarks(config.client_settings(), topic, partitions, timeout)
        if not ends:
            return last
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout
        while ends:
            if time.monotonic() > deadline:
                raise KafkaUnreachable(
                    f"could not read the control topic {topic!r} to its end within {timeout:g}s "
                    f"(another producer's transaction may be open on it): check the brokers at "
                    f"`bootstrap_servers`, then restart the job", topic=topic)
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if (msg.offset() or 0) >= ends.get(msg.partition() or 0, 0):
                        ends.pop(msg.partition() or 0, None)
                    continue
                if err.fatal() or not err.retriable():
                    raise KafkaUnreachable(f"cannot read the control topic {topic!r}: {err.str()}",
                                           topic=topic)
                continue
            last = max(last, CommitMarker.parse(msg.key(), msg.value(), job_id), key=lambda c: c.batch)
            if (msg.offset() or 0) + 1 >= ends.get(msg.partition() or 0, 0):
                ends.pop(msg.partition() or 0, None)
    except KafkaException as exc:
        raise unreachable(config, exc) from None
    finally:
        consumer.close()
    return last


def high_watermarks(settings: dict[str, Any], topic: str, partitions: list[int],
                    timeout: float) -> dict[int, int]:
    """The end offset of each non-empty partition, open transactions included.

    A read_committed client is told the *last stable offset* instead, which stops at the first
    open transaction; a marker committed after another producer's still-open transaction lies
    beyond it, so the read must go on to the true end (the read_committed fetch delivers it once
    that transaction ends).
    """
    probe = Consumer({**settings, "group.id": f"spark-cdc-probe-{uuid.uuid4().hex}",
                      "isolation.level": "read_uncommitted", "enable.auto.commit": False,
                      **CLIENT_LOGGING})
    deadline = time.monotonic() + timeout
    try:
        ends = {}
        for p in partitions:
            while True:
                try:
                    low, high = probe.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=max(0.1, deadline - time.monotonic()))
                    break
                except KafkaException as exc:
                    err = kafka_error(exc)
                    # a topic created a moment ago: its partition has no leader yet, or this
                    # client's metadata does not know it yet (CI saw "Not leader for partition")
                    if err is None or err.code() not in _NOT_READY or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.1)
            if high > low:
                ends[p] = high
        return ends
    finally:
        probe.close()


_NOT_READY = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
              KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}


def marker(job_id: str, batch_id: int, messages: dict[str, int],
           schema_versions: dict[str, int] | None = None) -> tuple[bytes, bytes]:
    """The control record of a batch: key = job id, value = :func:`~sinks.stream.markers.marker_value`."""
    return job_id.encode(), marker_value(job_id, batch_id, messages, schema_versions)
