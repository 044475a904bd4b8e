"""``sink:`` for Pravega (``type: pravega``): Debezium JSON change events in one stream per table.

Validated on the driver; the model is pickled to executors with the writer (which uses only the
message format keys, :class:`~sinks.stream.config.StreamSinkConfig`). ``password`` is a secret: a
``SecretStr`` (``**********`` in any repr or log line), best written as ``${ENV_VAR}``.

A Pravega event is bytes and nothing else (its routing key orders it but is not stored with it),
so an event is the Debezium value alone: no tombstones and no headers.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from cdc.model.schema import TableId
from sinks.stream.config import StreamSinkConfig

MAX_EVENT_BYTES = 8 * 1024 * 1024  # Pravega's largest event
_NOT_NAME = re.compile(r"[^a-zA-Z0-9.-]")
_NAME = re.compile(r"^[a-zA-Z0-9.-]+$")


def stream_name(name: str) -> str:
    """``name`` with every character Pravega refuses in a stream name (all but ``a-z A-Z 0-9 .
    -``; ``_`` included) replaced by ``-``."""
    return _NOT_NAME.sub("-", name)


class PravegaSinkConfig(StreamSinkConfig):
    """``sink:`` for Pravega: streams ``<scope>/<topic_prefix>.<db>.<table>``, each batch written in
    one transaction per stream, exactly once (docs/sinks/pravega.md)."""

    type: Literal["pravega"] = Field(default="pravega", description="the sink kind: `pravega`")
    controller_uri: str = Field(description="the controller's URI, `tcp://host:9090` (`tls://host:9090` "
                                "with TLS)")
    scope: str = Field(default="spark-cdc", description="the scope of the sink's streams (created when missing)")
    streams: dict[str, str] = Field(default_factory=dict, description="stream names by table, "
                                    "`{db.table: name}`, instead of `<topic_prefix>.<db>.<table>`")
    segments: int = Field(default=1, gt=0, description="segments of each stream the sink creates (the "
                          "minimum when it scales); a change goes to the segment of its key, so one "
                          "key's changes keep their order")
    scaling: Literal["fixed", "events", "kilobytes"] = Field(
        default="fixed", description="the scaling policy of the streams the sink creates: `fixed` "
        "(`segments` segments), or scaling on the rate of `events` or `kilobytes` per second per segment")
    target_rate: int = Field(default=1000, gt=0, description="with `scaling: events|kilobytes`: the rate "
                             "per segment above which Pravega splits a segment")
    scale_factor: int = Field(default=2, gt=1, description="with `scaling: events|kilobytes`: how many "
                              "segments a split makes")
    username: str | None = Field(default=None, description="Basic authentication's user (the controller's "
                                 "`auth` on); with `password`")
    password: SecretStr | None = Field(default=None, description="Basic authentication's password; write "
                                       "`${ENV_VAR}`, never the value")
    tls_cert_path: str | None = Field(default=None, description="with `tls://`: a folder of PEM "
                                      "certificates that sign the controller's and segment store's")
    control_stream: str = Field(default="", description="the stream recording the batches each job "
                                "committed (default `<topic_prefix>.spark-cdc-commits`, same scope)")
    transaction_lease_s: float = Field(default=90.0, gt=0, description="the client's transaction lease "
                                       "(the Pravega Python client's, 90 s): a batch found half committed "
                                       "after a restart is completed exactly by asking the controller; only "
                                       "a transaction the controller no longer knows counts as committed "
                                       "within the lease and as unknown after it (its stream gets the batch "
                                       "again: docs/sinks/pravega.md)")
    operation_timeout_s: float = Field(default=30.0, gt=0, description="seconds one call to Pravega may "
                                       "take (a transaction's events: seconds without progress) before the "
                                       "attempt fails; a batch gives up after `commit_retries` more attempts, "
                                       "so a lost server stops the job within about (`commit_retries` + 1) x "
                                       "this plus the backoff (the client itself retries for 60-120 s)")
    tombstones_on_delete: bool = Field(default=False, description="always `false`: a Pravega event has no "
                                       "key, so a tombstone would carry nothing")
    extended_headers: bool = Field(default=False, description="always `false`: a Pravega event has no headers")

    @field_validator("controller_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not re.match(r"^(tcp|tls)://[^/\s]+$", v.strip()):
            raise ValueError("controller_uri must be tcp://host:port or tls://host:port")
        return v.strip()

    @field_validator("scope", "control_stream")
    @classmethod
    def _names(cls, v: str) -> str:
        if v and not _NAME.match(v):
            raise ValueError("use only a-z A-Z 0-9 . - (Pravega refuses `_` and every other character)")
        return v

    @field_validator("streams")
    @classmethod
    def _mapped(cls, v: dict[str, str]) -> dict[str, str]:
        for table, name in v.items():
            if table.count(".") != 1 or not _NAME.match(name):
                raise ValueError(f"{table}: {name!r}: map `db.table` to a name of a-z A-Z 0-9 . -")
        return v

    @field_validator("tombstones_on_delete", "extended_headers")
    @classmethod
    def _no_key_no_headers(cls, v: bool) -> bool:
        if v:
            raise ValueError("a Pravega event is its value alone (no key, no headers): leave it `false`")
        return v

    def uses_tls(self) -> bool:
        return self.controller_uri.startswith("tls://")

    def topic(self, table_id: TableId) -> str:
        """The stream of ``table_id``: its ``streams`` entry, else ``<topic_prefix>.<db>.<table>``
        (characters Pravega refuses replaced by ``-``)."""
        mapped = self.streams.get(f"{table_id.db}.{table_id.table}")
        return mapped or stream_name(f"{self.topic_prefix}.{table_id.db}.{table_id.table}")

    def schema_changes_topic(self) -> str:
        """Debezium's schema change stream: ``<topic_prefix>``."""
        return stream_name(self.topic_prefix)

    def commits_stream(self) -> str:
        """The control stream of committed batches."""
        return self.control_stream or stream_name(f"{self.topic_prefix}.spark-cdc-commits")

    def max_message_bytes(self) -> int:
        """Pravega's largest event."""
        return MAX_EVENT_BYTES

    def message_size_fix(self) -> str:
        return "Pravega takes events of at most 8 MiB: leave the largest columns out of the capture"
