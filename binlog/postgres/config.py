"""``source:`` for PostgreSQL (``type: postgres``): the shared keys plus the slot's own."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from binlog.postgres.positions import parse_lsn
from cdc.model.config import ConfigModel, SchemaChangeConfig, SourceConfig

_SLOT = re.compile(r"^[a-z0-9_]{1,63}$")


class PgStartupOffset(ConfigModel):
    """Where ``startup_mode: specific-offset`` starts: a WAL position."""

    lsn: str = Field(description="a WAL position as PostgreSQL writes it (`0/16B3748`, as in the job's offsets "
                     "and `pg_current_wal_lsn()`): the stream reads the transactions that commit at or after "
                     "it. The job's slot must still hold it")

    @field_validator("lsn")
    @classmethod
    def _lsn(cls, value: str) -> str:
        try:
            parse_lsn(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a WAL position like '0/16B3748'") from None
        return value


class PostgresSourceConfig(SourceConfig):
    """``source:`` for PostgreSQL 12+ (``wal_level=logical``), read through pgoutput."""

    type: Literal["postgres"] = Field(default="postgres", description="the source database kind: `postgres` "
                                      "(PostgreSQL 12+, pgoutput)")
    port: int = Field(default=5432, ge=1, le=65535, description="TCP port of the server")
    username: str = Field(description="the CDC role (needs LOGIN REPLICATION and SELECT on the tables)")
    database: str = Field(description="the database to capture (`tables` match `schema.table` in it)")
    slot_name: str | None = Field(default=None, description="the logical replication slot (pgoutput) the job "
                                  "reads and advances; created when missing; default `spark_cdc_<database>`")
    publication_name: str = Field(default="spark_cdc", description="the publication naming the captured "
                                  "tables; created (FOR TABLE ...) when missing, if the role may")
    log_readers: int = Field(default=5, ge=1, le=16, description="log readers of one batch: the stream task "
                             "and up to `parallelism` tasks of chunk emits (1: the stream task emits every "
                             "chunk itself); they take turns on the slot, which serves one session at a time. "
                             "Also the most tasks a long catch-up slice is cut for (`stream_split_bytes`)")
    stream_split_bytes: int = Field(default=16 * 1024 * 1024, gt=0, description="a catch-up batch's log "
                                    "slice is read by several tasks (up to `parallelism` and `log_readers`) "
                                    "when it holds at least twice this many bytes of WAL; each task after the "
                                    "first decodes its piece from a temporary copy of the slot (one more slot "
                                    "each, within `max_replication_slots`; without a free one it peeks the "
                                    "job's slot)")
    # 256 MiB: a 2M-update backlog (TPC-DS SF100, 2026-11-29) ran at 126-134k changes/s with the
    # driver's peak at 479-488 MiB, against 103-111k at 441-465 MiB (128 MiB, the default before); the
    # mirror's deletion vectors (the default) keep the driver's peak off the cap since the stream's tasks
    # write the mirror's new rows (a copy-on-write mirror: 1,263 MiB at 256 MiB, 858 MiB at 128). Small
    # batches cost Postgres more than MySQL: each batch's peek decodes from the slot's restart point,
    # which a backlog written in a burst does not move (docs/sources/postgres.md, "Bounded batches").
    max_batch_bytes: int | None = Field(
        default=256 * 1024 * 1024, gt=0, description="the most WAL bytes one batch reads: when the WAL from the "
        "last batch's end to the server's flush position holds more (a backlog, a catch-up), the batch ends this "
        "many bytes on and the next batch continues there; each transaction belongs to the batch its commit "
        "lies in (a transaction larger than this is still read whole). Bounds a batch's memory and the rows it "
        "brings to the sinks; `null` reads the whole backlog in one batch. Batches that emit snapshot chunks "
        "are not capped")
    slot_wait_s: float = Field(default=120.0, gt=0, description="how long a reader waits for the slot while "
                               "another session of this job uses it")
    snapshot_wait_s: float = Field(default=300.0, gt=0, description="how long a chunk read waits for the "
                                   "transactions that were committing when it took its low watermark")
    startup_offset: PgStartupOffset | None = Field(default=None, description="where `specific-offset` "
                                                   "starts: `{lsn}`")
    name: str = Field(default="postgres", description="the logical source name (Debezium's `topic.prefix`, "
                      "`source.name` in every change)")
    schema_change: SchemaChangeConfig = Field(default_factory=SchemaChangeConfig, description="how a changed "
                                              "table definition (a new pgoutput Relation message) reaches "
                                              "the sinks (docs/concepts/schema-evolution.md)")

    @field_validator("slot_name")
    @classmethod
    def _slot(cls, value: str | None) -> str | None:
        if value is not None and not _SLOT.match(value):
            raise ValueError(f"{value!r}: slot names are 1-63 lower-case letters, digits and underscores")
        return value

    @model_validator(mode="after")
    def _startup(self) -> PostgresSourceConfig:
        if self.startup_mode == "specific-offset" and self.startup_offset is None:
            raise ValueError("startup_mode specific-offset needs startup_offset: {lsn: '0/16B3748'}")
        return self

    @property
    def slot(self) -> str:
        """The slot name (configured, or derived from the database name)."""
        if self.slot_name:
            return self.slot_name
        return ("spark_cdc_" + re.sub(r"[^a-z0-9_]", "_", self.database.lower()))[:63]
