"""``source:`` for MySQL and MariaDB (``type: mysql``): the shared keys plus the binlog's own."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from binlog.mysql.positions import GtidSet
from cdc.model.config import ConfigModel, SchemaChangeConfig, SourceConfig

_SERVER_ID = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


class SpecificOffset(ConfigModel):
    """Where ``startup_mode: specific-offset`` starts: a file and position, or a GTID set."""

    file: str | None = Field(default=None, description="binlog file name, e.g. `mysql-bin.000003`")
    pos: int | None = Field(default=None, ge=4, description="position in that file (4 = its start)")
    gtid: str | None = Field(default=None, description="a GTID set: the stream starts after exactly these "
                             "transactions. MariaDB `domain-server-seq` per domain (`0-1-100,1-2-7`), MySQL "
                             "`uuid:1-100` per source (needs `gtid_mode=ON`); docs/operating/failover.md")

    @field_validator("gtid")
    @classmethod
    def _gtid_set(cls, value: str | None) -> str | None:
        if value is None:
            return None
        gtid = GtidSet.parse(value)  # ValueError names the wrong part and both accepted forms
        if gtid.kind == "empty":
            raise ValueError("an empty GTID set; give the set of transactions to start after, or use "
                             "startup_mode earliest-offset to read every binlog file the server still has")
        return str(gtid)

    @model_validator(mode="after")
    def _one_form(self) -> SpecificOffset:
        if self.gtid is not None and (self.file is not None or self.pos is not None):
            raise ValueError("give either file and pos, or gtid, not both")
        if self.gtid is None and (self.file is None or self.pos is None):
            raise ValueError("give either file and pos, or gtid")
        return self


class MySqlSourceConfig(SourceConfig):
    """``source:`` for MySQL 5.7/8.x and MariaDB 10.5+."""

    type: Literal["mysql"] = Field(default="mysql", description="the source database kind: `mysql` "
                                   "(MySQL 5.7/8.x, MariaDB 10.5+)")
    port: int = Field(default=3306, ge=1, le=65535, description="TCP port of the server")
    username: str = Field(description="the CDC user (needs SELECT, REPLICATION SLAVE, REPLICATION CLIENT)")
    server_id: str = Field(default="5400-5404", description="binlog reader ids, one per concurrent reader "
                           "(`5400` or a range `5400-5404`); unique among the server's replicas")
    startup_offset: SpecificOffset | None = Field(default=None, description="where `specific-offset` starts: "
                                                  "`{file, pos}` or `{gtid}`")
    stream_split_bytes: int = Field(default=16 * 1024 * 1024, gt=0, description="a catch-up batch's binlog "
                                    "slice is read by several tasks (up to `parallelism`, one server id each) "
                                    "when it holds at least twice this many bytes; each decodes its own piece")
    # 128 MiB: with the mirror's deletion vectors (the default) the stream's tasks write the mirror's
    # new rows and the driver reads key columns alone, so its peak hardly follows the cap: a
    # 2M-update backlog (TPC-DS SF100) ran at 177k changes/s with the driver at 430 MiB against 192k at
    # 454 MiB at 128 MiB (2026-11-29), and at 147k (388 MiB) against 150k (444 MiB) on 2026-12-02. A
    # 300k-update catch-up (72 MB of binlog) is then one batch instead of two, without the second
    # one's fixed costs: 2.64, 2.95, 3.33 s against 3.09, 3.54, 3.13 s at 64 MiB (alternating, after
    # the last MERGE got quicker in 714dd30; 64 MiB was the default from 2026-11-29 to 2026-12-02;
    # benchmarks/tpcds_customer.py --catch-up-only --max-batch-bytes). A copy-on-write mirror's MERGE
    # still reads the changes into the driver: 1,286-1,289 MiB at 64 MiB, 835-853 MiB at 32 MiB
    # (--copy-on-write, 2026-11-29), so such a job should set 32 MiB.
    max_batch_bytes: int | None = Field(
        default=128 * 1024 * 1024, gt=0, description="the most binlog bytes one batch reads: when the "
        "binlog from the last batch's end to the server's end holds more (a backlog, a catch-up), the "
        "batch ends this many bytes on (counted across files) and the next batch continues there; each "
        "transaction belongs to the batch it begins in. Bounds a batch's work and the rows it brings to the sinks; "
        "`null` reads the whole backlog in one batch. Batches that emit snapshot chunks are not capped")
    fetch_backend: Literal["auto", "connectorx", "mysqlclient", "pymysql"] = Field(
        default="auto", description="how chunk SELECTs reach Arrow: `connectorx` (fastest), "
        "`mysqlclient`, `pymysql`, or `auto` (the fastest installed one that reads every column)")
    name: str = Field(default="mysql", description="the logical source name (Debezium's `topic.prefix`, "
                      "`source.name` in every change)")
    schema_change: SchemaChangeConfig = Field(default_factory=SchemaChangeConfig, description="how DDL on a "
                                              "captured table reaches the sinks (docs/concepts/schema-evolution.md)")
    include_query: bool = Field(default=False, description="Debezium's `include.query`: put the statement "
                                "that made each change (the binlog's annotate/rows-query event; MySQL needs "
                                "`binlog_rows_query_log_events=ON`) in `source.query`; off (Debezium's default), "
                                "`source.query` is null")
    debezium_connector: Literal["auto", "mysql", "mariadb"] = Field(
        default="auto", description="the Debezium connector the changes speak as: `source.connector` and the "
        "`source` block's schema name `io.debezium.connector.<connector>.Source` in every change and schema "
        "change event (Kafka) and in the changelog's `source`. `auto`: the server's own, Debezium's MariaDB "
        "connector for a MariaDB server, its MySQL connector for MySQL; `mysql` keeps the MySQL connector's "
        "form on MariaDB, for consumers written against it (docs/sinks/kafka.md)")

    @field_validator("server_id")
    @classmethod
    def _server_ids(cls, value: str) -> str:
        server_id_range(value)
        return value

    @model_validator(mode="after")
    def _startup(self) -> MySqlSourceConfig:
        if self.startup_mode == "specific-offset" and self.startup_offset is None:
            raise ValueError("startup_mode specific-offset needs startup_offset: {file, pos} or {gtid}")
        return self

    @model_validator(mode="after")
    def _tls_backend(self) -> MySqlSourceConfig:
        if self.fetch_backend == "connectorx" and self.ssl_cert is not None:
            raise ValueError("fetch_backend 'connectorx' cannot present the client certificate ssl_cert asks for "
                             "(its MySQL URL has no such parameter): use fetch_backend auto or pymysql, or drop "
                             "ssl_cert and ssl_key")
        return self


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
