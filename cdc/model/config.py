"""The job configuration: a YAML file validated once into typed, picklable models.

Each component owns the model of its section (dlt's habit): a dialect its ``source:`` model (a
:class:`SourceConfig`), a sink its ``sink:`` model (a :class:`SinkConfig`). This module holds
the shared parts and the parsing; the application passes the registered models in, so the model
layer names no database and no sink. The parsed :class:`JobConfig` travels to Spark's executors
as these objects (pickled), never as strings to parse again.

Every string may use ``${ENV_VAR}``, expanded before validation. Errors name the YAML path and
what would be accepted, e.g. ``source.chunk_size: must be greater than 0 (got -5)``. Secrets
(``source.password``) come from the environment or ``source.password_file`` and never reach a
log line: they are ``SecretStr`` and print as ``**********``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cdc.model.errors import ConfigError

log = logging.getLogger(__name__)

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")

StartupMode = Literal["initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset", "timestamp"]
SslMode = Literal["disable", "prefer", "require", "verify-ca", "verify-full"]
_VERIFYING: tuple[SslMode, ...] = ("verify-ca", "verify-full")
# Rows per snapshot chunk: 4x Flink CDC's 8096. Each chunk costs a low-watermark query, a SELECT,
# a staged file and its bookkeeping whatever its size, and a micro-batch of 16 x parallelism chunks
# costs a Spark batch. A TPC-DS SF100 snapshot at p=2 took 15.8-16.9 s against 19.4-19.7 s with 8096
# on MariaDB, 20.0-21.8 s against 22.8-25.7 s on PostgreSQL (docs/performance/history.md, "Chunk size").
# A task writes its rows to files every 131,072 rows anyway, so its memory grows by one chunk.
DEFAULT_CHUNK_SIZE = 32768


class ConfigModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


ConfigModelT = TypeVar("ConfigModelT", bound=ConfigModel)


class SourceConfig(ConfigModel):
    """The ``source:`` keys every dialect shares; a dialect's model adds its own."""

    type: str = Field(description="the source database kind; its own keys are listed under its name below")
    hostname: str = Field(default="127.0.0.1", description="host name or IP address of the server")
    port: int = Field(ge=1, le=65535, description="TCP port of the server")
    username: str = Field(description="the CDC user")
    password: SecretStr | None = Field(default=None, description="the password; write `${ENV_VAR}`, never the value")
    password_file: Path | None = Field(default=None, description="a file holding the password (instead of `password`)")
    tables: list[str] = Field(min_length=1, description="regexes on `database.table`, e.g. `shop\\..*`; "
                              "tables matched later join the running job (snapshot, then log; see "
                              "`table_discovery_interval`)")
    table_discovery_interval: str = Field(
        default="30s", description="how often a running job looks for tables that `tables` newly matches "
        "(each joins: snapshotted while the others stream, then streamed) and for captured tables that are "
        "gone (no longer captured; their sink tables stay); `0` or `off`: only at start. `--once` runs "
        "never look; docs/concepts/schema-evolution.md")
    startup_mode: StartupMode = Field(default="initial", description="`initial` (snapshot, then the log), "
                                      "`snapshot` (snapshot only, then stop), `latest-offset` (the log from now), "
                                      "`earliest-offset` (the log from its oldest position), `specific-offset` "
                                      "(the log from `startup_offset`), `timestamp` (the log from the first "
                                      "transaction at or after `startup_timestamp_ms`)")
    startup_timestamp_ms: int | None = Field(default=None, ge=0, description="epoch milliseconds for "
                                             "`timestamp`: the log from the first transaction that committed "
                                             "at or after it (PostgreSQL: the first its slot still holds)")
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, gt=0, description="rows per snapshot chunk")
    chunk_key_columns: dict[str, str] = Field(default_factory=dict, description="`db.table`: column, the chunk "
                                              "key of tables without a primary key")
    distribution_factor_lower: float = Field(default=0.05, gt=0, description="a numeric key is split evenly "
                                             "when `(max - min + 1) / rows` is at least this, else by "
                                             "querying each chunk's end")
    distribution_factor_upper: float = Field(default=1000.0, gt=0, description="... and at most this")
    chunks_per_batch: int | None = Field(default=None, gt=0, description="chunks staged per micro-batch "
                                         "(default 16 x parallelism)")
    backfill_skip: bool = Field(default=False, description="read and emit each chunk in one batch, "
                                "without the watermark merge (Flink CDC's `scan.incremental.snapshot."
                                "backfill.skip`): at-least-once during the snapshot (a change made while a "
                                "chunk is read may reach the changelog twice; the mirror still ends equal); "
                                "not faster here, docs/concepts/snapshot.md")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="seconds to wait for a connection")
    name: str = Field(default="cdc", description="the logical source name (Debezium's `topic.prefix`, "
                      "`source.name` in every change)")
    ssl_mode: SslMode = Field(default="prefer", description="TLS to the server, as libpq names it: `disable`, "
                              "`prefer` (TLS when the server offers it, unverified), `require` (TLS, unverified; "
                              "with `ssl_ca`: as `verify-ca`), `verify-ca` (the server's certificate is signed by "
                              "`ssl_ca`), `verify-full` (... and names `hostname`); docs/operating/security.md")
    ssl_ca: Path | None = Field(default=None, validate_default=True, description="PEM file of the CA that signed "
                                "the server's certificate (required by `verify-ca` and `verify-full`)")
    ssl_cert: Path | None = Field(default=None, description="PEM file of the client certificate, for a user that "
                                  "must present one (MySQL `REQUIRE X509`, PostgreSQL `cert` auth); with `ssl_key`")
    ssl_key: Path | None = Field(default=None, validate_default=True, description="PEM file of the client "
                                 "certificate's private key (unencrypted)")

    @field_validator("ssl_ca")
    @classmethod
    def _ssl_ca(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        mode = info.data.get("ssl_mode")
        if value is None and mode in _VERIFYING:
            raise ValueError(f"required when ssl_mode is {mode!r}: the PEM file of the CA that signed the "
                             "server's certificate (or set ssl_mode: require to encrypt without verifying)")
        return _readable_file(value)

    @field_validator("ssl_cert")
    @classmethod
    def _ssl_cert(cls, value: Path | None) -> Path | None:
        return _readable_file(value)

    @field_validator("ssl_key")
    @classmethod
    def _ssl_key(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if (value is None) != (info.data.get("ssl_cert") is None) and "ssl_cert" in info.data:
            raise ValueError("ssl_cert and ssl_key go together: give both (the client certificate and its key) "
                             "or neither")
        return _readable_file(value)

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

    @field_validator("table_discovery_interval")
    @classmethod
    def _discovery_interval(cls, value: str) -> str:
        if value.strip().lower() != "off":
            parse_duration_s(value)  # names the accepted forms
        return value

    @property
    def discovery_interval_s(self) -> float | None:
        """``table_discovery_interval`` in seconds; None when it is off (``0`` or ``off``)."""
        value = self.table_discovery_interval.strip().lower()
        seconds = 0.0 if value == "off" else parse_duration_s(value)
        return seconds if seconds > 0 else None

    @field_validator("chunk_key_columns")
    @classmethod
    def _chunk_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for table in value:
            if "." not in table:
                raise ValueError(f"key {table!r} must be 'database.table'")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SourceConfig:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give password or password_file, not both")
        if self.startup_mode == "timestamp" and self.startup_timestamp_ms is None:
            raise ValueError("startup_mode timestamp needs startup_timestamp_ms")
        if self.distribution_factor_lower > self.distribution_factor_upper:
            raise ValueError("distribution_factor_lower must not exceed distribution_factor_upper")
        if self.ssl_mode == "disable" and (self.ssl_ca or self.ssl_cert):
            raise ValueError("ssl_mode 'disable' uses no TLS, so ssl_ca/ssl_cert/ssl_key would be ignored: "
                             "remove them or choose another ssl_mode")
        return self

    @property
    def tls(self) -> TlsSettings:
        """The TLS settings as a small picklable value for the drivers (driver or executor)."""
        return TlsSettings(self.ssl_mode, _text(self.ssl_ca), _text(self.ssl_cert), _text(self.ssl_key))

    @property
    def address(self) -> str:
        return f"{self.hostname}:{self.port}"

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


@dataclass(frozen=True)
class TlsSettings:
    """``source.ssl_*`` as the connection code uses them (hashable: a key for cached TLS contexts).

    Attributes:
        mode: the ``ssl_mode``.
        ca: the CA file (absolute path) or None.
        cert: the client certificate file or None.
        key: its private key file or None.
    """

    mode: SslMode = "prefer"
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @property
    def verifies(self) -> bool:
        """True when the server's certificate is checked against ``ca`` (``require`` with a CA too)."""
        return self.mode in _VERIFYING or (self.mode == "require" and self.ca is not None)


def _readable_file(path: Path | None) -> Path | None:
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is not a file (give the path of a PEM file)")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{str(path)!r} is not readable by this user")
    return path.resolve()


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


SchemaChangeBehavior = Literal["evolve", "try_evolve", "lenient", "ignore", "exception"]


class SchemaChangeConfig(ConfigModel):
    """What the job does when a captured table's definition changes (DDL), as Flink CDC 3 names it.

    See docs/concepts/schema-evolution.md.
    """

    behavior: SchemaChangeBehavior = Field(
        default="lenient", description="`lenient` (add column: nullable column added; drop: kept, "
        "null from then on; rename: new column added; widen: widened), `evolve` (each change applied "
        "exactly: added, dropped, renamed with its data, widened; a change the sinks cannot apply, "
        "such as a narrowed type, stops the job), `try_evolve` (as `evolve`, but such a change keeps "
        "the old type, with a warning), `ignore` (the sinks keep the first schema; new columns are "
        "left out), `exception` (stop at the first DDL on a captured table, naming it)")


class SinkConfig(ConfigModel):
    """The ``sink:`` keys every sink shares; a sink's model adds its own."""

    type: str = Field(description="the sink kind; its own keys are listed under its name below")


class JobSettings(ConfigModel):
    """The job file's own keys (everything but ``source`` and ``sink``)."""

    checkpoint: str = Field(description="Spark's checkpoint directory; keep it for the job's lifetime "
                            "(a restart resumes from it)")
    state_dir: str | None = Field(default=None, description="the source's state files "
                                  "(default `<checkpoint>_state`, next to the checkpoint)")
    parallelism: int = Field(default=2, gt=0, description="tasks per micro-batch (and `local[N]` threads "
                             "when not under spark-submit)")
    trigger_interval: str = Field(default="1s", description="how often a running job plans a micro-batch "
                                  "(`500ms`, `1s`, `2m`); `--once` ignores it")

    @field_validator("trigger_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        parse_duration_s(value)
        return value

    def state_path(self) -> str:
        """The state directory: ``state_dir``, or ``<checkpoint>_state`` next to the checkpoint."""
        return self.state_dir or f"{self.checkpoint.rstrip('/')}_state"


class JobConfig(JobSettings):
    """The whole job file."""

    source: SerializeAsAny[SourceConfig] = Field(description="the database to capture")
    sink: tuple[SerializeAsAny[SinkConfig], ...] = Field(
        min_length=1, description="where the changes go: one sink, or a list of sinks (each gets "
        "every change exactly once)")


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
    if "input" not in err or err["type"] == "missing" or "password" in loc or "secret" in loc:
        return False
    return not isinstance(err["input"], dict | list)


def format_errors(exc: ValidationError, prefix: str = "") -> list[str]:
    """One line per error: the YAML key path (after ``prefix``), what is wrong, the value given."""
    lines = []
    for err in exc.errors():
        parts = [str(p) for p in err["loc"] if not str(p).startswith("function-after")]
        loc = prefix + ".".join(parts) if parts else prefix.rstrip(".")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see docs/reference/configuration.md or `python -m cdc config-reference`)"
        elif _shows_input(err, loc):
            msg += f" (got {err['input']!r})"
        lines.append(f"{loc or '<root>'}: {msg}")
    return lines


class _Errors:
    """Collects the errors of every section, so one run of `validate` names them all."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, models: Mapping[str, type[ConfigModelT]], raw: Any, key: str,
                default_type: str | None) -> ConfigModelT | None:
        """Validate one section with the model its ``type`` names."""
        if not isinstance(raw, dict):
            self.lines.append(f"{key}: expected a mapping, got {type(raw).__name__}")
            return None
        kind = raw.get("type", default_type)
        if not isinstance(kind, str) or kind not in models:
            known = ", ".join(sorted(models))
            self.lines.append(f"{key}.type: {kind!r} is not one of {known}" if kind is not None
                              else f"{key}.type: required (one of {known})")
            return None
        try:
            return models[kind].model_validate({**raw, "type": kind})
        except ValidationError as exc:
            self.lines.extend(format_errors(exc, f"{key}."))
            return None


def parse_section(model: type[ConfigModelT], raw: dict[str, Any], key: str) -> ConfigModelT:
    """Validate one section (e.g. Spark reader options turned into a ``source:`` mapping).

    Raises:
        ConfigError: the message names every invalid key as ``<key>.<field>``.
    """
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = format_errors(exc, f"{key}.")
        raise ConfigError(f"{key}: {'; '.join(errors)}", errors=errors) from None


def parse_config(raw: Any, sources: Mapping[str, type[SourceConfig]], sinks: Mapping[str, type[SinkConfig]],
                 origin: str = "<config>", *, warn_plain_password: bool = True,
                 default_types: tuple[str | None, str | None] = (None, None)) -> JobConfig:
    """Validate an already-loaded YAML tree (``${VAR}`` not yet expanded).

    Args:
        raw: the YAML tree.
        sources: ``source.type`` -> its model (the dialect registry's).
        sinks: ``sink.type`` -> its model (the sink registry's).
        origin: the file name, for messages.
        warn_plain_password: warn about a password written in the file (for files a person
            edits; programs pass secrets as values).
        default_types: the ``type`` of a source and of a sink that names none.

    Raises:
        ConfigError: the message names every invalid key path.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping with source, sink and checkpoint")
    plain_password = isinstance(raw.get("source"), dict) and isinstance(raw["source"].get("password"), str) \
        and not _ENV.search(raw["source"]["password"])
    tree = expand_env(raw)
    errors = _Errors()
    source = errors.section(sources, tree["source"], "source", default_types[0]) if "source" in tree else None
    sink_list = tree.get("sink")
    many = isinstance(sink_list, list)
    sink_items = sink_list if many else ([sink_list] if sink_list is not None else [])
    parsed_sinks = [errors.section(sinks, s, f"sink[{i}]" if many else "sink", default_types[1])
                    for i, s in enumerate(sink_items)]
    for key in ("source", "sink"):
        if tree.get(key) is None:
            errors.lines.append(f"{key}: Field required")
    settings = None
    try:
        settings = JobSettings.model_validate({k: v for k, v in tree.items() if k not in ("source", "sink")})
    except ValidationError as exc:
        errors.lines.extend(format_errors(exc))
    if errors.lines or settings is None or source is None or any(s is None for s in parsed_sinks):
        lines = errors.lines or ["invalid configuration"]
        raise ConfigError(f"{origin}: {'; '.join(lines)}", errors=lines)
    config = JobConfig(**dict(settings), source=source, sink=tuple(s for s in parsed_sinks if s is not None))
    if plain_password and warn_plain_password:
        log.warning("%s: source.password is written in plain text; use ${ENV_VAR} or "
                    "source.password_file instead", origin)
    return config


def config_reference(sections: list[tuple[str, type[BaseModel], list[str] | None, str]]) -> str:
    """A configuration reference as a Markdown table, generated from the models' fields.

    Args:
        sections: ``(key prefix, model, the fields to list or None for all, a label that
            starts each meaning, e.g. "(mysql) ")`` in the order to list them.
    """
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    for prefix, model, only, label in sections:
        for name, info in model.model_fields.items():
            if only is not None and name not in only:
                continue
            if info.is_required():
                default = "required"
            elif isinstance(info.get_default(call_default_factory=True), BaseModel):  # a nested section
                default = f"see `{prefix}{name}.*`"
            elif info.default_factory is not None:
                default = f"`{info.default_factory()}`"  # type: ignore[call-arg]
            else:
                default = "none" if info.default is None else f"`{info.default}`"
            lines.append(f"| `{prefix}{name}` | {default} | {label}{info.description or ''} |")
    return "\n".join(lines) + "\n"
