"""``python -m cdc follow-topic``: keep Delta tables up to date from a job's Kafka topics.

Reads the job file for its ``type: kafka`` sink (brokers, topic prefix, encodings) and its source
(the tables and their schemas: the source is connected once, for the start-up checks), then runs
:class:`sinks.kafka.follow.TopicFollower` until Ctrl-C/SIGTERM, or once (``--once``). Runs on the
driver; a local Spark session unless spark-submit started one.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from cdc.app.runner import JobRunner, stop_on_signals
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.follow import TopicFollower

log = logging.getLogger(__name__)


def kafka_sink(config: JobConfig) -> KafkaSinkConfig:
    """The job's Kafka sink section.

    Raises:
        ConfigError: the job has no ``type: kafka`` sink.
    """
    for sink in config.sink:
        if isinstance(sink, KafkaSinkConfig):
            return sink
    raise ConfigError("sink: the job has no `type: kafka` sink: follow-topic reads the topics "
                      "a kafka sink writes; add one to `sink:`")


def follow_session(parallelism: int) -> Any:
    """The active session (spark-submit), else a local one with the project's jars."""
    from pyspark.sql import SparkSession

    from cdc.spark.session import local_session

    return SparkSession.getActiveSession() or local_session("spark-cdc-follow-topic", parallelism)


def follow_topics(config: JobConfig, target: str, checkpoint: str | None = None, once: bool = False,
                  spark: Any | None = None, stop: threading.Event | None = None,
                  max_offsets_per_trigger: int | None = None) -> TopicFollower:
    """Run the follower until the topics are read (``once``) or ``stop`` is set / SIGINT/SIGTERM.

    Args:
        config: the job whose Kafka topics to follow.
        target: root of the Delta tables (``<target>/<db>/<table>``).
        checkpoint: the query's checkpoint (default ``<target>/_checkpoints/follow-topic``).

    Raises:
        ConfigError: no Kafka sink, or a table without a primary key.
        CdcError: the source's start-up checks failed (the schemas come from there).
    """
    kafka = kafka_sink(config)
    schemas = JobRunner(config).check()
    checkpoint = checkpoint or str(Path(target) / "_checkpoints" / "follow-topic")
    session = spark if spark is not None else follow_session(config.parallelism)
    follower = TopicFollower(session, kafka, schemas, target, checkpoint, max_offsets_per_trigger)
    query = follower.start(once=once)
    log.info("following %d topic(s) of %s into %s (checkpoint %s)", len(follower.tables),
             kafka.bootstrap_servers, target, checkpoint)
    stop = stop or threading.Event()
    with stop_on_signals(stop):
        while not query.awaitTermination(0.5):
            if stop.is_set():
                query.stop()
                break
    if query.exception() is not None:
        raise query.exception()
    return follower
