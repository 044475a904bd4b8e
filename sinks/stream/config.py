"""The ``sink:`` keys every stream-store sink shares: the Debezium message format and staging.

Validated on the driver; pickled to executors with the writer. A store's model (Kafka's, ...)
adds its connection keys and :meth:`StreamSinkConfig.max_message_bytes`.
"""

from __future__ import annotations

import os
import re
import tempfile
from abc import abstractmethod
from typing import Literal

from pydantic import Field, field_validator

from cdc.model.config import SinkConfig
from cdc.model.debezium.connect import DebeziumOptions
from cdc.model.schema import TableId

_NAME_CHARS = re.compile(r"[^a-zA-Z0-9._-]")


def safe_name(name: str) -> str:
    """``name`` with every character outside ``a-z A-Z 0-9 . _ -`` replaced by ``_`` (as Debezium
    names its topics)."""
    return _NAME_CHARS.sub("_", name)


class StreamSinkConfig(SinkConfig):
    """The Debezium message format of a stream-store sink, and where messages wait for the commit."""

    topic_prefix: str = Field(default="cdc", description="streams are `<topic_prefix>.<db>.<table>` "
                              "(Debezium's `topic.prefix`)")
    schemas_enable: bool = Field(default=True, description="JsonConverter's `schemas.enable`: "
                                 "`{\"schema\":...,\"payload\":...}` messages; `false` writes the payload alone")
    tombstones_on_delete: bool = Field(default=True, description="follow each delete with a tombstone "
                                       "(the key, a null value), as Debezium does by default")
    include_schema_changes: bool = Field(default=True, description="publish each DDL on a captured table "
                                         "to the schema change stream `<topic_prefix>` (Debezium's "
                                         "`include.schema.changes`: `ddl` and `tableChanges`), once, with "
                                         "the batch that reads it (Postgres, which logs no DDL: with the "
                                         "table's first change under it)")
    staging_path: str = Field(default="", description="a folder the executors and the driver all see "
                              "(local path, or a pyarrow file-system URI such as `s3://b/staging`) where "
                              "encoded messages wait for the driver's commit; default: the driver's "
                              "temp folder, which suits `local[*]` only")
    bigint_unsigned_handling_mode: Literal["long", "precise"] = Field(
        default="long", description="Debezium's `bigint.unsigned.handling.mode`: `long` (its default; "
        "values above 2^63-1 wrap) or `precise` (Connect Decimal)")
    decimal_handling_mode: Literal["precise", "string", "double"] = Field(
        default="precise", description="Debezium's `decimal.handling.mode`")
    time_precision_mode: Literal["adaptive", "adaptive_time_microseconds", "connect"] | None = Field(
        default=None, description="Debezium's `time.precision.mode`; default: the source connector's "
        "(`adaptive_time_microseconds` for MySQL, `adaptive` for PostgreSQL)")
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = Field(
        default="bytes", description="Debezium's `binary.handling.mode`")
    enable_time_adjuster: bool = Field(
        default=True, description="Debezium's MySQL `enable.time.adjuster` (its default: on): a DATE or "
        "DATETIME of the years 0001-0099 is written as 2001-2069 (years 1-69) or 1970-1999 (70-99), as MySQL "
        "reads two-digit years; `false` writes the year the database holds (MySQL/MariaDB sources only)")
    replace_null_with_default: bool = Field(
        default=True, description="Kafka Connect JsonConverter's `replace.null.with.default` (its default: on), "
        "which Debezium's topics are written with: a null in a column that has a default value is written as "
        "that default; `false` writes null")
    extended_headers: bool = Field(default=True, description="Debezium 3's `extended.headers.enabled`: every "
                                   "message carries the headers `__debezium.context.connectorLogicalName` (the "
                                   "source's `name`), `__debezium.context.taskId` (`0`), "
                                   "`__debezium.context.connectorName` (`mysql`, `mariadb`, `postgresql`) and "
                                   "`__debezium.context.runId` (drawn at each start of the job); `false` leaves "
                                   "them out")
    commit_retries: int = Field(default=3, ge=0, description="attempts after the first when a batch's commit "
                                "fails because the brokers are unreachable (backoff doubles from "
                                "`retry_backoff_s`)")
    retry_backoff_s: float = Field(default=1.0, ge=0, description="the first pause between commit attempts")

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not v or _NAME_CHARS.search(v):
            raise ValueError("topic_prefix must be non-empty and use only a-z A-Z 0-9 . _ -")
        return v

    def debezium_options(self) -> DebeziumOptions:
        """The value encodings, as the Debezium module takes them."""
        return DebeziumOptions(decimal_handling_mode=self.decimal_handling_mode,
                               time_precision_mode=self.time_precision_mode,
                               bigint_unsigned_handling_mode=self.bigint_unsigned_handling_mode,
                               binary_handling_mode=self.binary_handling_mode,
                               enable_time_adjuster=self.enable_time_adjuster,
                               replace_null_with_default=self.replace_null_with_default)

    def staging_root(self, job_id: str) -> str:
        """Where this job's executors stage messages (one folder per job and sink type)."""
        root = self.staging_path or os.path.join(tempfile.gettempdir(), f"spark-cdc-{self.type}-staging")
        return f"{root.rstrip('/')}/{safe_name(job_id)}"

    @abstractmethod
    def topic(self, table_id: TableId) -> str:
        """The topic (stream) that carries ``table_id``'s changes."""

    @abstractmethod
    def max_message_bytes(self) -> int:
        """The largest message the store takes (key, value and framing)."""

    @abstractmethod
    def message_size_fix(self) -> str:
        """What a user raises when a message is over :meth:`max_message_bytes` (for the error)."""
