"""The Pulsar reader of ``python -m cdc follow-topic`` (:class:`sinks.follow.StreamFollower`).

Spark reads the sink's topics with this project's Python data source
(:mod:`sinks.pulsar.source`: a Reader per topic partition, offsets fixed per micro-batch). The
sink writes all changes of one key to one partition in source order, and each exactly once, so
the partition's order is the key's.
"""

from __future__ import annotations

from typing import Any

from sinks.follow import StreamFollower
from sinks.pulsar.config import PulsarSinkConfig
from sinks.pulsar.source import topics_source


class PulsarFollower(StreamFollower):
    """Follows a ``type: pulsar`` sink's topics (driver side)."""

    def stream(self) -> Any:
        """Every followed topic, from its first message (the data source registered on the session)."""
        pulsar = self.sink
        assert isinstance(pulsar, PulsarSinkConfig)
        source = topics_source(pulsar, [t.topic for t in self.tables], self.max_offsets)
        self.spark.dataSource.register(source)
        return self.spark.readStream.format(source.name()).load()

    def describe(self) -> str:
        pulsar = self.sink
        assert isinstance(pulsar, PulsarSinkConfig)
        return f"pulsar at {pulsar.service_url}"
