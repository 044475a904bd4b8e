"""The PostgreSQL dialect: the Dialect contract over pgoutput and PostgreSQL's SQL.

Where each piece lives: connections, checks, the slot and the publication in ``server.py``; the
log reader in ``reader.py`` (pgoutput messages in ``pgoutput.py``); types and the catalog in
``types.py``. This module wires them to the contract, reads chunks (a binary COPY into Arrow by the
ADBC driver, ``copy_binary.py``) and answers the chunk splitter.

Chunk keys that are strings are compared in the ``"C"`` collation (byte order, which is Python's
``str`` order for UTF-8), whatever the column's collation: key order needs no server round trip.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pyarrow as pa
from psycopg import sql

from binlog.dialect import (
    Dialect,
    SupportsBatchCap,
    SupportsLogRelease,
    SupportsSchemaHistory,
    SupportsSplitSlices,
    SupportsTableJoin,
    piece_offsets,
)
from binlog.postgres.checks import PostgresSourceReport
from binlog.postgres.config import PostgresSourceConfig
from binlog.postgres.copy_binary import borrowed_adbc, fetch_table, select_list, to_job_table
from binlog.postgres.positions import LsnOffset
from binlog.postgres.reader import SKIP_COST, PostgresLogReader
from binlog.postgres.server import (
    PgSettings,
    advance_slot,
    borrowed,
    check_role,
    check_tables,
    check_wal_level,
    ensure_publication,
    ensure_slot,
    first_commit_at_or_after,
    flush_lsn,
    slot_info,
    wait_for_committing,
)
from binlog.postgres.types import (
    CHUNKABLE,
    CONNECTOR,
    key_value,
    load_table_schema,
    quote_ident,
    sql_table,
    table_oid,
)
from cdc.model.config import SourceConfig
from cdc.model.envelope import source_block
from cdc.model.errors import ConfigError
from cdc.model.positions import Offset
from cdc.model.schema import Column, TableId, TableSchema
from chunking.backfill import read_as_defined
from chunking.chunks import KeyValue, SnapshotSplit, SortKey
from chunking.splitter import select_chunk_key

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


def chunkable(column: Column) -> bool:
    """True when a column's values order in Python as PostgreSQL orders them (see module doc)."""
    if column.data_type == "numeric":
        return bool(pa.types.is_decimal(column.arrow))  # unconstrained numeric travels as text
    return column.data_type in CHUNKABLE


def key_sql(column: Column) -> str:
    """The key column as compared in chunk predicates (strings in the "C" collation)."""
    k = quote_ident(column.name)
    return f'{k} COLLATE "C"' if pa.types.is_string(column.arrow) else k


class PostgresDialect(Dialect, SupportsBatchCap, SupportsLogRelease, SupportsSchemaHistory, SupportsSplitSlices,
                      SupportsTableJoin, PostgresSourceReport):
    """PostgreSQL 12+: LSN watermarks, one pgoutput slot per job, C-collation key order; DDL
    followed through pgoutput's Relation messages (``relations.py``)."""

    name: ClassVar[str] = "postgres"
    config_class: ClassVar[type[SourceConfig]] = PostgresSourceConfig

    def __init__(self, config: SourceConfig) -> None:
        if not isinstance(config, PostgresSourceConfig):
            raise TypeError(f"the postgres dialect needs a PostgresSourceConfig, not {type(config).__name__}")
        super().__init__(config)
        self.postgres = config
        self._read_as: dict[TableId, TableSchema] = {}  # executor: the definition the last chunk was read under

    @property
    def settings(self) -> PgSettings:
        """Host, port, database and credentials (the password resolved from env or file)."""
        s = self.postgres
        return PgSettings(s.hostname, s.port, s.username, s.resolved_password(), s.database, s.connect_timeout_s,
                          s.tls)

    # --- driver ---------------------------------------------------------------------------

    def connect(self) -> Any:
        return self.settings.connect()

    def check_source(self, conn: Any) -> None:
        """wal_level, REPLICATION, SELECT per table, the publication, then the slot (created
        after the publication: pgoutput looks publications up as of each WAL position)."""
        check_wal_level(conn)
        check_role(conn)
        try:
            tables = self.discover_tables(conn, self.postgres.tables)
        except ConfigError:
            tables = []  # discovery, next, says what matches
        self.prepare_join(conn, tables)
        ensure_slot(conn, self.postgres.slot, self.postgres.database, self.postgres.slot_wait_s)

    def prepare_join(self, conn: Any, tables: Sequence[TableId]) -> None:
        """SELECT on each table, and the publication lists them (created or extended when the
        role may)."""
        check_tables(conn, tables)
        ensure_publication(conn, self.postgres.publication_name, tables)

    def discover_tables(self, conn: Any, patterns: Sequence[str]) -> list[TableId]:
        rows = conn.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname <> ALL(%s) "
                            "AND n.nspname NOT LIKE 'pg_temp%%' ORDER BY 1, 2", (list(SYSTEM_SCHEMAS),)).fetchall()
        visible = [TableId(s, t) for s, t in rows]
        compiled = [re.compile(p) for p in patterns]
        matched = [t for t in visible if any(p.fullmatch(str(t)) for p in compiled)]
        if not matched:
            sample = ", ".join(map(str, visible[:10])) or "none"
            raise ConfigError(f"source.tables {list(patterns)} matched no table in database "
                              f"{self.postgres.database!r}. Tables there: {sample}{' ...' if len(visible) > 10 else ''}. "
                              "Patterns are regexes on 'schema.table' (e.g. 'public\\\\..*')", tables=list(patterns))
        return matched

    def table_schema(self, conn: Any, table: TableId) -> TableSchema:
        return load_table_schema(conn, table, self.postgres.database)

    def chunk_key(self, schema: TableSchema) -> Column:
        return select_chunk_key(schema, self.postgres.chunk_key_columns.get(str(schema.table_id)), chunkable)

    def split_queries(self, conn: Any, schema: TableSchema, column: Column) -> PostgresSplitQueries:
        return PostgresSplitQueries(conn, schema.table_id, column)

    # --- positions ------------------------------------------------------------------------

    def current_offset(self, conn: Any) -> LsnOffset:
        return flush_lsn(conn)

    def startup_offset(self, conn: Any) -> LsnOffset | None:
        s = self.postgres
        if s.startup_mode not in ("earliest-offset", "specific-offset", "timestamp"):
            return None
        info = slot_info(conn, s.slot)  # check_source made it
        if info is None or info.confirmed is None:
            raise ConfigError(f"startup_mode {s.startup_mode}: replication slot {s.slot!r} does not exist yet",
                              key="source.startup_mode")
        if s.startup_mode == "earliest-offset":
            return info.confirmed
        current = flush_lsn(conn)
        if s.startup_mode == "timestamp":
            assert s.startup_timestamp_ms is not None  # the config requires it
            found = first_commit_at_or_after(conn, s.slot, s.publication_name, s.startup_timestamp_ms, current,
                                             s.slot_wait_s)
            return max(found or current, info.confirmed, key=lambda o: o.lsn)
        assert s.startup_offset is not None  # the config requires it
        start = LsnOffset.parse(s.startup_offset.lsn)
        if start.is_before(info.confirmed):
            raise ConfigError(f"source.startup_offset {start} is before replication slot {s.slot!r}'s confirmed "
                              f"position {info.confirmed}: the slot no longer holds the changes before that. Start "
                              f"at {info.confirmed} or later (startup_mode earliest-offset starts there)",
                              key="source.startup_offset")
        if current.is_before(start):
            raise ConfigError(f"source.startup_offset {start} is after the server's current WAL position "
                              f"{current}: give a position the server has written", key="source.startup_offset")
        return start

    def offset_from_dict(self, data: dict[str, Any]) -> LsnOffset:
        return LsnOffset.from_dict(data)

    def describe_offset(self, data: dict[str, Any]) -> str:
        return str(data["lsn"])

    def release(self, conn: Any, offset: Offset) -> None:
        assert isinstance(offset, LsnOffset)
        advance_slot(conn, self.postgres.slot, offset, self.postgres.slot_wait_s)

    def slice_cuts(self, connection: Callable[[], Any], start: LsnOffset, end: LsnOffset,
                   parts: int) -> list[LsnOffset]:
        """WAL byte positions, without asking the server: a transaction belongs to the piece its
        commit lies in, so any LSN is a cut (positions.py). Each piece after the first is
        read from a copy of the slot (:meth:`PostgresLogReader.change_rows`)."""
        offsets = piece_offsets(end.lsn - start.lsn, parts, self.postgres.stream_split_bytes, SKIP_COST)
        return [LsnOffset(start.lsn + at) for at in offsets]

    def max_batch_bytes(self) -> int | None:
        return self.postgres.max_batch_bytes

    def capped_end(self, connection: Callable[[], Any], start: LsnOffset, end: LsnOffset,
                   max_bytes: int) -> LsnOffset:
        """``max_bytes`` of WAL after ``start`` when the slice holds more (any LSN is a batch
        boundary: a transaction belongs to the batch its commit lies in)."""
        return LsnOffset(start.lsn + max_bytes) if end.lsn - start.lsn > max_bytes else end

    # --- executors ------------------------------------------------------------------------

    def read_chunk(self, schema: TableSchema, split: SnapshotSplit,
                   on_low_watermark: Callable[[], None] | None = None) -> tuple[LsnOffset, pa.Table]:
        """LW (the WAL flush position), a wait for the transactions committing at that moment,
        then one COPY of the key range: every transaction that committed before the LW is in
        the rows, every later one is in the log after the LW.

        The rows are read under the table's definition at the LW: the catalog is read after the
        COPY and compared with the definition the COPY used (the last one this dialect read,
        else ``schema``); a DDL in between reads the chunk again under the new one, with a new
        LW.

        Raises:
            SchemaChanged: the chunk key column is gone (renamed or dropped), or the table's
                definition kept changing over :data:`chunking.backfill.READ_ATTEMPTS` reads.
        """
        table = schema.table_id

        def lw_of(conn: Any) -> LsnOffset:
            lw = flush_lsn(conn)
            if on_low_watermark is not None:
                on_low_watermark()
            wait_for_committing(conn, self.postgres.snapshot_wait_s)
            return lw

        with borrowed(self.settings) as conn:
            lw, rows, self._read_as[table] = read_as_defined(
                self._read_as.get(table, schema), split, functools.partial(lw_of, conn),
                functools.partial(select_chunk, conn, split=split, settings=self.settings),
                functools.partial(load_table_schema, conn, table, self.postgres.database))
        return lw, rows

    def key_order(self, column: Column, conn: Any) -> PostgresKeyOrder:
        return PostgresKeyOrder()

    def log_reader(self, reader_id: int, tables: Sequence[TableSchema],
                   follow: Sequence[TableSchema] = ()) -> PostgresLogReader:
        return PostgresLogReader(self.postgres, self.connect, {t.table_id: t for t in tables}, self.history_store,
                                 {t.table_id: t for t in follow})

    def reader_ids(self) -> list[int]:
        return list(range(self.postgres.log_readers))

    def snapshot_source(self, table: TableId, high_watermark: Any, ts_ms: int) -> dict[str, Any]:
        hw: LsnOffset = high_watermark
        return source_block(CONNECTOR, self.postgres.name, table, ts_ms, "true",
                            {"schema": table.db, "lsn": hw.lsn, "sequence": f'[null,"{hw.lsn}"]'})


def range_predicate(conn: Any, column: Column, start: KeyValue, end: KeyValue) -> str:
    """``start <= k < end`` with literal values (COPY takes no parameters; None = unbounded,
    NULL keys go to the first chunk)."""
    k = key_sql(column)

    def lit(v: KeyValue) -> str:
        return sql.Literal(v).as_string(conn)

    if start is None and end is None:
        return "TRUE"
    if start is None:
        return f"({k} < {lit(end)} OR {quote_ident(column.name)} IS NULL)"
    if end is None:
        return f"{k} >= {lit(start)}"
    return f"{k} >= {lit(start)} AND {k} < {lit(end)}"


def chunk_query(conn: Any, schema: TableSchema, split: SnapshotSplit) -> str:
    """The chunk's SELECT (``conn``, psycopg's, quotes the bounds): binary-decoded columns as
    they are, the others as text (:func:`copy_binary.select_list`)."""
    column = schema.column(split.key_column)
    return (f"SELECT {select_list(schema)} FROM {sql_table(schema.table_id)} WHERE "
            f"{range_predicate(conn, column, split.start, split.end)}")


def select_chunk(conn: Any, schema: TableSchema, split: SnapshotSplit, settings: PgSettings) -> pa.Table:
    """A chunk's rows, read as ``COPY (SELECT ...) TO STDOUT (FORMAT binary)`` by the ADBC driver
    on a session of its own (kept for the next chunk), after the caller took the LW on ``conn``
    (executor). The COPY starts after the LW and its wait, so it sees what :meth:`read_chunk`
    needs, whichever session runs it."""
    with borrowed_adbc(settings) as adbc:
        return to_job_table(fetch_table(adbc, chunk_query(conn, schema, split)), schema)


class PostgresKeyOrder:
    """Key order without the server: every chunkable type's Python order is PostgreSQL's
    (strings compared in the "C" collation)."""

    def sort_keys(self, values: Sequence[KeyValue]) -> list[SortKey]:
        return [(0,) if v is None else (1, v) for v in values]

    def bound_key(self, value: KeyValue) -> SortKey:
        return (0,) if value is None else (1, value)


class PostgresSplitQueries:
    """The chunk splitter's queries for one table, on a driver connection (SELECT suffices)."""

    def __init__(self, conn: Any, table: TableId, column: Column) -> None:
        self._conn = conn
        self._table = table
        self._column = column
        self._k = key_sql(column)
        self._t = sql_table(table)

    def _value(self, text: str | None) -> KeyValue:
        return key_value(text, self._column)

    def key_range(self) -> tuple[KeyValue, KeyValue]:
        lo, hi = self._conn.execute(f"SELECT MIN({self._k})::text, MAX({self._k})::text FROM {self._t}").fetchone()
        return self._value(lo), self._value(hi)

    def approximate_rows(self) -> int:
        row = self._conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s",
                                 (table_oid(self._conn, self._table),)).fetchone()
        return max(0, int(row[0])) if row and row[0] is not None else 0

    def chunk_end(self, lower: KeyValue, size: int) -> tuple[KeyValue, int, bool]:
        k, t = self._k, self._t
        end, count, moved = self._conn.execute(
            f"SELECT MAX(k)::text, COUNT(*), MAX(k) > %s FROM (SELECT {k} AS k FROM {t} WHERE {k} >= %s "
            f"ORDER BY {k} LIMIT {int(size)}) AS T", (lower, lower)).fetchone()
        return self._value(end), int(count), bool(moved)

    def next_key_above(self, lower: KeyValue) -> KeyValue:
        row = self._conn.execute(f"SELECT MIN({self._k})::text FROM {self._t} WHERE {self._k} > %s",
                                 (lower,)).fetchone()
        return self._value(row[0])

    def key_is_indexed(self) -> bool:
        row = self._conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = i.indkey[0] WHERE i.indrelid = %s AND a.attname = %s)",
            (table_oid(self._conn, self._table), self._column.name)).fetchone()
        return bool(row[0])
