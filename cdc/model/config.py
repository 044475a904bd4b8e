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

from cdc.model.errors import ConfigError

log = logging.getLogger(__name__)

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_ID = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")

StartupMode = Literal["initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset", "timestamp"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpecificOffset(_Model):
    """Where ``startup_mode: specific-offset`` starts: a file and position, or a GTID set."""

    file: str | None = Field(default=None, description="binlog file name, e.g. `mysql-bin.000003`")
    pos: int | None = Field(default=None, ge=4, description="position in that file (4 = its start)")
    gtid: str | None = Field(default=None, description="a GTID set (not supported yet)")

    @model_validator(mode="after")
    def _one_form(self) -> SpecificOffset:
        if self.gtid is None and (self.file is None or self.pos is None):
            raise ValueError("give either file and pos, or gtid")
        return self


class MySqlSourceConfig(_Model):
    """``source:`` for MySQL and MariaDB."""

    type: Literal["mysql"] = Field(default="mysql", description="the source database kind (MySQL 5.7/8.x, MariaDB 10.5+)")
    hostname: str = Field(default="127.0.0.1", description="host name or IP address of the server")
    port: int = Field(default=3306, ge=1, le=65535, description="TCP port of the server")
    username: str = Field(description="the CDC user (needs SELECT, REPLICATION SLAVE, REPLICATION CLIENT)")
    password: SecretStr | None = Field(default=None, description="the password; write `${ENV_VAR}`, never the value")
    password_file: Path | None = Field(default=None, description="a file holding the password (instead of `password`)")
    tables: list[str] = Field(min_length=1, description="regexes on `database.table`, e.g. `shop\\..*`; "
                              "tables matched later join the running job (snapshot, then binlog)")
    server_id: str = Field(default="5400-5404", description="binlog reader ids, one per concurrent reader "
                           "(`5400` or a range `5400-5404`); unique among the server's replicas")
    startup_mode: StartupMode = Field(default="initial", description="`initial` (snapshot, then binlog), "
                                      "`snapshot` (snapshot only, then stop), `latest-offset` (binlog from now), "
                                      "`earliest-offset` (binlog from the oldest file), `specific-offset` "
                                      "(binlog from `startup_offset`), `timestamp` (binlog from the first transaction at or after `startup_timestamp_ms`)")
    startup_offset: SpecificOffset | None = Field(default=None, description="`{file, pos}` for `specific-offset` "
                                                  "(a `gtid` start is not supported yet)")
    startup_timestamp_ms: int | None = Field(default=None, ge=0, description="epoch milliseconds for `timestamp`")
    chunk_size: int = Field(default=8096, gt=0, description="rows per snapshot chunk")
    chunk_key_columns: dict[str, str] = Field(default_factory=dict, description="`db.table`: column, the chunk "
                                              "key of tables without a primary key")
    distribution_factor_lower: float = Field(default=0.05, gt=0, description="a numeric key is split evenly "
                                             "when `(max - min + 1) / rows` is at least this, else by "
                                             "querying each chunk's end")
    distribution_factor_upper: float = Field(default=1000.0, gt=0, description="... and at most this")
    chunks_per_batch: int | None = Field(default=None, gt=0, description="chunks staged per micro-batch "
                                         "(default 16 x parallelism)")
    stream_split_bytes: int = Field(default=16 * 1024 * 1024, gt=0, description="a catch-up batch's binlog "
                                    "slice is read by several tasks (up to `parallelism`, one server id each) "
                                    "when it holds at least twice this many bytes; each decodes its own piece")
    backfill_skip: bool = Field(default=False, description="skip the exactly-once backfill "
                                "(at-least-once); not implemented yet: `true` is refused")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="seconds to wait for a connection")
    name: str = Field(default="mysql", description="the logical source name (Debezium's `source.name`)")

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

    type: Literal["delta"] = Field(default="delta", description="the sink kind")
    path: str = Field(description="root directory or URI of the tables (`s3://...`, `abfss://...`): "
                      "mirror at `<path>/<db>/<table>`, changelog at `<path>/<db>/<table>_changelog`")
    storage_options: dict[str, str] = Field(default_factory=dict, description="object-store options for "
                                            "delta-rs (credentials, region); use `${ENV_VAR}` for secrets")
    engine: Literal["auto", "delta-rs", "delta-spark"] = Field(default="auto", description="`delta-rs`, "
                                                               "`delta-spark`, or `auto` (delta-spark when its "
                                                               "jars are on the classpath)")
    async_mirror: bool = Field(default=True, description="MERGE the mirror in a background thread that "
                               "trails the changelog (batches queued meanwhile are merged together; after "
                               "a crash the mirror catches up from the changelog); `false` MERGEs inside "
                               "every batch")


class JobConfig(_Model):
    """The whole job file."""

    source: MySqlSourceConfig = Field(description="the database to capture")
    sink: DeltaSinkSection = Field(description="where the mirror and changelog tables go")
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


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the config reference in README.md)"
        elif _shows_input(err, loc):
            msg += f" (got {err['input']!r})"
        lines.append(f"{loc or '<root>'}: {msg}")
    return lines


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
        errors = _format_errors(exc)
        raise ConfigError(f"{origin}: {'; '.join(errors)}", errors=errors) from None
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


def config_reference() -> str:
    """The configuration reference as a Markdown table, generated from the models' fields.

    README.md's "Configuration reference" is this text (a test keeps the two equal).
    """
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    sections: list[tuple[str, type[BaseModel]]] = [
        ("", JobConfig), ("source.", MySqlSourceConfig), ("source.startup_offset.", SpecificOffset),
        ("sink.", DeltaSinkSection)]
    for prefix, model in sections:
        for name, info in model.model_fields.items():
            if info.is_required():
                default = "required"
            elif info.default_factory is not None:
                default = f"`{info.default_factory()}`"  # type: ignore[call-arg]
            else:
                default = "none" if info.default is None else f"`{info.default}`"
            lines.append(f"| `{prefix}{name}` | {default} | {info.description or ''} |")
    return "\n".join(lines) + "\n"
