"""A throwaway Apache Kafka broker for tests and demos: KRaft combined mode from ``jars/kafka``.

Runs on the machine that calls it (the driver or a test process). :class:`KafkaSandbox` formats a
KRaft log directory in a temp folder (``kafka.tools.StorageTool format``), writes
``server.properties`` (one node that is broker and controller, loopback listeners on free ports,
replication factor 1 for the internal topics, transactions enabled) and a log4j2 configuration
that logs to ``kafka.log`` in the same folder, then starts ``kafka.Kafka`` and waits until it
answers a metadata request. :meth:`KafkaSandbox.restart` stops the JVM and starts it again on
the same ports and log directory (the broker-restart fault tests); :meth:`KafkaSandbox.stop`
kills it and removes the folder (:class:`cdc.app.sandbox.jvm.JvmServer`). No Docker, no download:
the jars come from ``make setup``.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from cdc.app.sandbox.jvm import JvmServer, java_binary, started
from cdc.app.sandbox.mysql import SandboxError, free_port
from cdc.spark.jars import kafka_classpath

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaSandbox(JvmServer):
    """One Kafka node (broker + controller) on loopback, in its own temp folder (driver side).

    Args:
        base_dir: where to create the folder (a fresh temp dir by default; removed on stop).
        heap: the JVM's ``-Xmx`` (small: tests share a 2-core machine).
        extra: more ``server.properties`` entries (e.g. ``{"message.max.bytes": "2000"}``).
        jvm_options: more JVM options (:class:`cdc.app.sandbox.jvm.JvmServer`).
    """

    name = "kafka"

    def __init__(self, base_dir: str | None = None, heap: str = "512m",
                 extra: dict[str, str] | None = None, jvm_options: Sequence[str] = ()) -> None:
        super().__init__("kafka-sandbox-", base_dir, jvm_options)
        self.port = free_port()
        self.controller_port = free_port()
        self.heap = heap
        self.extra = dict(extra or {})
        self._formatted = False
        self._admin: AdminClient | None = None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the broker's client listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.dir / "kafka.log"

    def address(self) -> str:
        return self.bootstrap_servers

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "1000",
            **self.extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, main: str, *args: str) -> list[str]:
        return [java_binary(), *self.jvm_options, f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseSerialGC",
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.dir}", "-cp", kafka_classpath(), main, *args]

    def _format(self) -> None:
        (self.dir / "server.properties").write_text(self._properties())
        (self.dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_file))
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: "-..." reads as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                       str(self.dir / "server.properties")),
            capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise SandboxError(f"kafka-storage format failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout)[-2000:]}")
        self._formatted = True

    def prepare(self) -> None:
        """Format the log directory (first start only)."""
        if not self._formatted:
            self._format()

    def command(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.dir / "server.properties"))

    def ready(self) -> bool:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        return bool(self._admin.list_topics(timeout=2).brokers)


def start_kafka_sandbox(**kwargs: object) -> KafkaSandbox:
    """Start a sandbox broker (see :class:`KafkaSandbox`; ``kwargs`` are its arguments)."""
    return started(KafkaSandbox(**kwargs))  # type: ignore[arg-type]


def read_committed(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Any]:
    """Every committed message of ``topic`` as a plain ``read_committed`` consumer sees it
    (confluent-kafka ``Message`` objects, partitions in order, offsets in order); reads until each
    partition reaches the end it had when the call began (the demo's read-back).

    Raises:
        SandboxError: the end was not reached within ``timeout``, or the read failed.
    """
    settings = {"bootstrap.servers": bootstrap, "log_level": 3, "enable.auto.commit": False}
    consumer = Consumer({**settings, "group.id": f"demo-{uuid.uuid4().hex}", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    probe = Consumer({**settings, "group.id": f"probe-{uuid.uuid4().hex}", "isolation.level": "read_uncommitted"})
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
        ends = {p: high for p in partitions
                for low, high in [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)]
                if high > low}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while ends:
            if time.monotonic() > deadline:
                raise SandboxError(f"{topic}: end not reached in {timeout:.0f}s (left: {ends})")
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise SandboxError(f"reading {topic}: {err.str()}")
                if err is None:
                    out.append(msg)
                if (msg.offset() or 0) + (0 if err is not None else 1) >= ends.get(msg.partition() or 0, 0):
                    ends.pop(msg.partition() or 0, None)
        return sorted(out, key=lambda m: (m.partition(), m.offset()))
    finally:
        probe.close()
        consumer.close()
