"""``sink:`` for Kafka (``type: kafka``): Debezium JSON change events in one topic per table.

Validated on the driver; the model is pickled to executors with the writer. ``producer`` may hold
credentials (SASL): it stays out of ``repr`` and no error message prints it.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Literal

from pydantic import Field, field_validator

from cdc.model.config import SinkConfig
from cdc.model.debezium.connect import DebeziumOptions
from cdc.model.schema import TableId

_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]")
DEFAULT_MAX_MESSAGE_BYTES = 1_000_000  # librdkafka's message.max.bytes default


class KafkaSinkConfig(SinkConfig):
    """``sink:`` for Kafka: topics ``<topic_prefix>.<db>.<table>``, exactly once per batch."""

    type: Literal["kafka"] = Field(default="kafka", description="the sink kind: `kafka`")
    bootstrap_servers: str = Field(description="the brokers, `host:port[,host:port...]`")
    topic_prefix: str = Field(default="cdc", description="topics are `<topic_prefix>.<db>.<table>` "
                              "(Debezium's `topic.prefix`)")
    partitions: int = Field(default=1, gt=0, description="partitions of each topic the sink creates "
                            "(existing topics are left as they are); messages are partitioned by key")
    replication_factor: int = Field(default=-1, description="replication factor of the topics the "
                                    "sink creates; -1 takes the broker's `default.replication.factor`")
    schemas_enable: bool = Field(default=True, description="JsonConverter's `schemas.enable`: "
                                 "`{\"schema\":...,\"payload\":...}` messages; `false` writes the payload alone")
    tombstones_on_delete: bool = Field(default=True, description="follow each delete with a tombstone "
                                       "(the key, a null value), as Debezium does by default")
    producer: dict[str, str] = Field(default_factory=dict, repr=False, description="more librdkafka "
                                     "producer (and admin/consumer) settings, e.g. `security.protocol`, "
                                     "`sasl.*`, `message.max.bytes`; use `${ENV_VAR}` for secrets")
    include_schema_changes: bool = Field(default=True, description="publish each DDL on a captured table "
                                         "to the schema change topic `<topic_prefix>` (Debezium's "
                                         "`include.schema.changes`: `ddl` and `tableChanges`), once, in the "
                                         "transaction of the batch that reads it (Postgres, which logs no "
                                         "DDL: of the table's first change under it)")
    extended_headers: bool = Field(default=True, description="Debezium 3's `extended.headers.enabled`: every "
                                   "message carries the headers `__debezium.context.connectorLogicalName` (the "
                                   "source's `name`), `__debezium.context.taskId` (`0`), "
                                   "`__debezium.context.connectorName` (`mysql`, `mariadb`, `postgresql`) and "
                                   "`__debezium.context.runId` (drawn at each start of the job); `false` leaves "
                                   "them out")
    control_topic: str = Field(default="", description="the compacted topic recording the batches "
                               "each job committed (default `<topic_prefix>.__spark_cdc_commits`)")
    staging_path: str = Field(default="", description="a folder the executors and the driver all see "
                              "(local path, or a pyarrow file-system URI such as `s3://b/staging`) where "
                              "encoded messages wait for the driver's transaction; default: the driver's "
                              "temp folder, which suits `local[*]` only")
    transaction_timeout_ms: int = Field(default=60_000, gt=0, description="the transaction's "
                                        "`transaction.timeout.ms`: a crashed driver's open transaction "
                                        "is aborted after this long, or at once when the job restarts")
    commit_timeout_s: float = Field(default=30.0, gt=0, description="seconds one attempt to commit a "
                                    "batch's transaction may take")
    commit_retries: int = Field(default=3, ge=0, description="attempts after the first when a commit "
                                "fails because the brokers are unreachable (backoff doubles from "
                                "`retry_backoff_s`)")
    retry_backoff_s: float = Field(default=1.0, ge=0, description="the first pause between commit attempts")
    connect_timeout_s: float = Field(default=15.0, gt=0, description="seconds to wait for the brokers "
                                     "when the job starts")
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

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: str) -> str:
        if not v.strip() or any(":" not in s for s in v.split(",")):
            raise ValueError("bootstrap_servers must be host:port[,host:port...], e.g. 127.0.0.1:9092")
        return v

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not v or _TOPIC_CHARS.search(v):
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

    def topic(self, table_id: TableId) -> str:
        """``<topic_prefix>.<db>.<table>``, characters Kafka refuses replaced by ``_`` (as Debezium)."""
        return _TOPIC_CHARS.sub("_", f"{self.topic_prefix}.{table_id.db}.{table_id.table}")

    def schema_changes_topic(self) -> str:
        """Debezium's schema change topic: ``<topic_prefix>``."""
        return _TOPIC_CHARS.sub("_", self.topic_prefix)

    def commits_topic(self) -> str:
        """The control topic of committed batches."""
        return self.control_topic or f"{self.topic_prefix}.__spark_cdc_commits"

    def staging_root(self, job_id: str) -> str:
        """Where this job's executors stage messages (one folder per job)."""
        root = self.staging_path or os.path.join(tempfile.gettempdir(), "spark-cdc-kafka-staging")
        return f"{root.rstrip('/')}/{_TOPIC_CHARS.sub('_', job_id)}"

    def max_message_bytes(self) -> int:
        """The producer's message size limit (``message.max.bytes``)."""
        return int(self.producer.get("message.max.bytes", DEFAULT_MAX_MESSAGE_BYTES))

    def client_settings(self) -> dict[str, str]:
        """librdkafka settings every client of the sink shares (may hold secrets: never log)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.producer}
