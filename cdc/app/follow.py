"""``python -m cdc follow-topic``: keep Delta tables up to date from a job's stream-store topics.

Reads the job file for its stream-store sink (Kafka, Pulsar or Pravega: brokers, topic prefix, encodings) and its
source (the tables and their schemas: the source is connected once, for the start-up checks),
then runs the store's :class:`sinks.follow.StreamFollower` until Ctrl-C/SIGTERM, or once
(``--once``). Runs on the driver; a local Spark session unless spark-submit started one.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from cdc.app.runner import JobRunner, stop_on_signals
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from sinks.follow import StreamFollower
from sinks.registry import FOLLOWER_NAMES, follower_class
from sinks.stream.config import StreamSinkConfig

log = logging.getLogger(__name__)


def stream_sink(config: JobConfig, sink_type: str | None = None) -> StreamSinkConfig:
    """The job's stream-store sink section (the first, or the first of ``sink_type``).

    Raises:
        ConfigError: the job has no such sink.
    """
    for sink in config.sink:
        if isinstance(sink, StreamSinkConfig) and sink.type in FOLLOWER_NAMES and sink_type in (None, sink.type):
            return sink
    names = [f"`type: {k}`" for k in ([sink_type] if sink_type else FOLLOWER_NAMES)]
    kinds = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    raise ConfigError(f"sink: the job has no {kinds} sink: follow-topic reads the topics a "
                      f"stream-store sink writes; add one to `sink:`", key="sink")


def follow_session(parallelism: int) -> Any:
    """The active session (spark-submit), else a local one with the project's jars."""
    from pyspark.sql import SparkSession

    from cdc.spark.session import local_session

    return SparkSession.getActiveSession() or local_session("spark-cdc-follow-topic", parallelism)


def follow_topics(config: JobConfig, target: str, checkpoint: str | None = None, once: bool = False,
                  spark: Any | None = None, stop: threading.Event | None = None,
                  max_offsets_per_trigger: int | None = None,
                  sink_type: str | None = None) -> StreamFollower:
    """Run the follower until the topics are read (``once``) or ``stop`` is set / SIGINT/SIGTERM.

    Args:
        config: the job whose topics to follow.
        target: root of the Delta tables (``<target>/<db>/<table>``).
        checkpoint: the query's checkpoint (default ``<target>/_checkpoints/follow-topic``).
        sink_type: which stream-store sink to follow when the job has several (default: the first).

    Raises:
        ConfigError: no stream-store sink, or a table without a primary key.
        CdcError: the source's start-up checks failed (the schemas come from there).
    """
    sink = stream_sink(config, sink_type)
    schemas = JobRunner(config).check()
    checkpoint = checkpoint or str(Path(target) / "_checkpoints" / "follow-topic")
    session = spark if spark is not None else follow_session(config.parallelism)
    follower = follower_class(sink.type)(session, sink, schemas, target, checkpoint, max_offsets_per_trigger)
    query = follower.start(once=once)
    log.info("following %d topic(s) of %s into %s (checkpoint %s)", len(follower.tables),
             follower.describe(), target, checkpoint)
    stop = stop or threading.Event()
    with stop_on_signals(stop):
        while not query.awaitTermination(0.5):
            if stop.is_set():
                query.stop()
                break
    if query.exception() is not None:
        raise query.exception()
    return follower
