"""``sink:`` for Kafka (``type: kafka``): Debezium JSON change events in one topic per table.

Validated on the driver; the model is pickled to executors with the writer. ``producer`` may hold
credentials (SASL): it stays out of ``repr`` and no error message prints it. The message format's
keys are every stream-store sink's (:class:`~sinks.stream.config.StreamSinkConfig`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from cdc.model.schema import TableId
from sinks.stream.config import StreamSinkConfig, safe_name

DEFAULT_MAX_MESSAGE_BYTES = 1_000_000  # librdkafka's message.max.bytes default


class KafkaSinkConfig(StreamSinkConfig):
    """``sink:`` for Kafka: topics ``<topic_prefix>.<db>.<table>``, exactly once per batch."""

    type: Literal["kafka"] = Field(default="kafka", description="the sink kind: `kafka`")
    bootstrap_servers: str = Field(description="the brokers, `host:port[,host:port...]`")
    partitions: int = Field(default=1, gt=0, description="partitions of each topic the sink creates "
                            "(existing topics are left as they are); messages are partitioned by key")
    replication_factor: int = Field(default=-1, description="replication factor of the topics the "
                                    "sink creates; -1 takes the broker's `default.replication.factor`")
    producer: dict[str, str] = Field(default_factory=dict, repr=False, description="more librdkafka "
                                     "producer (and admin/consumer) settings, e.g. `security.protocol`, "
                                     "`sasl.*`, `message.max.bytes`; use `${ENV_VAR}` for secrets")
    control_topic: str = Field(default="", description="the compacted topic recording the batches "
                               "each job committed (default `<topic_prefix>.__spark_cdc_commits`)")
    transaction_timeout_ms: int = Field(default=60_000, gt=0, description="the transaction's "
                                        "`transaction.timeout.ms`: a crashed driver's open transaction "
                                        "is aborted after this long, or at once when the job restarts")
    commit_timeout_s: float = Field(default=30.0, gt=0, description="seconds one attempt to commit a "
                                    "batch's transaction may take")
    connect_timeout_s: float = Field(default=15.0, gt=0, description="seconds to wait for the brokers "
                                     "when the job starts")

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: str) -> str:
        if not v.strip() or any(":" not in s for s in v.split(",")):
            raise ValueError("bootstrap_servers must be host:port[,host:port...], e.g. 127.0.0.1:9092")
        return v

    def topic(self, table_id: TableId) -> str:
        """``<topic_prefix>.<db>.<table>``, characters Kafka refuses replaced by ``_`` (as Debezium)."""
        return safe_name(f"{self.topic_prefix}.{table_id.db}.{table_id.table}")

    def schema_changes_topic(self) -> str:
        """Debezium's schema change topic: ``<topic_prefix>``."""
        return safe_name(self.topic_prefix)

    def commits_topic(self) -> str:
        """The control topic of committed batches."""
        return self.control_topic or f"{self.topic_prefix}.__spark_cdc_commits"

    def max_message_bytes(self) -> int:
        """The producer's message size limit (``message.max.bytes``)."""
        return int(self.producer.get("message.max.bytes", DEFAULT_MAX_MESSAGE_BYTES))

    def message_size_fix(self) -> str:
        return ("raise the sink's producer `message.max.bytes` (Java clients: `max.request.size`) and "
                "the topic's `max.message.bytes` (broker `message.max.bytes`)")

    def client_settings(self) -> dict[str, str]:
        """librdkafka settings every client of the sink shares (may hold secrets: never log)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.producer}
