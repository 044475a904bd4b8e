"""The source databases a job can capture, by ``source.type``: one line per dialect."""

from __future__ import annotations

from binlog.dialect import Dialect
from binlog.mysql.dialect import MySqlDialect
from binlog.postgres.dialect import PostgresDialect
from cdc.model.config import SourceConfig
from cdc.model.errors import ConfigError

DIALECTS: dict[str, type[Dialect]] = {
    MySqlDialect.name: MySqlDialect,
    PostgresDialect.name: PostgresDialect,
}


def source_configs() -> dict[str, type[SourceConfig]]:
    """``source.type`` -> its config model (for parsing the job file)."""
    return {name: cls.config_class for name, cls in DIALECTS.items()}


def create_dialect(config: SourceConfig) -> Dialect:
    """The dialect for a validated ``source:`` section.

    Raises:
        ConfigError: no dialect is registered for its type.
    """
    try:
        cls = DIALECTS[config.type]
    except KeyError:
        raise ConfigError(f"source.type {config.type!r} is not one of {', '.join(sorted(DIALECTS))}",
                          key="source.type") from None
    return cls(config)
