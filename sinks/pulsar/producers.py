"""Driver side: the sink's Pulsar client, its deduplicated producers and the control topic.

* :class:`Producers` holds one client and one producer per topic partition, all named
  ``spark-cdc-<job id>`` and exclusive with fencing (a new run's producer fences the old run's, as
  a Kafka transactional id does; a producer of anyone else is refused). Each message carries the
  sequence id the sink gives it, and the broker's deduplication drops a batch whose (first) id is
  not above the one it persisted last for that producer name. ``Producer.last_sequence_id()``
  says what that id is when the producer connects: the sink sends only what lies above it. The
  topics' producers batch with the limits of :mod:`sinks.pulsar.sender` and a publish delay that
  never fires (the sender decides where batches end); the control topic's does not batch.
* :func:`partition_of`: a key's partition, the Java client's ``Murmur3_32Hash`` routing.
* The control topic holds one marker per committed batch, keyed by the job id (compacted:
  :func:`read_markers` reads the newest per job; :mod:`sinks.stream.markers`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import mmh3
import pulsar

from sinks.pulsar.config import PulsarSinkConfig
from sinks.stream.markers import CommitMarker

SEQUENCE_BITS = 32  # a message's sequence id: (batch id << 32) | its index in its partition's batch
GROUP_MESSAGES = 1000  # messages of one Pulsar batch at most (the client's default): part of the protocol
GROUP_BYTES = 128 * 1024  # payload bytes of one Pulsar batch (the client's default): part of the protocol
NEVER_MS = 24 * 3600 * 1000  # the batches' publish delay: the sender's groups end them, never a timer

_COMPRESSION = {"none": pulsar.CompressionType.NONE, "lz4": pulsar.CompressionType.LZ4,
                "zlib": pulsar.CompressionType.ZLib, "zstd": pulsar.CompressionType.ZSTD,
                "snappy": pulsar.CompressionType.SNAPPY}


def client_logger() -> pulsar.ConsoleLogger:
    """The C++ client's own logger, warnings and errors only. A Python logger would be handed every
    line the client writes, debug lines included (the binding filters nothing): two calls into
    Python, with the GIL, per message sent, which halved the sink's throughput."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def new_client(config: PulsarSinkConfig) -> pulsar.Client:
    """A client with the sink's connection, TLS and token settings (driver side)."""
    auth = None
    if config.auth_token is not None:
        auth = pulsar.AuthenticationToken(config.auth_token.get_secret_value())
    return pulsar.Client(
        config.service_url, authentication=auth,
        operation_timeout_seconds=max(1, int(config.operation_timeout_s)),
        connection_timeout_ms=int(config.connect_timeout_s * 1000),
        tls_trust_certs_file_path=config.tls_trust_certs_file_path,
        tls_allow_insecure_connection=config.tls_allow_insecure_connection,
        tls_validate_hostname=config.tls_validate_hostname, logger=client_logger())


def partition_of(key: bytes | None, partitions: int) -> int:
    """The partition of a message: ``Murmur3_32(key) & 0x7fffffff % partitions`` (the Java client's
    ``HashingScheme.Murmur3_32Hash``); a message without a key (a table without a primary key) goes
    to partition 0, so such a table's changes keep one order."""
    if key is None or partitions == 1:
        return 0
    return (mmh3.hash(key, 0, signed=True) & 0x7FFFFFFF) % partitions


def partition_topics(topic: str, partitions: int) -> list[str]:
    """The topics a producer writes: ``<topic>-partition-<i>``, or the topic itself when it is not
    partitioned (``partitions`` 1 for an existing non-partitioned topic is passed as 0)."""
    return [topic] if partitions == 0 else [f"{topic}-partition-{i}" for i in range(partitions)]


@dataclass
class Producers:
    """A client and its producers, one per topic partition (driver side; replaced after a failure).

    Args:
        config: the sink's configuration.
        name: every producer's name (``spark-cdc-<job id>``).
    """

    config: PulsarSinkConfig
    name: str
    client: pulsar.Client = field(init=False)
    producers: dict[str, pulsar.Producer] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.client = new_client(self.config)
        weakref.finalize(self, _close, self.client)  # an abandoned sink's client stops reconnecting

    def get(self, topic: str, batching: bool = True) -> pulsar.Producer:
        """The producer of one topic (partition), created on first use: batching as the sender
        cuts (:mod:`sinks.pulsar.sender`), or not at all (the control topic's).

        Raises:
            pulsar.PulsarException: the broker refused or did not answer.
        """
        producer = self.producers.get(topic)
        if producer is None:
            producer = self.client.create_producer(
                topic, producer_name=self.name, batching_enabled=batching, batching_max_messages=GROUP_MESSAGES,
                batching_max_allowed_size_in_bytes=GROUP_BYTES, batching_max_publish_delay_ms=NEVER_MS,
                block_if_queue_full=True, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                max_pending_messages=self.config.max_pending_messages,
                send_timeout_millis=int(self.config.send_timeout_s * 1000),
                compression_type=_COMPRESSION[self.config.compression])
            self.producers[topic] = producer
        return producer

    def flush(self) -> None:
        for producer in self.producers.values():
            producer.flush()

    def close(self) -> None:
        """Close the client (its producers with it); never raises."""
        _close(self.client)


def _close(client: pulsar.Client) -> None:
    try:
        client.close()
    except Exception:  # a client whose broker is gone may fail to close: it is dropped anyway
        logging.getLogger(__name__).debug("closing the Pulsar client failed", exc_info=True)


def read_markers(client: pulsar.Client, topic: str, job_id: str, timeout_ms: int) -> CommitMarker:
    """The newest marker of ``job_id`` on the control topic (compacted view, then its tail).

    Raises:
        pulsar.PulsarException: the topic could not be read.
    """
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True,
                                  reader_name=f"spark-cdc-control-{job_id}"[:100])
    last = CommitMarker()
    try:
        while reader.has_message_available():
            msg = reader.read_next(timeout_ms)
            last = max(last, CommitMarker.parse(msg.partition_key(), msg.data(), job_id), key=lambda m: m.batch)
    finally:
        reader.close()
    return last


DeliveryCallback = Callable[[pulsar.Result, pulsar.MessageId], None]
