"""A throwaway Apache Pulsar broker for tests and demos: the standalone broker from ``jars/pulsar``.

Runs on the machine that calls it (the driver or a test process). :class:`PulsarSandbox` writes a
broker configuration (loopback listeners on free ports, one bookie with quorums of 1, broker-side
message deduplication on, which the Pulsar sink needs, unlimited retention) and a log4j2 file that
logs to ``pulsar.log`` in a temp folder, then starts ``org.apache.pulsar.PulsarStandaloneStarter`` (broker,
bookie and a RocksDB metadata store in one JVM; no functions worker, no stream storage) and waits
until the admin API lists the ``public/default`` namespace. :meth:`PulsarSandbox.restart` kills
the JVM and starts it again on the same ports and data (the broker-restart fault tests; the
bookie finds its port again in its cookie); :meth:`PulsarSandbox.stop` kills it and removes the
folder (:class:`cdc.app.sandbox.jvm.JvmServer`). No Docker, no download: the jars come from
``make setup``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from cdc.app.sandbox.jvm import JvmServer, java_binary, started
from cdc.app.sandbox.mysql import free_port
from cdc.spark.jars import pulsar_classpath

_LOG4J2 = """\
Configuration:
  status: warn
  Appenders:
    File:
      name: FILE
      fileName: "{log}"
      PatternLayout:
        Pattern: "%d{{ISO8601}} %-5p [%t] %c{{1}} - %m%n"
  Loggers:
    Root:
      level: info
      AppenderRef:
        - ref: FILE
"""

# What Pulsar's own launch script passes to a JDK 17 (its netty, bookie and metrics code reach into
# these packages).
_ADD_OPENS = ("java.base/java.io", "java.base/java.util.zip", "java.base/sun.net",
              "java.management/sun.management", "jdk.management/com.sun.management.internal",
              "java.base/jdk.internal.platform", "java.base/java.lang", "java.base/java.nio",
              "java.base/jdk.internal.misc", "java.base/sun.nio.ch")


class PulsarSandbox(JvmServer):
    """One standalone Pulsar (broker + bookie) on loopback, in its own temp folder (driver side).

    Args:
        base_dir: where to create the folder (a fresh temp dir by default; removed on stop).
        heap: the JVM's ``-Xmx`` (small: tests share a 2-core machine).
        deduplication: the broker's ``brokerDeduplicationEnabled`` (the sink refuses a broker
            without it; False only to test that refusal).
        extra: more broker settings (e.g. ``{"maxMessageSize": "20000"}``).
        jvm_options: more JVM options (:class:`cdc.app.sandbox.jvm.JvmServer`).
    """

    name = "pulsar"
    start_timeout = 120.0
    poll_s = 0.3

    def __init__(self, base_dir: str | None = None, heap: str = "512m", deduplication: bool = True,
                 extra: dict[str, str] | None = None, jvm_options: Sequence[str] = ()) -> None:
        super().__init__("pulsar-sandbox-", base_dir, jvm_options)
        self.port = free_port()
        self.web_port = free_port()
        self.heap = heap
        self.deduplication = deduplication
        self.extra = dict(extra or {})

    @property
    def service_url(self) -> str:
        """The binary protocol's URL (``pulsar://host:port``), for clients."""
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        """The admin REST API's URL (``http://host:port``)."""
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def log_file(self) -> Path:
        return self.dir / "pulsar.log"

    def address(self) -> str:
        return self.service_url

    def _properties(self) -> str:
        props = {
            "clusterName": "sandbox",
            "advertisedAddress": "127.0.0.1",
            "bindAddress": "127.0.0.1",
            "brokerServicePort": str(self.port),
            "webServicePort": str(self.web_port),
            "brokerDeduplicationEnabled": str(self.deduplication).lower(),
            "systemTopicEnabled": "true",
            "topicLevelPoliciesEnabled": "true",
            "transactionCoordinatorEnabled": "false",
            "managedLedgerDefaultEnsembleSize": "1",
            "managedLedgerDefaultWriteQuorum": "1",
            "managedLedgerDefaultAckQuorum": "1",
            "loadBalancerEnabled": "false",
            "webSocketServiceEnabled": "false",
            "allowAutoTopicCreation": "true",
            # keep every message: readers (follow-topic, the tests' checks) hold no subscription,
            # and without one Pulsar drops a topic's closed ledgers
            "defaultRetentionTimeInMinutes": "-1",
            "defaultRetentionSizeInMB": "-1",
            # the bookie: entries go to its journal (so a killed JVM loses nothing acknowledged:
            # the page cache keeps them), without an fsync per write
            "journalWriteData": "true",
            "journalSyncData": "false",
            **self.extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def command(self) -> list[str]:
        opens = [arg for module in _ADD_OPENS for arg in ("--add-opens", f"{module}=ALL-UNNAMED")]
        return [java_binary(), *self.jvm_options, f"-Xmx{self.heap}", "-Xms128m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC",
                *opens, f"-Dlog4j2.configurationFile={self.dir / 'log4j2.yaml'}",
                "-cp", pulsar_classpath(), "org.apache.pulsar.PulsarStandaloneStarter",
                "--config", str(self.dir / "standalone.conf"), "-nfw", "-nss",
                "--metadata-dir", str(self.dir / "metadata"), "--bookkeeper-dir", str(self.dir / "bookie"),
                "--zookeeper-dir", str(self.dir / "no-zookeeper")]  # absent: RocksDB metadata

    def prepare(self) -> None:
        """Write the configuration and the log4j2 file (first start only)."""
        conf = self.dir / "standalone.conf"
        if not conf.exists():
            conf.write_text(self._properties())
            (self.dir / "log4j2.yaml").write_text(_LOG4J2.format(log=self.log_file))

    def ready(self) -> bool:
        """The admin API lists the ``public/default`` namespace."""
        with urllib.request.urlopen(f"{self.admin_url}/admin/v2/namespaces/public", timeout=2) as r:
            return "public/default" in json.loads(r.read())


def start_pulsar_sandbox(**kwargs: object) -> PulsarSandbox:
    """Start a sandbox broker (see :class:`PulsarSandbox`; ``kwargs`` go to its constructor)."""
    return started(PulsarSandbox(**kwargs))  # type: ignore[arg-type]


def read_messages(service_url: str, topic: str, partitions: int, timeout_ms: int = 30_000
                  ) -> list[tuple[int, bytes | None, bytes | None, dict[str, str]]]:
    """Every message of ``topic`` as ``(partition, key, value, properties)`` (an empty payload, a
    tombstone, as None), read by a plain reader of each partition from its first message to its
    end (the demo's and the tests' read-back; ``partitions`` 0: a non-partitioned topic)."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    out: list[tuple[int, bytes | None, bytes | None, dict[str, str]]] = []
    try:
        names = [topic] if partitions == 0 else [f"{topic}-partition-{i}" for i in range(partitions)]
        for i, name in enumerate(names):
            reader = client.create_reader(name, pulsar.MessageId.earliest)
            while reader.has_message_available():
                msg = reader.read_next(timeout_ms)
                key = msg.partition_key()
                out.append((i, key.encode() if key else None, msg.data() or None, dict(msg.properties())))
            reader.close()
    finally:
        client.close()
    return out
