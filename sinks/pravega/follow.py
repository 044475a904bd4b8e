"""The Pravega reader of ``python -m cdc follow-topic`` (:class:`sinks.follow.StreamFollower`).

Spark reads the sink's streams with this project's Python data source (:mod:`sinks.pravega.source`:
the driver reads each stream with a reader group copied from the last micro-batch's, stages the
events in the checkpoint folder and names the group and the file in Spark's offset log). The sink
writes all changes of one key to one segment in source order, each exactly once (its transactions
and control records), and a reader reads a segment in order, so a key's changes arrive in order.
"""

from __future__ import annotations

from typing import Any

from sinks.follow import StreamFollower
from sinks.pravega.config import PravegaSinkConfig
from sinks.pravega.source import streams_source


class PravegaFollower(StreamFollower):
    """Follows a ``type: pravega`` sink's streams (driver side)."""

    def stream(self) -> Any:
        """Every followed stream, from its head (the data source registered on the session)."""
        pravega = self.sink
        assert isinstance(pravega, PravegaSinkConfig)
        source = streams_source(pravega, [t.topic for t in self.tables], self.checkpoint, self.max_offsets)
        self.spark.dataSource.register(source)
        return self.spark.readStream.format(source.name()).load()

    def describe(self) -> str:
        pravega = self.sink
        assert isinstance(pravega, PravegaSinkConfig)
        return f"pravega at {pravega.controller_uri} (scope {pravega.scope})"
