"""``sink:`` for Apache Pulsar (``type: pulsar``): Debezium JSON change events in one topic per table.

Validated on the driver; the model is pickled to executors with the writer (which uses only the
message format keys). ``auth_token`` is a secret: a ``SecretStr`` (``**********`` in any repr or
log line), best written as ``${ENV_VAR}``. The message format's keys are every stream-store sink's
(:class:`~sinks.stream.config.StreamSinkConfig`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from cdc.model.schema import TableId
from sinks.stream.config import StreamSinkConfig, safe_name

DEFAULT_MAX_MESSAGE_BYTES = 5 * 1024 * 1024  # the broker's maxMessageSize default
_NAME = re.compile(r"^[a-zA-Z0-9_.-]+$")


class PulsarSinkConfig(StreamSinkConfig):
    """``sink:`` for Pulsar: topics ``persistent://<tenant>/<namespace>/<topic_prefix>.<db>.<table>``,
    each change once per batch through broker-side deduplication (docs/sinks/pulsar.md)."""

    type: Literal["pulsar"] = Field(default="pulsar", description="the sink kind: `pulsar`")
    service_url: str = Field(description="the brokers' binary protocol URL, `pulsar://host:6650` "
                             "(`pulsar+ssl://host:6651` with TLS)")
    admin_url: str = Field(description="the brokers' admin REST URL, `http://host:8080` (`https://host:8443` "
                           "with TLS): the sink creates its partitioned topics and checks that "
                           "deduplication is on through it")
    tenant: str = Field(default="public", description="the tenant of the sink's topics")
    namespace: str = Field(default="default", description="the namespace of the sink's topics; broker-side "
                           "deduplication must be on for it (`pulsar-admin namespaces set-deduplication "
                           "<tenant>/<namespace> --enable`, or the broker's `brokerDeduplicationEnabled=true`)")
    partitions: int = Field(default=1, gt=0, description="partitions of each topic the sink creates (existing "
                            "topics keep theirs); a message goes to the partition of its key's Murmur3 hash, "
                            "as the Java client's `HashingScheme.Murmur3_32Hash` routes it")
    auth_token: SecretStr | None = Field(default=None, description="a JWT for token authentication (the "
                                         "client and the admin API); write `${ENV_VAR}`, never the value")
    tls_trust_certs_file_path: str | None = Field(default=None, description="CA certificates (PEM) that "
                                                  "sign the brokers' TLS certificates")
    tls_allow_insecure_connection: bool = Field(default=False, description="accept any broker certificate "
                                                "(testing only)")
    tls_validate_hostname: bool = Field(default=True, description="check that the broker's certificate "
                                        "names its host")
    control_topic: str = Field(default="", description="the topic recording the batches each job "
                               "committed (default `<topic_prefix>.__spark_cdc_commits`, same namespace)")
    max_message_size: int = Field(default=DEFAULT_MAX_MESSAGE_BYTES, gt=0, description="the largest "
                                  "message the brokers take, in bytes (their `maxMessageSize`)")
    operation_timeout_s: float = Field(default=30.0, gt=0, description="the client's "
                                       "`operation_timeout_seconds` (lookups, producer creation)")
    connect_timeout_s: float = Field(default=15.0, gt=0, description="seconds to wait for the brokers "
                                     "when the job starts (the admin API and the first producer)")
    send_timeout_s: float = Field(default=30.0, gt=0, description="seconds a message may wait for the "
                                  "broker's receipt before the batch's attempt fails (the client resends "
                                  "on reconnects meanwhile)")
    max_pending_messages: int = Field(default=10_000, gt=0, description="messages in flight per partition "
                                      "producer")
    compression: Literal["none", "lz4", "zlib", "zstd", "snappy"] = Field(
        default="lz4", description="the producers' compression")

    @field_validator("service_url")
    @classmethod
    def _service(cls, v: str) -> str:
        if not re.match(r"^pulsar(\+ssl)?://[^/\s]+$", v.strip()):
            raise ValueError("service_url must be pulsar://host:port or pulsar+ssl://host:port "
                             "(several hosts: pulsar://h1:6650,h2:6650)")
        return v.strip()

    @field_validator("admin_url")
    @classmethod
    def _admin(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+/?$", v.strip()):
            raise ValueError("admin_url must be http://host:port or https://host:port (the admin REST API)")
        return v.strip().rstrip("/")

    @field_validator("tenant", "namespace", "control_topic")
    @classmethod
    def _names(cls, v: str) -> str:
        if v and not _NAME.match(v):
            raise ValueError("use only a-z A-Z 0-9 . _ -")
        return v

    def uses_tls(self) -> bool:
        return self.service_url.startswith("pulsar+ssl://")

    def topic(self, table_id: TableId) -> str:
        """``persistent://<tenant>/<namespace>/<topic_prefix>.<db>.<table>`` (characters Pulsar refuses
        in a name replaced by ``_``, as Debezium names its topics)."""
        return self.full(safe_name(f"{self.topic_prefix}.{table_id.db}.{table_id.table}"))

    def schema_changes_topic(self) -> str:
        """Debezium's schema change topic: ``<topic_prefix>``."""
        return self.full(safe_name(self.topic_prefix))

    def commits_topic(self) -> str:
        """The control topic of committed batches."""
        return self.full(self.control_topic or f"{self.topic_prefix}.__spark_cdc_commits")

    def full(self, name: str) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{name}"

    def max_message_bytes(self) -> int:
        """The brokers' message size limit (``max_message_size``)."""
        return self.max_message_size

    def message_size_fix(self) -> str:
        return ("raise the brokers' `maxMessageSize` and the sink's `max_message_size` together")
