"""The sinks a job can write to, by ``sink.type``: one line per sink."""

from __future__ import annotations

from typing import Any

from cdc.model.config import SinkConfig
from cdc.model.errors import ConfigError
from cdc.model.hooks import NO_HOOKS, Hooks
from sinks.base import Sink
from sinks.delta.sink import DeltaSink
from sinks.follow import StreamFollower
from sinks.kafka.follow import KafkaFollower
from sinks.kafka.sink import KafkaSink

SINKS: dict[str, type[Sink]] = {
    DeltaSink.name: DeltaSink,
    KafkaSink.name: KafkaSink,
}

FOLLOWERS: dict[str, type[StreamFollower]] = {
    KafkaSink.name: KafkaFollower,
}
"""The stream-store sinks whose topics ``follow-topic`` reads back into Delta, by ``sink.type``."""


def sink_configs() -> dict[str, type[SinkConfig]]:
    """``sink.type`` -> its config model (for parsing the job file)."""
    return {name: cls.config_class for name, cls in SINKS.items()}


def create_sink(config: SinkConfig, job_id: str, spark: Any | None = None, hooks: Hooks = NO_HOOKS) -> Sink:
    """The sink for a validated ``sink:`` section.

    Raises:
        ConfigError: no sink is registered for its type.
    """
    try:
        cls = SINKS[config.type]
    except KeyError:
        raise ConfigError(f"sink.type {config.type!r} is not one of {', '.join(sorted(SINKS))}",
                          key="sink.type") from None
    return cls(config, job_id, spark, hooks)
