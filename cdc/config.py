"""The job configuration: a YAML file validated into pydantic models (``extra="forbid"``).

Every string may use ``${ENV_VAR}``, expanded before validation. Errors name the YAML path and
what would be accepted, e.g. ``source.chunk_size: must be greater than 0 (got -5)``. Secrets
(``source.password``) come from the environment or ``source.password_file`` and never reach a
log line: they are ``SecretStr`` and print as ``**********``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from cdc.exceptions import ConfigError

log = logging.getLogger(__name__)

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_ID = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")

StartupMode = Literal["initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset", "timestamp"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpecificOffset(_Model):
    """Where ``startup_mode: specific-offset`` starts: a file and position, or a GTID set."""

    file: str | None = None
    pos: int | None = Field(default=None, ge=4)
    gtid: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> SpecificOffset:
        if self.gtid is None and (self.file is None or self.pos is None):
            raise ValueError("give either file and pos, or gtid")
        return self


class MySqlSourceConfig(_Model):
    """``source:`` for MySQL and MariaDB."""

    type: Literal["mysql"] = "mysql"
    hostname: str = "127.0.0.1"
    port: int = Field(default=3306, ge=1, le=65535)
    username: str
    password: SecretStr | None = None
    password_file: Path | None = None
    tables: list[str] = Field(min_length=1)
    server_id: str = "5400-5404"
    startup_mode: StartupMode = "initial"
    startup_offset: SpecificOffset | None = None
    startup_timestamp_ms: int | None = Field(default=None, ge=0)
    chunk_size: int = Field(default=8096, gt=0)
    chunk_key_columns: dict[str, str] = Field(default_factory=dict)
    distribution_factor_lower: float = Field(default=0.05, gt=0)
    distribution_factor_upper: float = Field(default=1000.0, gt=0)
    chunks_per_batch: int | None = Field(default=None, gt=0)
    backfill_skip: bool = False
    connect_timeout_s: float = Field(default=10.0, gt=0)
    name: str = "mysql"

    @field_validator("tables")
    @classmethod
    def _regexes(cls, tables: list[str]) -> list[str]:
        for pattern in tables:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
            if "." not in pattern:
                raise ValueError(f"{pattern!r} must match 'database.table' (e.g. 'shop\\..*')")
        return tables

    @field_validator("server_id")
    @classmethod
    def _server_ids(cls, value: str) -> str:
        server_id_range(value)
        return value

    @field_validator("chunk_key_columns")
    @classmethod
    def _chunk_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for table in value:
            if "." not in table:
                raise ValueError(f"key {table!r} must be 'database.table'")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MySqlSourceConfig:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give password or password_file, not both")
        if self.startup_mode == "specific-offset" and self.startup_offset is None:
            raise ValueError("startup_mode specific-offset needs startup_offset: {file, pos} or {gtid}")
        if self.startup_mode == "timestamp" and self.startup_timestamp_ms is None:
            raise ValueError("startup_mode timestamp needs startup_timestamp_ms")
        if self.distribution_factor_lower > self.distribution_factor_upper:
            raise ValueError("distribution_factor_lower must not exceed distribution_factor_upper")
        return self

    def resolved_password(self) -> str:
        """The password from ``password`` or ``password_file`` (empty when neither is set).

        Raises:
            ConfigError: ``password_file`` cannot be read.
        """
        if self.password is not None:
            return self.password.get_secret_value()
        if self.password_file is not None:
            try:
                return self.password_file.read_text().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(f"source.password_file: cannot read {self.password_file}: {exc.strerror}") from None
        return ""


class DeltaSinkSection(_Model):
    """``sink:`` for Delta: mirror at ``<path>/<db>/<table>``, changelog at ``..._changelog``."""

    type: Literal["delta"] = "delta"
    path: str
    storage_options: dict[str, str] = Field(default_factory=dict)
    engine: Literal["auto", "delta-rs", "delta-spark"] = "auto"


class JobConfig(_Model):
    """The whole job file."""

    source: MySqlSourceConfig
    sink: DeltaSinkSection
    checkpoint: str
    state_dir: str | None = None
    parallelism: int = Field(default=2, gt=0)
    trigger_interval: str = "1s"

    @field_validator("trigger_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        parse_duration_s(value)
        return value


def server_id_range(value: str) -> range:
    """Parse ``"5400"`` or ``"5400-5404"`` (inclusive) into a range of server ids.

    Raises:
        ValueError: not a number or range, or the range is empty or out of 1..2^32-1.
    """
    m = _SERVER_ID.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a server id or a range like '5400-5404'")
    lo = int(m.group(1))
    hi = int(m.group(2) or lo)
    if not 1 <= lo <= hi <= 2**32 - 1:
        raise ValueError(f"{value!r}: ids must satisfy 1 <= first <= last <= 4294967295")
    return range(lo, hi + 1)


def parse_duration_s(value: str) -> float:
    """Parse ``"500ms"``, ``"1s"``, ``"2m"``, ``"1h"`` or a bare number of seconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a duration like '500ms', '1s', '2m' or '1h'")
    scale = {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    return float(m.group(1)) * scale


def expand_env(node: Any, path: str = "") -> Any:
    """Replace ``${VAR}`` in every string of a parsed YAML tree.

    Raises:
        ConfigError: a referenced variable is not set (the error names the key path).
    """
    if isinstance(node, dict):
        return {k: expand_env(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, f"{path}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, str):
        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in os.environ:
                raise ConfigError(f"{path}: environment variable {name} is not set", key=path)
            return os.environ[name]

        return _ENV.sub(sub, node)
    return node


def _shows_input(err: Any, loc: str) -> bool:
    """Echo the offending value, except for secrets and whole sections."""
    if "input" not in err or err["type"] == "missing" or "password" in loc:
        return False
    return not isinstance(err["input"], dict | list)


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the config reference in README.md)"
        elif _shows_input(err, loc):
            msg += f" (got {err['input']!r})"
        lines.append(f"{loc or '<root>'}: {msg}")
    return "; ".join(lines)


def parse_config(raw: dict[str, Any], origin: str = "<config>", *, warn_plain_password: bool = True) -> JobConfig:
    """Validate an already-loaded YAML tree (``${VAR}`` not yet expanded).

    ``warn_plain_password`` is for files a person edits; programs pass secrets as values.

    Raises:
        ConfigError: the message names every invalid key path.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping with source, sink and checkpoint")
    plain_password = isinstance(raw.get("source"), dict) and isinstance(raw["source"].get("password"), str) \
        and not _ENV.search(raw["source"]["password"])
    try:
        config = JobConfig.model_validate(expand_env(raw))
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_format_errors(exc)}") from None
    if plain_password and warn_plain_password:
        log.warning("%s: source.password is written in plain text; use ${ENV_VAR} or "
                    "source.password_file instead", origin)
    return config


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a YAML job file.

    Raises:
        ConfigError: the file is missing, is not YAML, or does not validate.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(raw, str(path))
