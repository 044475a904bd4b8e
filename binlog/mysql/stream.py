"""One replication connection and the walk along its events (used by ``binlog/mysql.py``).

:func:`open_library_stream` starts mysql-replication's ``BinLogStreamReader`` at a file/position;
:class:`BinlogStream` walks its events, keeps track of where it stands (file, position, the last
transaction boundary, the last change handed out) and hands out the wanted rows events
(:meth:`BinlogStream.rows_events`), which :meth:`BinlogStream.changes` turns into ChangeEvents
row by row and ``binlog/mysql/columnar.py`` into column-wise event rows.

Positions come from event headers: ``log_pos`` is where the next event starts, and an event
starts ``event_size`` bytes before it. Artificial events the server sends on connect (a rotate to
the start file and its format description) have ``log_pos`` 0 and only set the file.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    MariadbAnnotateRowsEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    RowsQueryLogEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    RowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from binlog.mysql.connection import Connection, Endpoint
from binlog.mysql.convert import RowConverter
from binlog.mysql.event_rows import EventOp, change_source
from binlog.mysql.positions import BinlogOffset, ChangePosition
from cdc.model.errors import BinlogNotConfigured
from cdc.model.events import ChangeEvent
from cdc.model.schema import TableId

if TYPE_CHECKING:
    from binlog.mysql.rows_decode import (
        RowsDecoder,  # imports numba: only where event rows are read
    )

_COM_BINLOG_DUMP = 0x12
_BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02
_ANONYMOUS_GTID_LOG_EVENT = 34
_TRANSACTION_PAYLOAD_EVENT = 40
_OPS: dict[type, EventOp] = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}

# (table, binlog table id, binlog column names, where) -> the converter for that table's rows
ConverterLookup = Callable[[TableId, int, tuple["str | None", ...], ChangePosition], RowConverter]


@dataclass(frozen=True)
class QueryAt:
    """A query event other than BEGIN/COMMIT (DDL, among others) that the walk passes.

    Attributes:
        db: the statement's default database.
        sql: the statement.
        file: the binlog file.
        start: where the event starts.
        end: where the next event starts.
        ts_ms: when the server wrote it (epoch milliseconds).
        server_id: the server id that wrote it.
        handed_out: the event lies in the piece the read hands out (:meth:`BinlogStream.decode_from`,
            the rule rows events follow), not in the part walked over before it: of the readers of
            a cut slice, exactly one sees it handed out.
        gtid: the GTID of the statement's transaction, when the server logs GTIDs.
    """

    db: str
    sql: str
    file: str
    start: int
    end: int
    ts_ms: int
    server_id: int
    handed_out: bool
    gtid: str | None = None


# a query event, in binlog order, before the events after it
QueryHook = Callable[[QueryAt], None]
# (file index, rows event start, row index): where a change sits, comparable
ChangeKey = tuple[int, int, int]


class StreamLost(Exception):
    """The replication connection dropped (killed, reset, timed out); reopen it at a boundary.

    mysql-replication would silently reconnect at the last event it read, which may lie inside
    a transaction; MariaDB then skips to the next transaction and the rest of this one is lost.
    So its reconnect is refused with this exception and the reader resumes safely instead.
    """


def open_library_stream(connection: Endpoint, server_id: int,
                        tables: tuple[TableId, ...], at: BinlogOffset, read_timeout: float,
                        annotate_rows: bool) -> BinLogStreamReader:
    """Start a non-blocking binlog dump at ``at`` (the connection opens on the first read).

    Args:
        connection: server and CDC user.
        server_id: the replica id to register with.
        tables: the tables whose table maps and rows mysql-replication should decode.
        at: a position between transactions.
        read_timeout: socket read timeout in seconds.
        annotate_rows: ask MariaDB for Annotate_rows events (the SQL of each change).
    """
    connects = 0

    def connect(**settings: Any) -> pymysql.connections.Connection:
        nonlocal connects
        if "db" in settings:  # the library's schema connection; pymysql renamed "db"
            settings["database"] = settings.pop("db")
        else:
            connects += 1
            if connects > 1:
                raise StreamLost(f"replication connection to {connection.address} was lost")
        return _DumpConnection(annotate_rows=annotate_rows, **settings)

    return BinLogStreamReader(
        connection_settings={
            "host": connection.host, "port": connection.port, "user": connection.user,
            "password": connection.password, "charset": "utf8mb4",
            "connect_timeout": connection.connect_timeout, "read_timeout": read_timeout,
            **connection.tls_kwargs(),
        },
        server_id=server_id, resume_stream=True, blocking=False, log_file=at.file,
        log_pos=at.pos, only_schemas=sorted({t.db for t in tables}),
        only_tables=sorted({t.table for t in tables}), filter_non_implemented_events=False,
        enable_logging=False, pymysql_wrapper=connect, freeze_schema=True,
    )


def locate_gtid(connection: Endpoint, server_id: int, gtid: str, mariadb: bool,
                read_timeout: float = 60.0) -> BinlogOffset | None:
    """Where the first transaction after the GTID set ``gtid`` starts in this server's binlog.

    The server finds it: a GTID dump (MariaDB ``@slave_connect_state``, MySQL
    ``COM_BINLOG_DUMP_GTID``) sends only the transactions not in the set, so the first GTID event
    it sends starts there. Runs where the caller runs (a replication connection, non-blocking).

    Args:
        connection: server and CDC user.
        server_id: the replica id to register with (no other reader may use it meanwhile).
        gtid: the set, in the server's own form.
        mariadb: the server is MariaDB.
        read_timeout: socket read timeout in seconds.

    Returns:
        The position (the transaction's GTID event), or None when no transaction follows the set
        (the server stands exactly at it, or lacks some of it: the caller checks).

    Raises:
        pymysql.err.OperationalError: the server cannot start there (1236: the set is not in its
            binlog, purged or diverged).
    """
    def connect(**settings: Any) -> pymysql.connections.Connection:
        if "db" in settings:
            settings["database"] = settings.pop("db")
        return _DumpConnection(annotate_rows=False, **settings)

    lib = BinLogStreamReader(
        connection_settings={
            "host": connection.host, "port": connection.port, "user": connection.user,
            "password": connection.password, "charset": "utf8mb4",
            "connect_timeout": connection.connect_timeout, "read_timeout": read_timeout,
        },
        server_id=server_id, blocking=False, auto_position=gtid, is_mariadb=mariadb,
        only_events=[RotateEvent, GtidEvent, MariadbGtidEvent], enable_logging=False,
        pymysql_wrapper=connect, freeze_schema=True)
    try:
        file = None
        for ev in lib:
            if isinstance(ev, RotateEvent):
                file = ev.next_binlog
            elif file is not None:  # the first transaction the server sends
                return BinlogOffset(file, ev.packet.log_pos - ev.packet.event_size)
        return None
    finally:
        with contextlib.suppress(Exception):
            lib.close()


class _DumpConnection(Connection):
    """A connection that asks MariaDB for Annotate_rows events (and shares the TLS context).

    MariaDB sends Annotate_rows only when the COM_BINLOG_DUMP request sets
    BINLOG_SEND_ANNOTATE_ROWS_EVENT; mysql-replication sets that flag only when starting from a
    GTID, never from file/position.
    """

    def __init__(self, annotate_rows: bool, **settings: Any) -> None:
        self._annotate_rows = annotate_rows
        super().__init__(**settings)

    def _write_bytes(self, data: bytes) -> None:
        # packet: 3-byte length, 1-byte sequence, command, 4-byte position, 2-byte flags, ...
        if self._annotate_rows and len(data) >= 11 and data[4] == _COM_BINLOG_DUMP:
            flags = struct.unpack_from("<H", data, 9)[0] | _BINLOG_SEND_ANNOTATE_ROWS_EVENT
            data = data[:9] + struct.pack("<H", flags) + data[11:]
        super()._write_bytes(data)  # type: ignore[misc]  # private in the stubs


class BinlogStream:
    """Walks one open binlog dump: where it stands and the transaction it is in.

    Args:
        lib: the library stream, positioned at ``at``.
        at: where it starts (a transaction boundary).
        converter: finds the RowConverter for a table map.
        skip_through: changes at or before this key were already handed out (after a resume).
        on_query: called with every query event other than BEGIN/COMMIT that the walk passes
            (the schema history reads DDL from them), before the events after it.
    """

    def __init__(self, lib: BinLogStreamReader, at: BinlogOffset, converter: ConverterLookup,
                 skip_through: ChangeKey | None = None, on_query: QueryHook | None = None) -> None:
        self.lib = lib
        self.file, self.pos = at.file, at.pos  # pos: where the next event starts
        self.boundary = at  # the start of the transaction being read (a safe resume point)
        self.eof = False  # the server ended the stream (end of its binlog)
        self.usable = True  # False once an event beyond a slice end was read
        self.last: ChangeKey | None = skip_through  # the last change handed out
        self.hold: BinlogOffset | None = None  # restart here: rows read but not handed out yet
        self.next_transaction: BinlogOffset | None = None  # where the walk past a cut end stopped
        self._skip = skip_through
        self._index = _file_index(at.file)
        self._txn = (self._index, at.pos)  # where the transaction being read began (``boundary``)
        self._first = self._txn  # rows events (or transactions, _by_txn) before this are not wanted
        self._by_txn = False
        self._converter = converter
        self._on_query = on_query
        self._maps: dict[int, TableMap] = {}  # by binlog table id, like the library's
        self._gtid: str | None = None
        self._thread: int | None = None
        self._query: str | None = None

    def continue_at(self, offset: BinlogOffset) -> bool:
        """Whether the stream stands exactly at ``offset`` and can read on from there.

        If so, ``offset`` (a slice start, hence a transaction boundary) becomes the resume point,
        so a later resume never goes back before the new slice.
        """
        if self.usable and not self.eof and self.file == offset.file and self.pos == offset.pos:
            self._begin(offset)
            return True
        return False

    def decode_from(self, offset: BinlogOffset) -> None:
        """Hand out only the rows events that start at or after ``offset``, or for a cut the rows
        events of the transactions that begin at or after it (any byte position; the events
        before it are still walked, for their table maps and context)."""
        self._first, self._by_txn = (_file_index(offset.file), offset.pos), offset.cut

    def _begin(self, at: BinlogOffset) -> None:
        """A transaction (or a file) begins at ``at``: the resume point and owner of its rows."""
        self.boundary = at
        self._txn = (self._index, at.pos)

    def resume_offset(self) -> BinlogOffset:
        """Where mysql-replication stopped reading (it also counts events it filtered out)."""
        return BinlogOffset(self.lib.log_file, self.lib.log_pos)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.lib.close()

    def restart_point(self) -> BinlogOffset:
        """Where to reopen after a lost connection: the transaction of the oldest change held.

        That is the current transaction's start, or an earlier one while a reader holds rows it
        has not handed out yet (``hold``, set by the column-wise reader, which batches rows events).
        """
        return self.hold if self.hold is not None else self.boundary

    def changes(self, end: BinlogOffset, wanted: frozenset[TableId]) -> Iterator[ChangeEvent]:
        """Yield the changes before ``end``; return at ``end`` or when the server's binlog ends.

        Raises:
            StreamLost: the connection dropped.
            BinlogNotConfigured: an event the reader cannot decode faithfully.
        """
        for ev, at in self.rows_events(end, wanted):
            yield from self.row_changes(ev, at)

    def rows_events(self, end: BinlogOffset,
                    wanted: frozenset[TableId]) -> Iterator[tuple[Any, RowsAt]]:
        """Walk to ``end`` (or the binlog's end), yielding the wanted rows events, undecoded.

        Each comes with where it sits and its context; the rows of tables not wanted are never
        decoded, nor are events whose rows were all handed out before a resume.

        Raises:
            StreamLost: the connection dropped.
            BinlogNotConfigured: an event the reader cannot decode faithfully.
        """
        end_key, cut = (_file_index(end.file), end.pos), end.cut
        while True:
            ev = self.lib.fetchone()
            if ev is None:
                self.eof = True
                return
            header = ev.packet
            if header.log_pos == 0:  # artificial event sent on connect
                if isinstance(ev, RotateEvent):
                    self._rotate(ev)
                continue
            start = header.log_pos - header.event_size
            if (self._index, start) >= end_key and (not cut or _begins_transaction(ev)):
                self.usable = False  # read past end: this connection cannot continue from end
                if cut:  # the first transaction that begins at or after the cut
                    self.next_transaction = BinlogOffset(self.file, start)
                return
            if isinstance(ev, RowsEvent):
                owner = self._txn if self._by_txn else (self._index, start)
                at = self._rows_at(ev, start, wanted) if owner >= self._first else None
                if at is not None:
                    yield ev, at
            elif isinstance(ev, RotateEvent):
                self._rotate(ev)
                if (self._index, self.pos) >= end_key:
                    self.next_transaction = self.boundary if cut else None  # a file's start
                    return
                continue
            else:
                self._track(ev, start)
            self.pos = header.log_pos
            if not cut and (self._index, self.pos) >= end_key:
                return  # (a cut end reads its last transaction on, to the next one's start)

    def _rows_at(self, ev: Any, start: int, wanted: frozenset[TableId]) -> RowsAt | None:
        table_map = self._maps.get(ev.table_id)
        if table_map is None or table_map.table_id not in wanted:
            return None  # rows are decoded lazily: skipping costs nothing
        table_id = table_map.table_id
        if table_map.converter is None:
            table_map.converter = self._converter(
                table_id, ev.table_id, table_map.names, ChangePosition(self.file, start, 0))
        file, index, op = self.file, self._index, _OPS.get(type(ev))
        if op is None:
            raise BinlogNotConfigured(
                f"partial JSON update of {table_id} at {file}:{start}: set "
                "binlog_row_value_options='' so updates carry full after images",
                table=str(table_id), position=f"{file}:{start}")
        _require_full_image(ev, table_id, file, start)
        skip, skip_rows = self._skip, 0
        if skip is not None and (index, start) > skip[:2]:
            self._skip = skip = None
        if skip is not None:
            if (index, start) < skip[:2]:
                return None  # every row of it was handed out before the resume
            skip_rows = skip[2] + 1
        header = ev.packet
        return RowsAt(table_map, op, file, index, start, skip_rows, header.timestamp * 1000,
                      self._gtid, header.server_id, self._thread, self._query)

    def row_changes(self, ev: Any, at: RowsAt) -> Iterator[ChangeEvent]:
        """Decode a rows event row by row (mysql-replication, then ``RowConverter``)."""
        convert = at.table_map.converter
        assert convert is not None  # looked up by _rows_at
        table_id, file, index, start, op = at.table_map.table_id, at.file, at.index, at.start, at.op
        for i, row in enumerate(ev.rows):
            if i < at.skip_rows:
                continue
            before = after = None
            if op == "c":
                after = convert(row["values"], row["none_sources"])
            elif op == "d":
                before = convert(row["values"], row["none_sources"])
            else:
                before = convert(row["before_values"], row["before_none_sources"])
                after = convert(row["after_values"], row["after_none_sources"])
            self.last = (index, start, i)
            yield ChangeEvent(table_id, op, before, after, ChangePosition(file, start, i), at.ts_ms,
                              change_source(at.server_id, at.gtid, file, start, i, at.thread, at.query))

    def _track(self, ev: Any, start: int) -> None:
        """Follow table maps, transaction boundaries and context (GTID, thread, statement)."""
        if isinstance(ev, TableMapEvent):
            # With freeze_schema the library passes each table id's map once per stream (the
            # server assigns a new id when a table's definition changes); remember it for the
            # whole stream, whichever tables the current slice wants.
            names = tuple(c.name for c in ev.columns)
            self._maps[ev.table_id] = TableMap(TableId(ev.schema, ev.table), names, ev.columns)
        elif isinstance(ev, (GtidEvent, MariadbGtidEvent)):
            self._begin(BinlogOffset(self.file, start))
            self._gtid, self._thread, self._query = ev.gtid, None, None
        elif isinstance(ev, QueryEvent):
            if ev.query == "BEGIN":
                self._thread = ev.slave_proxy_id
            elif ev.query == "COMMIT":
                self._gtid, self._thread, self._query = None, None, None
            elif self._on_query is not None:
                db = ev.schema.decode("utf-8", "replace") if isinstance(ev.schema, bytes) else str(ev.schema)
                header = ev.packet
                owner = self._txn if self._by_txn else (self._index, start)
                self._on_query(QueryAt(db, ev.query, self.file, start, header.log_pos, header.timestamp * 1000,
                                       header.server_id, owner >= self._first, self._gtid))
        elif isinstance(ev, RowsQueryLogEvent):
            self._query = ev.query
        elif isinstance(ev, MariadbAnnotateRowsEvent):
            self._query = ev.sql_statement.decode("utf-8", "replace")
        elif isinstance(ev, XidEvent):
            self._gtid, self._thread, self._query = None, None, None
        elif isinstance(ev, NotImplementedEvent):
            self._unknown(ev, start)

    def _unknown(self, ev: Any, start: int) -> None:
        kind = ev.packet.event_type
        if kind == _ANONYMOUS_GTID_LOG_EVENT:  # MySQL with gtid_mode=OFF: a transaction starts
            self._begin(BinlogOffset(self.file, start))
            self._gtid, self._thread, self._query = None, None, None
        elif kind == _TRANSACTION_PAYLOAD_EVENT:
            raise BinlogNotConfigured(
                f"compressed transaction at {self.file}:{start}: set "
                "binlog_transaction_compression=OFF (my.cnf and SET GLOBAL)",
                position=f"{self.file}:{start}")

    def _rotate(self, ev: Any) -> None:
        self.file, self.pos = ev.next_binlog, ev.position
        self._index = _file_index(self.file)
        self._begin(BinlogOffset(self.file, self.pos))
        if ev.timestamp != 0:  # a real rotation; the library forgets its table maps here too
            self._maps.clear()


class TableMap:
    """A binlog table map: which table, its columns, and (once needed) how to decode its rows.

    Attributes:
        table_id: the table.
        names: the binlog's column names.
        columns: mysql-replication's column descriptions (binlog type and metadata).
        converter: the per-row converter, looked up at the first wanted rows event.
        decoder: the column-wise decoder (``binlog/mysql/rows_decode.py``) or why there is none;
            decided once, by the column-wise reader.
    """

    __slots__ = ("columns", "converter", "decoder", "names", "table_id")

    def __init__(self, table_id: TableId, names: tuple[str | None, ...],
                 columns: list[Any]) -> None:
        self.table_id = table_id
        self.names = names
        self.columns = columns
        self.converter: RowConverter | None = None
        self.decoder: RowsDecoder | str | None = None


@dataclass(frozen=True)
class RowsAt:
    """A wanted rows event: its table map, operation, where it sits and its context.

    Attributes:
        skip_rows: leading rows already handed out before a resume (not to be handed out again).
    """

    table_map: TableMap
    op: EventOp
    file: str
    index: int  # the file's number, for ordering
    start: int
    skip_rows: int
    ts_ms: int
    gtid: str | None
    server_id: int
    thread: int | None
    query: str | None


def _require_full_image(ev: Any, table_id: TableId, file: str, start: int) -> None:
    """Refuse rows logged without every column (binlog_row_image changed at runtime)."""
    full = _full_bitmap(ev.number_of_columns)
    present = [ev.columns_present_bitmap]
    if isinstance(ev, UpdateRowsEvent):
        present.append(ev.columns_present_bitmap2)
    if any(bytes(p) != full for p in present):
        raise BinlogNotConfigured(
            f"rows of {table_id} at {file}:{start} lack columns: they were written with "
            "binlog_row_image other than FULL. Set binlog_row_image=FULL (my.cnf and SET GLOBAL), "
            "restart the writers and take a new snapshot",
            table=str(table_id), position=f"{file}:{start}")


def _begins_transaction(ev: Any) -> bool:
    """Whether ``ev`` is the first event of a transaction (its GTID event, or MySQL's anonymous one)."""
    if isinstance(ev, (GtidEvent, MariadbGtidEvent)):
        return True
    return isinstance(ev, NotImplementedEvent) and ev.packet.event_type == _ANONYMOUS_GTID_LOG_EVENT


@functools.lru_cache(maxsize=64)
def _full_bitmap(n: int) -> bytes:
    return b"\xff" * (n // 8) + (bytes([(1 << (n % 8)) - 1]) if n % 8 else b"")


def _file_index(file: str) -> int:
    return int(file.rsplit(".", 1)[1])
