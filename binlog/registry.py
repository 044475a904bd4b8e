"""The source databases a job can capture, by ``source.type``: one line per dialect.

A dialect's module is imported only when a job asks for it: every Python process Spark starts
for a job (planners, the stream's runner, executor workers) imports this registry, and a MySQL
job need not pay for psycopg nor a Postgres job for the binlog reader (about 0.15 s and 0.5 s of
CPU per process here).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from cdc.model.errors import ConfigError

if TYPE_CHECKING:
    from binlog.dialect import Dialect
    from cdc.model.config import SourceConfig

# source.type -> (its config model, its dialect), as "module:attribute"
_DIALECTS: dict[str, tuple[str, str]] = {
    "mysql": ("binlog.mysql.config:MySqlSourceConfig", "binlog.mysql.dialect:MySqlDialect"),
    "postgres": ("binlog.postgres.config:PostgresSourceConfig", "binlog.postgres.dialect:PostgresDialect"),
}

DIALECT_NAMES: tuple[str, ...] = tuple(sorted(_DIALECTS))


def _load(ref: str) -> type:
    module, attribute = ref.split(":")
    loaded: type = getattr(importlib.import_module(module), attribute)
    return loaded


def _entry(name: str) -> tuple[str, str]:
    try:
        return _DIALECTS[name]
    except KeyError:
        raise ConfigError(f"source.type {name!r} is not one of {', '.join(DIALECT_NAMES)}",
                          key="source.type") from None


def config_class(name: str) -> type[SourceConfig]:
    """The config model of ``source.type`` ``name``.

    Raises:
        ConfigError: no dialect is registered under ``name``.
    """
    return _load(_entry(name)[0])


def dialect_module(name: str) -> str:
    """The module of ``source.type`` ``name``'s dialect (not imported).

    Raises:
        ConfigError: no dialect is registered under ``name``.
    """
    return _entry(name)[1].split(":")[0]


def dialect_class(name: str) -> type[Dialect]:
    """The dialect class of ``source.type`` ``name`` (imports its module).

    Raises:
        ConfigError: no dialect is registered under ``name``.
    """
    return _load(_entry(name)[1])


def source_configs() -> dict[str, type[SourceConfig]]:
    """``source.type`` -> its config model (for parsing the job file)."""
    return {name: config_class(name) for name in DIALECT_NAMES}


def create_dialect(config: SourceConfig) -> Dialect:
    """The dialect for a validated ``source:`` section.

    Raises:
        ConfigError: no dialect is registered for its type.
    """
    return dialect_class(config.type)(config)
