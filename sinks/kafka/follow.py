"""The Kafka reader of ``python -m cdc follow-topic`` (:class:`sinks.follow.StreamFollower`).

Spark Structured Streaming reads the sink's topics with the ``spark-sql-kafka`` source and
``kafka.isolation.level=read_committed``: aborted or open transactions stay invisible. The sink
writes all changes of one key to one partition in source order, so the Kafka offset orders them.
"""

from __future__ import annotations

from typing import Any

from sinks.follow import StreamFollower
from sinks.kafka.config import KafkaSinkConfig


class KafkaFollower(StreamFollower):
    """Follows a ``type: kafka`` sink's topics (driver side); the session needs ``spark-sql-kafka``."""

    def stream(self) -> Any:
        """The Kafka source: every followed topic, from its start, read_committed."""
        kafka = self.sink
        assert isinstance(kafka, KafkaSinkConfig)
        reader = self.spark.readStream.format("kafka")
        for key, value in kafka.client_settings().items():
            if key != "bootstrap.servers":
                reader = reader.option(f"kafka.{key}", value)  # security.protocol, sasl.*
        reader = (reader.option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                  .option("subscribe", ",".join(t.topic for t in self.tables))
                  .option("startingOffsets", "earliest")
                  .option("failOnDataLoss", "true")
                  .option("kafka.isolation.level", "read_committed"))
        if self.max_offsets:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_offsets))
        return reader.load().select("topic", "offset", "value")

    def describe(self) -> str:
        kafka = self.sink
        assert isinstance(kafka, KafkaSinkConfig)
        return f"kafka at {kafka.bootstrap_servers}"
