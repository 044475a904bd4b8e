"""The sinks a job can write to, by ``sink.type``: one line per sink.

A sink's module is imported only when a job (or a command) asks for it, as the dialects' are
(binlog/registry.py): the driver and every Python process Spark starts import this registry, and
a Delta job need not load a stream store's client library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cdc.model.config import SinkConfig
from cdc.model.errors import ConfigError
from cdc.model.hooks import NO_HOOKS, Hooks

if TYPE_CHECKING:
    from sinks.base import Sink
    from sinks.follow import StreamFollower

# sink.type -> (its config model, its Sink), as "module:attribute"
_SINKS: dict[str, tuple[str, str]] = {
    "delta": ("sinks.delta.config:DeltaSinkConfig", "sinks.delta.sink:DeltaSink"),
    "kafka": ("sinks.kafka.config:KafkaSinkConfig", "sinks.kafka.sink:KafkaSink"),
    "pulsar": ("sinks.pulsar.config:PulsarSinkConfig", "sinks.pulsar.sink:PulsarSink"),
    "pravega": ("sinks.pravega.config:PravegaSinkConfig", "sinks.pravega.sink:PravegaSink"),
}

# sink.type -> the reader that `follow-topic` keeps Delta tables with (stream-store sinks)
_FOLLOWERS: dict[str, str] = {
    "kafka": "sinks.kafka.follow:KafkaFollower",
    "pulsar": "sinks.pulsar.follow:PulsarFollower",
    "pravega": "sinks.pravega.follow:PravegaFollower",
}

SINK_NAMES: tuple[str, ...] = tuple(sorted(_SINKS))
FOLLOWER_NAMES: tuple[str, ...] = tuple(sorted(_FOLLOWERS))


def _load(ref: str) -> Any:
    module, attribute = ref.split(":")
    return getattr(importlib.import_module(module), attribute)


def _entry(name: str) -> tuple[str, str]:
    try:
        return _SINKS[name]
    except KeyError:
        raise ConfigError(f"sink.type {name!r} is not one of {', '.join(SINK_NAMES)}",
                          key="sink.type") from None


def config_class(name: str) -> type[SinkConfig]:
    """The config model of ``sink.type`` ``name``.

    Raises:
        ConfigError: no sink is registered under ``name``.
    """
    loaded: type[SinkConfig] = _load(_entry(name)[0])
    return loaded


def sink_class(name: str) -> type[Sink]:
    """The Sink class of ``sink.type`` ``name`` (imports its module).

    Raises:
        ConfigError: no sink is registered under ``name``.
    """
    loaded: type[Sink] = _load(_entry(name)[1])
    return loaded


def sink_module(name: str) -> str:
    """The module of ``sink.type`` ``name``'s Sink (not imported).

    Raises:
        ConfigError: no sink is registered under ``name``.
    """
    return _entry(name)[1].split(":")[0]


def sink_configs() -> dict[str, type[SinkConfig]]:
    """``sink.type`` -> its config model (for parsing the job file)."""
    return {name: config_class(name) for name in SINK_NAMES}


def follower_class(name: str) -> type[StreamFollower]:
    """The ``follow-topic`` reader of ``sink.type`` ``name`` (a stream-store sink).

    Raises:
        ConfigError: the sink's topics cannot be followed.
    """
    if name not in _FOLLOWERS:
        raise ConfigError(f"follow-topic reads the topics of a {', '.join(FOLLOWER_NAMES)} sink, "
                          f"not of {name!r}", key="sink.type")
    loaded: type[StreamFollower] = _load(_FOLLOWERS[name])
    return loaded


def create_sink(config: SinkConfig, job_id: str, spark: Any | None = None, hooks: Hooks = NO_HOOKS) -> Sink:
    """The sink for a validated ``sink:`` section.

    Raises:
        ConfigError: no sink is registered for its type.
    """
    return sink_class(config.type)(config, job_id, spark, hooks)
