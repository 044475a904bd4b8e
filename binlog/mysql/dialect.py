"""The MySQL/MariaDB dialect: the Dialect contract over the binlog reader and MySQL's SQL.

Where each piece lives: server facts and checks in ``server.py``, the binlog reader in
``reader.py`` (its stream walk in ``stream.py``, the column-wise decoding in ``rows_decode.py``),
chunk SELECTs into Arrow in ``fetch.py``, key order and range predicates in ``keys.py``, types in
``types.py``. This module wires them to the contract and adds the chunk splitter's queries.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import pyarrow as pa
import pymysql

from binlog.dialect import (
    ChangeRows,
    ChunkVersion,
    Dialect,
    SupportsBatchCap,
    SupportsSchemaHistory,
    SupportsSplitSlices,
    SupportsStatePruning,
)
from binlog.mysql.change_rows import event_rows_envelope
from binlog.mysql.checks import MySqlSourceReport
from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.connection import Endpoint
from binlog.mysql.event_rows import EventRows
from binlog.mysql.fetch import fetch_arrow
from binlog.mysql.keys import KeyOrder, chunkable, range_predicate, sql_ident, sql_param, sql_table
from binlog.mysql.positions import (
    SKIP_COST,
    BinlogOffset,
    ChangePosition,
    GtidSet,
    byte_cuts,
    capped_end,
)
from binlog.mysql.reader import BinlogReaderOptions, DdlVersion, MySqlBinlogReader
from binlog.mysql.server import (
    ServerIdRange,
    binary_log_sizes,
    binary_logs,
    check_server,
    current_offset,
    flavor,
    low_watermark,
    require_gtids,
    server_identity,
)
from binlog.mysql.stream import locate_gtid
from binlog.mysql.timestamps import offset_at
from binlog.mysql.types import load_table_schema
from cdc.model.config import SourceConfig
from cdc.model.envelope import envelope_schema, source_block
from cdc.model.errors import ConfigError, InvalidBinlogPosition, SchemaChanged
from cdc.model.events import ChangeEvent
from cdc.model.history import (
    Behavior,
    SchemaChange,
    SchemaVersion,
    project_rows,
    with_schema,
)
from cdc.model.positions import Offset
from cdc.model.schema import Column, TableId, TableSchema
from chunking.backfill import read_as_defined, same_columns
from chunking.chunks import KeyValue, SnapshotSplit
from chunking.splitter import select_chunk_key

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
STREAM_ROWS = 65_536  # binlog changes turned into change rows at a time


def prepare_worker() -> None:
    """Load the kernels that decode rows events (``rows_kernels.py``, numba): the executors'
    Python daemon calls this before it forks the workers that read the binlog
    (:mod:`cdc.spark.daemon`). The dialect itself imports numba only where rows are decoded."""
    from binlog.mysql import rows_kernels

    rows_kernels.load()


class MySqlDialect(Dialect, SupportsSplitSlices, SupportsBatchCap, SupportsStatePruning, SupportsSchemaHistory,
                   MySqlSourceReport):
    """MySQL 5.7/8.x and MariaDB 10.5+: binlog positions, server ids, WEIGHT_STRING key order."""

    name: ClassVar[str] = "mysql"
    config_class: ClassVar[type[SourceConfig]] = MySqlSourceConfig

    def __init__(self, config: SourceConfig) -> None:
        if not isinstance(config, MySqlSourceConfig):
            raise TypeError(f"the mysql dialect needs a MySqlSourceConfig, not {type(config).__name__}")
        super().__init__(config)
        self.mysql = config
        self._read_as: dict[TableId, TableSchema] = {}  # executor: the definition the last chunk was read under

    # Where the first transaction after a cut begins (the end of a capped batch), found by the
    # reader of the batch that ends there and kept in the state directory, so that the next
    # batch's readers open their dump there instead of walking from the start of the file. Only
    # a shortcut: without it they walk, and read the same changes. Once the batch that starts at
    # a cut is committed, every later batch starts after it, and the driver deletes its hint.

    def walk_hint(self, cut: BinlogOffset) -> BinlogOffset | None:
        """The first transaction at or after ``cut``, if a reader recorded it (executor)."""
        store = self.history_store
        if not isinstance(store, JsonStore):
            return None
        try:
            return BinlogOffset.from_dict(store.read_json(_hint_path(cut)))
        except Exception:  # not recorded (the batch before ran elsewhere, or crashed first)
            return None

    def save_walk_hint(self, cut: BinlogOffset, found: BinlogOffset | None) -> None:
        """Record where the first transaction at or after ``cut`` begins (executor)."""
        store = self.history_store
        if found is None or not isinstance(store, JsonStore):
            return
        try:
            store.write_json(_hint_path(cut), {"file": found.file, "pos": found.pos, "server": cut.server})
        except Exception as exc:  # the next batch walks from the file's start instead
            log.warning("could not record the transaction after cut %s: %s", cut, exc)

    _hints_pruned_at: BinlogOffset | None = None  # driver: no listing again while idle

    def prune_state(self, committed: Offset) -> None:
        """Delete the walk hints of the cuts before ``committed`` (driver, after each commit):
        those of its server, and those of no known server (the inner cuts of a slice split over
        several readers, where no batch starts). A crash before it leaves hints that the next
        call deletes."""
        store = self.history_store
        if not isinstance(committed, BinlogOffset) or not isinstance(store, HintStore) \
                or committed == self._hints_pruned_at:
            return
        here = BinlogOffset(committed.file, committed.pos)
        try:
            for folder in dict.fromkeys([_hint_dir(committed.server), _hint_dir(None)]):
                for name in store.file_names(folder):
                    if _hint_before(name, here):
                        store.delete(f"{folder}/{name}")
            self._hints_pruned_at = committed
        except Exception as exc:  # left for the next commit's call
            log.warning("could not delete the walk hints before %s: %s", committed, exc)

    @property
    def settings(self) -> Endpoint:
        """Host, port and credentials (the password resolved from the environment or a file)."""
        s = self.mysql
        return Endpoint(host=s.hostname, port=s.port, user=s.username,
                                  password=s.resolved_password(), connect_timeout=s.connect_timeout_s, tls=s.tls)

    # --- driver ---------------------------------------------------------------------------

    def connect(self) -> Any:
        return self.settings.connect()

    def check_source(self, conn: Any) -> None:
        check_server(conn, ServerIdRange.parse(self.mysql.server_id))
        self._learn_connector(conn)

    _connector: str | None = None  # source.debezium_connector, resolved (auto: the server's flavor)

    @property
    def connector(self) -> str:
        """The Debezium connector the changes speak as, ``mysql`` or ``mariadb``
        (``source.debezium_connector``; ``auto`` asks the server once: the driver learns it at start,
        an executor whose dialect was made afresh connects once)."""
        if self._connector is None and self.mysql.debezium_connector != "auto":
            self._connector = self.mysql.debezium_connector
        if self._connector is None:
            with contextlib.closing(self.connect()) as conn:
                self._learn_connector(conn)
        assert self._connector is not None
        return self._connector

    def _learn_connector(self, conn: Any) -> None:
        chosen = self.mysql.debezium_connector
        self._connector = flavor(conn) if chosen == "auto" else chosen

    def discover_tables(self, conn: Any, patterns: Sequence[str]) -> list[TableId]:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                        "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN %s "
                        "ORDER BY TABLE_SCHEMA, TABLE_NAME", (SYSTEM_SCHEMAS,))
            visible = [TableId(db, t) for db, t in cur.fetchall()]
        return _matching(visible, patterns)

    def table_schema(self, conn: Any, table: TableId) -> TableSchema:
        if self._connector is None:
            self._learn_connector(conn)
        return load_table_schema(conn, table)

    def chunk_key(self, schema: TableSchema) -> Column:
        return select_chunk_key(schema, self.mysql.chunk_key_columns.get(str(schema.table_id)), chunkable)

    def split_queries(self, conn: Any, schema: TableSchema, column: Column) -> MySqlSplitQueries:
        return MySqlSplitQueries(conn, schema.table_id, column)

    # --- positions ------------------------------------------------------------------------

    def current_offset(self, conn: Any) -> BinlogOffset:
        return current_offset(conn)

    def startup_offset(self, conn: Any) -> BinlogOffset | None:
        s = self.mysql
        if s.startup_mode == "earliest-offset":
            return BinlogOffset(binary_logs(conn)[0], 4)
        if s.startup_mode == "specific-offset":
            assert s.startup_offset is not None
            if s.startup_offset.gtid is not None:
                return self.gtid_offset(conn, s.startup_offset.gtid)
            assert s.startup_offset.file is not None and s.startup_offset.pos is not None
            return BinlogOffset(s.startup_offset.file, s.startup_offset.pos)
        if s.startup_mode == "timestamp":
            assert s.startup_timestamp_ms is not None
            return offset_at(self.settings, self.reader_ids()[0], s.startup_timestamp_ms)
        return None

    def gtid_offset(self, conn: Any, gtid: str, attempts: int = 3) -> BinlogOffset:
        """The offset right after the transactions of the GTID set ``gtid`` (driver; opens a
        replication connection with the first reader id).

        Raises:
            ConfigError: the set is in the other flavor's form, or names transactions the server
                has not executed (``source.startup_offset.gtid``).
            BinlogNotConfigured: MySQL with ``gtid_mode`` off.
            InvalidBinlogPosition: the server no longer has the binlog after the set (purged).
        """
        key = "source.startup_offset.gtid"
        require_gtids(conn, key)
        want, now = GtidSet.parse(gtid), current_offset(conn)
        have = GtidSet.parse(now.gtid or "")
        kind = flavor(conn)
        if want.kind != kind:
            raise ConfigError(f"{key}: {gtid!r} is a {want.kind} GTID set, but the server is {kind}; write "
                              f"the server's form ({'domain-server-seq' if kind == 'mariadb' else 'uuid:1-100'})",
                              key=key, value=gtid)
        if not want.issubset(have):
            raise ConfigError(f"{key}: the server has not executed every transaction of {gtid!r} (its GTIDs: "
                              f"{have or '(none)'}); give a set up to its gtid_binlog_pos / gtid_executed",
                              key=key, value=gtid)
        if want.compare(have) == 0:
            return BinlogOffset(now.file, now.pos, str(want), now.server)
        try:
            at = locate_gtid(self.settings, self.reader_ids()[0], str(want), kind == "mariadb")
        except pymysql.err.OperationalError as exc:
            raise InvalidBinlogPosition(f"{key}: the server cannot stream from after {gtid!r}: {exc.args[-1]} "
                                        "(its binlog from there was purged?)", position=gtid) from None
        if at is None:  # the server moved between the two reads: find it again
            if attempts <= 1:
                raise InvalidBinlogPosition(f"{key}: the server kept moving while finding {gtid!r}; retry",
                                            position=gtid)
            return self.gtid_offset(conn, gtid, attempts - 1)
        return BinlogOffset(at.file, at.pos, str(want), server_identity(conn))

    def catalog_version_at(self, offset: Offset) -> tuple[tuple[int, int], str] | None:
        """``offset``'s history key, as a DDL's right after its statement (rows after it find it)."""
        assert isinstance(offset, BinlogOffset)
        return _offset_key(offset), f"{offset.file}:{offset.pos}"

    def offset_from_dict(self, data: dict[str, Any]) -> BinlogOffset:
        return BinlogOffset.from_dict(data)

    def describe_offset(self, data: dict[str, Any]) -> str:
        return f"{data['file']}:{data['pos']}"

    def slice_cuts(self, connection: Callable[[], Any], start: BinlogOffset, end: BinlogOffset,
                   parts: int) -> list[BinlogOffset]:
        min_bytes = self.mysql.stream_split_bytes
        # A short slice in one file stays whole without asking the server for its file sizes.
        if parts < 2 or (start.file == end.file and end.pos - start.pos < 2 * min_bytes):
            return []
        conn = connection()
        if any(b.server not in (None, server_identity(conn)) for b in (start, end)):
            return []  # a slice of another server (a failover): one reader finds it here by GTID
        return byte_cuts(start, end, binary_log_sizes(conn), parts, min_bytes, SKIP_COST)

    def max_batch_bytes(self) -> int | None:
        return self.mysql.max_batch_bytes

    def capped_end(self, connection: Callable[[], Any], start: BinlogOffset, end: BinlogOffset,
                   max_bytes: int) -> BinlogOffset:
        # A short slice in one file is not capped without asking the server for its file sizes.
        if start.file == end.file and end.pos - start.pos <= max_bytes:
            return end
        if not start.same_server(end):
            return end  # a slice of another server (a failover): its reader finds it here by GTID
        return capped_end(start, end, binary_log_sizes(connection()), max_bytes)

    # --- executors ------------------------------------------------------------------------

    def read_chunk(self, schema: TableSchema, split: SnapshotSplit,
                   on_low_watermark: Callable[[], None] | None = None) -> tuple[BinlogOffset, pa.Table]:
        """The LW, then the chunk's rows, under the table's definition at the LW.

        The definition is read from information_schema after the SELECT and compared with the
        one the SELECT used (the last one this dialect read, else ``schema``): equal, no DDL
        changed the table between the two reads, which enclose the LW and the SELECT. Otherwise
        (a DDL in between: the SELECT failed, or read columns the table no longer has at the LW)
        the chunk is read again under the new definition, with a new LW.

        Raises:
            SchemaChanged: the chunk key column is gone (renamed or dropped), or the table's
                definition kept changing over :data:`chunking.backfill.READ_ATTEMPTS` reads.
        """
        table = schema.table_id

        def lw_of(conn: Any) -> BinlogOffset:
            lw = low_watermark(conn)
            if on_low_watermark is not None:
                on_low_watermark()
            return lw

        with contextlib.closing(self.connect()) as conn:
            lw, rows, self._read_as[table] = read_as_defined(
                self._read_as.get(table, schema), split, functools.partial(lw_of, conn),
                functools.partial(self.select_chunk, split=split), functools.partial(load_table_schema, conn, table))
        return lw, rows

    def select_chunk(self, schema: TableSchema, split: SnapshotSplit) -> pa.Table:
        """The chunk's rows, read in one consistent SELECT (the second half of read_chunk)."""
        where, params = range_predicate(split.key_column, split.start, split.end)
        batches = list(fetch_arrow(self.settings, schema, where, params, backend=self.mysql.fetch_backend))
        return pa.Table.from_batches(batches, schema=schema.arrow_schema())

    def key_order(self, column: Column, conn: Any) -> KeyOrder:
        return KeyOrder(column, conn)

    def log_reader(self, reader_id: int, tables: Sequence[TableSchema],
                   follow: Sequence[TableSchema] = ()) -> MySqlLogReader:
        return MySqlLogReader(self, reader_id, {t.table_id: t for t in tables}, {t.table_id: t for t in follow})

    def reader_ids(self) -> list[int]:
        return list(ServerIdRange.parse(self.mysql.server_id).ids)

    def snapshot_source(self, table: TableId, high_watermark: Any, ts_ms: int) -> dict[str, Any]:
        hw: BinlogOffset = high_watermark
        # as Debezium's snapshot reads: server id 0, no GTID, the position the read stands for
        return source_block(self.connector, self.mysql.name, table, ts_ms, "true",
                            {"server_id": 0, "gtid": None, "file": hw.file, "pos": hw.pos, "row": 0})


@runtime_checkable
class JsonStore(Protocol):
    """The part of the job's state directory the walk hints use (``cdc.spark.state.StateStore``)."""

    def read_json(self, rel: str) -> Any: ...

    def write_json(self, rel: str, value: Any) -> None: ...


@runtime_checkable
class HintStore(JsonStore, Protocol):
    """The part of the job's state directory that deleting walk hints uses."""

    def file_names(self, rel: str) -> list[str]: ...

    def delete(self, rel: str) -> None: ...


def _hint_dir(server: str | None) -> str:
    return f"binlog_cuts/{server or 'unknown'}"


def _hint_path(cut: BinlogOffset) -> str:
    return f"{_hint_dir(cut.server)}/{cut.file}.{cut.pos}.json"


def _hint_before(name: str, here: BinlogOffset) -> bool:
    """Whether ``name`` is the hint of a cut before ``here`` (or a temporary file that a crashed
    write of one left); False for any other name."""
    stem, json_, _ = name.partition(".json")
    file, _, pos = stem.rpartition(".")
    try:
        return bool(json_) and BinlogOffset(file, int(pos)).is_before(here)
    except ValueError:  # not a hint's name, or another binlog's
        return False


def _matching(visible: list[TableId], patterns: Sequence[str]) -> list[TableId]:
    compiled = [re.compile(p) for p in patterns]
    matched = [t for t in visible if any(p.fullmatch(str(t)) for p in compiled)]
    if not matched:
        sample = ", ".join(map(str, visible[:10])) or "none"
        raise ConfigError(f"source.tables {list(patterns)} matched no table. Tables the CDC user can see: "
                          f"{sample}{' ...' if len(visible) > 10 else ''}. Patterns are regexes on "
                          "'database.table' (e.g. 'shop\\\\..*')", tables=list(patterns))
    return matched


class MySqlLogReader:
    """The binlog of some tables, read with one server id (executor; a context manager).

    Args:
        dialect: the dialect (connection settings, source name).
        server_id: this reader's replica id.
        schemas: the tables read.
        follow: tables whose DDL the reader follows into the schema history, rows not read.
    """

    def __init__(self, dialect: MySqlDialect, server_id: int, schemas: dict[TableId, TableSchema],
                 follow: dict[TableId, TableSchema] | None = None) -> None:
        self.dialect = dialect
        self.schemas = schemas
        self.rows_of = tuple(sorted(schemas))
        config = BinlogReaderOptions(connection=dialect.settings, server_id=server_id,
                                    tables=tuple(sorted({*schemas, *(follow or {})})),
                                    history=dialect.history_store,
                                    behavior=behavior(dialect.mysql.schema_change.behavior))
        self.reader = MySqlBinlogReader(config)

    def __enter__(self) -> MySqlLogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()

    def changes(self, start: BinlogOffset, end: BinlogOffset,
                decode_from: BinlogOffset | None = None) -> Iterator[ChangeEvent]:
        """The changes in ``(start, end]``, one per row (the backfill of snapshot chunks), each
        decoded with the schema version in force at it; the binlog before ``decode_from`` is
        walked for its DDL only (nothing decoded)."""
        here = self.reader.server_identity()
        for bound in (start, end):
            if bound.server not in (None, here):
                raise InvalidBinlogPosition(
                    f"a snapshot chunk's log range {start}..{end} was read on server {bound.server}, and "
                    f"the source is now server {here} (a failover while the chunk was in flight): its "
                    "backfill compares binlog positions of one server. Point the job back at the old "
                    "server until its snapshot finishes, or take a new snapshot (a new checkpoint, state "
                    "directory and sink path)", position=str(bound), server=here)
        if start.cut:  # a capped batch's end: from the first transaction after it, when known
            start = self.dialect.walk_hint(start) or start
        if decode_from is not None and start.is_before(decode_from):
            upto = decode_from if decode_from.is_before(end) else end
            for _ in self.reader.read(start, upto, tables=()):
                pass  # nothing is decoded; the walk records the DDL on the way
            start = upto
        yield from self.reader.read(start, end, tables=self.rows_of)

    def chunk_version(self, table: TableId, low: BinlogOffset, high: BinlogOffset, read: pa.Schema) -> ChunkVersion:
        """The version in force at ``low`` (the binlog holds every DDL, so the history knows it
        once the walk passed ``low``) and the versions whose DDL lies in ``(low, high)``."""
        history = self.reader.history
        at = _offset_key(low)
        version = history.at(table, at)
        if version is None or not same_columns(version.schema, read):
            have = [f"{f.name} {f.type}" for f in version.schema.arrow_schema()] if version is not None else "none"
            raise SchemaChanged(
                f"a snapshot chunk of {table} read at {low} has columns {[f'{f.name} {f.type}' for f in read]}, "
                f"but the schema history has {have} there: a DDL changed the table where the binlog does not "
                "show it (made before the job started, or with sql_log_bin=0). Take a new snapshot (a new "
                "checkpoint, state directory and sink path)", table=str(table), position=str(low))
        later = tuple(v for v in history.versions(table) if v.key > at and _version_offset(v).is_before(high))
        return ChunkVersion(version, _version_offset(later[0]) if later else None, later)

    def version_at(self, table: TableId, offset: BinlogOffset) -> SchemaVersion | None:
        return self.reader.history.at(table, _offset_key(offset))

    def snapshot_rows(self, table: TableId, version: SchemaVersion, rows: pa.Table, ts_ms: int) -> pa.Table:
        history = self.reader.history
        sink = history.sink_schema(table, version.version)
        if sink is not version.schema:
            rows = project_rows(rows, sink)
        return with_schema(rows, sink, version.version, self._schema_change(table, version, ts_ms, 0))

    def change_rows(self, start: BinlogOffset, end: BinlogOffset,
                    decode_from: BinlogOffset | None = None) -> Iterator[ChangeRows]:
        """Change rows per table, built column-wise from the rows events of up to
        :data:`STREAM_ROWS` changes at a time.

        A DDL of a table read here that makes a schema version is handed over where it lies, as
        change rows without a row (:meth:`_ddl_rows`), so the sinks follow it at once rather than
        with the table's next change. Of the readers of a cut slice, the one whose piece holds the
        statement hands it over (the rule rows events follow)."""
        pending: list[EventRows] = []
        rows = 0
        ddl: list[DdlVersion] = []  # passed by the walk, not handed over yet
        handed: set[tuple[TableId, int]] = set()
        walk_from = self.dialect.walk_hint(start) if start.cut else None
        for event in self.reader.read_event_rows(start, end, self.rows_of, decode_from=decode_from,
                                                 walk_from=walk_from):
            ddl += self.reader.take_ddl()  # every DDL before this event is known by now
            at = ChangePosition(event.file, event.pos, event.first_row).sort_key()
            if ddl and ddl[0].position.sort_key() < at:  # the rows before the DDL go first
                before = [d for d in ddl if d.position.sort_key() < at]
                ddl = ddl[len(before):]
                yield from self._rows(pending)
                yield from self._ddl_rows(before, handed)
                pending, rows = [], 0
            pending.append(event)
            rows += event.num_rows
            if rows >= STREAM_ROWS:
                yield from self._rows(pending)
                pending, rows = [], 0
        if pending:
            yield from self._rows(pending)
        yield from self._ddl_rows(ddl + self.reader.take_ddl(), handed)
        if end.cut:
            self.dialect.save_walk_hint(end, self.reader.next_transaction(end))

    def _rows(self, events: list[EventRows]) -> Iterator[ChangeRows]:
        """Per table and schema version (in log order), the change rows in the sinks' schema,
        tagged with it (:func:`cdc.model.history.with_schema`)."""
        by_table: dict[TableId, list[list[EventRows]]] = {}
        for event in events:
            runs = by_table.setdefault(event.table_id, [])
            if runs and runs[-1][0].version == event.version:
                runs[-1].append(event)
            else:
                runs.append([event])
        history = self.reader.history
        for table, runs in by_table.items():
            for mine in runs:
                first, version = mine[0], mine[0].version
                source = history.versions(table)[version].schema
                rows = event_rows_envelope(source, mine, name=self.dialect.mysql.name,
                                           connector=self.dialect.connector,
                                           include_query=self.dialect.mysql.include_query)
                sink = history.sink_schema(table, version)
                if sink is not source:
                    rows = project_rows(rows, sink)
                change = self._schema_change(table, history.versions(table)[version], first.ts_ms,
                                             first.server_id)
                yield ChangeRows(table, with_schema(rows, sink, version, change),
                                 ChangePosition(first.file, first.pos, first.first_row).sort_key())

    def _ddl_rows(self, made: list[DdlVersion], handed: set[tuple[TableId, int]]) -> Iterator[ChangeRows]:
        """For each version a DDL of a table read here made: change rows without a row, in the new
        sink schema, tagged with the version and its DDL (:func:`cdc.model.history.with_schema`),
        at the statement's position. Once per version and read (a resumed connection passes a
        statement again)."""
        history = self.reader.history
        for ddl in made:
            table, version = ddl.table, ddl.version
            if table not in self.schemas or (table, version.version) in handed:
                continue
            handed.add((table, version.version))
            sink = history.sink_schema(table, version.version)
            change = self._schema_change(table, version, ddl.ts_ms, ddl.server_id, ddl.gtid)
            yield ChangeRows(table, with_schema(envelope_schema(sink).empty_table(), sink, version.version, change),
                             ddl.position.sort_key())

    def _schema_change(self, table: TableId, version: SchemaVersion, ts_ms: int,
                       server_id: int, gtid: str | None = None) -> SchemaChange | None:
        """The DDL that made ``version`` (None for version 0), its source block at the statement;
        ``ts_ms``, ``server_id`` and ``gtid`` are the statement's when the read met it, else the first
        change's under it (the history keeps no time per statement). ``source.query`` holds the
        statement with ``include_query`` only, as in Debezium."""
        if version.version == 0 or version.ddl is None:
            return None
        file, _, pos = version.position.rpartition(":")
        source = source_block(self.dialect.connector, self.dialect.mysql.name, table, ts_ms, "false",
                              {"server_id": server_id, "gtid": gtid, "file": file, "pos": int(pos), "row": 0,
                               "query": version.ddl if self.dialect.mysql.include_query else None})
        return SchemaChange(version.version, version.ddl, source, version.schema)


class MySqlSplitQueries:
    """The chunk splitter's queries for one table, on a driver connection (SELECT suffices).

    The connection's UTC session time zone makes TIMESTAMP boundaries naive UTC.
    """

    def __init__(self, conn: Any, table: TableId, column: Column) -> None:
        self._conn = conn
        self._table = table
        self._k = sql_ident(column.name)
        self._t = sql_table(table)
        self._column = column

    def key_range(self) -> tuple[KeyValue, KeyValue]:
        with self._conn.cursor() as cur:
            cur.execute(f"SELECT MIN({self._k}), MAX({self._k}) FROM {self._t}", ())
            lo, hi = cur.fetchone()
        return lo, hi

    def approximate_rows(self) -> int:
        with self._conn.cursor() as cur:
            cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (self._table.db, self._table.table))
            row = cur.fetchone()
        return int(row[0] or 0) if row else 0

    def chunk_end(self, lower: KeyValue, size: int) -> tuple[KeyValue, int, bool]:
        k, t = self._k, self._t
        sql = (f"SELECT MAX({k}), COUNT(*), MAX({k}) > %s FROM (SELECT {k} FROM {t} WHERE {k} >= %s "
               f"ORDER BY {k} LIMIT {int(size)}) AS T")
        with self._conn.cursor() as cur:
            cur.execute(sql, (sql_param(lower), sql_param(lower)))
            end, count, moved = cur.fetchone()
        return end, int(count), bool(moved)

    def next_key_above(self, lower: KeyValue) -> KeyValue:
        with self._conn.cursor() as cur:
            cur.execute(f"SELECT MIN({self._k}) FROM {self._t} WHERE {self._k} > %s", (sql_param(lower),))
            return cur.fetchone()[0]

    def key_is_indexed(self) -> bool:
        with self._conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1 LIMIT 1",
                        (self._table.db, self._table.table, self._column.name))
            return cur.fetchone() is not None


def behavior(configured: str) -> Behavior:
    """The reader's behaviour for ``source.schema_change.behavior`` (validated by the config)."""
    if configured not in ("evolve", "try_evolve", "lenient", "ignore", "exception"):
        raise ConfigError(f"source.schema_change.behavior: {configured!r} is not one of 'evolve', "
                          "'try_evolve', 'lenient', 'ignore', 'exception'", key="source.schema_change.behavior")
    return configured  # type: ignore[return-value]


def _offset_key(offset: BinlogOffset) -> tuple[int, int]:
    """An offset as a schema history key (file number, byte)."""
    return int(offset.file.rsplit(".", 1)[1]), offset.pos


def _version_offset(version: SchemaVersion) -> BinlogOffset:
    """Where a version starts as an offset: right after its DDL statement, the end of that
    statement's transaction (a DDL commits implicitly)."""
    file = version.position.rpartition(":")[0]
    return BinlogOffset(file, version.key[1])
