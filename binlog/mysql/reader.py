"""The MySQL / MariaDB change-log reader for bounded binlog ranges (Flink CDC's binlog split).

:class:`MySqlBinlogReader` yields the row changes of a set of tables that lie in ``(start, end]``,
two :class:`~cdc.model.positions.BinlogOffset` points between transactions. It runs where the split is
read (a Spark executor task); open it there, never on the driver before pickling.

How a slice is read:

* The reader connects as a replica with the configured server id, in non-blocking mode, from
  ``start`` (mysql-replication's ``BinLogStreamReader``, file/position mode).
* Every event's header says where it ends (``log_pos``); it starts ``event_size`` bytes earlier.
  The reader stops right after the event that ends at ``end``, so it never reads or waits for
  anything beyond ``end``. The connection then stands exactly at ``end`` and the next call with
  ``start == end`` continues on it; any other start reopens the stream.
* If the server says "end of binlog" before ``end`` (it can report a position a moment before
  the dump thread may send it), the reader reopens and retries for ``end_wait_timeout`` seconds.
* If the connection drops (killed, reset, or another replica registered with the same server
  id), the reader reopens at the start of the interrupted transaction and skips the changes it
  already yielded: no loss, no duplicates. mysql-replication's own reconnect is refused because
  it resumes mid-transaction, where MariaDB skips the rest of the transaction.
* A change's position is (file, start of its rows event, row index inside the event), so
  ``ChangePosition.in_slice(start, end)`` holds for every change yielded.

:meth:`MySqlBinlogReader.read` yields one ChangeEvent per row; :meth:`MySqlBinlogReader.read_event_rows`
yields the same changes as one :class:`~binlog.mysql.event_rows.EventRows` (Arrow tables) per rows event,
decoded column-wise by numba kernels (``binlog/mysql/columnar.py``, ``binlog/mysql/rows_decode.py``), about
25x faster. Both share the walk, the resume and the end handling.

Values are typed by the schema history (:mod:`cdc.model.history`): the table's version in force at
the rows event's position. Version 0 is the schema the job started with (or, for a reader without a
stored history, the table's information_schema description when its rows first appear); the DDL in
the binlog's query events (``binlog/mysql/ddl.py``) makes the next versions as the walk passes
them. The binlog's own column names (``binlog_row_metadata=FULL``) are the cross-check: when they
differ from the version's, the rows were written under a definition the history does not know and
:class:`SchemaChanged` says so. With ``schema_change.behavior: exception`` the first DDL that
changes a captured table stops the read, naming the statement.

The server facts (checks, current offset, low watermark, server id ranges) live in
``binlog/mysql_server.py`` and are re-exported here; the walk along one connection's events is
``binlog/mysql_stream.py``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pymysql

from binlog.mysql.connection import Endpoint
from binlog.mysql.convert import RowConverter
from binlog.mysql.ddl import TableDdl, is_ddl, may_name, parse_ddl
from binlog.mysql.event_rows import EventRows
from binlog.mysql.positions import BinlogOffset, ChangePosition, GtidSet
from binlog.mysql.server import (
    MAX_SERVER_ID,
    REPLICATION_SLAVE,
    ServerIdRange,
    ServerInfo,
    binary_logs,
    check_server,
    current_offset,
    ensure_available,
    flavor,
    low_watermark,
    missing_privilege,
    purged,
    require_gtids,
    server_identity,
)
from binlog.mysql.stream import BinlogStream, QueryAt, StreamLost, locate_gtid, open_library_stream
from binlog.mysql.types import load_table_schema
from cdc.model.errors import (
    BinlogNotConfigured,
    ConfigError,
    InvalidBinlogPosition,
    SchemaChanged,
    SourceUnreachable,
    UnsupportedDdl,
)
from cdc.model.events import ChangeEvent
from cdc.model.history import Behavior, HistoryStore, SchemaHistory, SchemaVersion
from cdc.model.schema import TableId, TableSchema

__all__ = [
    "BinlogReaderOptions", "EventRows", "InvalidBinlogPosition", "MySqlBinlogReader",
    "SchemaChanged",
    "ServerIdRange", "ServerInfo", "binary_logs", "check_server", "current_offset",
    "ensure_available", "low_watermark",
]

log = logging.getLogger(__name__)

_ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
_ER_SPECIFIC_ACCESS_DENIED = 1227
_ER_SLAVE_SAME_ID = 4052  # MariaDB; MySQL reports 1236 with the same words
_CONNECTION_LOST = (2003, 2005, 2006, 2013)
_MAX_RESUMES = 5  # lost connections tolerated within one slice


_SKIP_AHEAD_BYTES = 4 << 20  # read forward up to this far instead of reopening the stream

T = TypeVar("T")
# how one stream's events become what a read yields: ChangeEvents or ChangeBlocks
Walk = Callable[[BinlogStream, BinlogOffset, frozenset[TableId]], Iterator[T]]


@dataclass(frozen=True)
class DdlVersion:
    """A schema version made by a DDL that a read handed out (see :meth:`MySqlBinlogReader.take_ddl`).

    Attributes:
        table: the table it changed.
        version: the version it made (recorded then, or found recorded: a replay).
        position: where the statement's event starts (row 0), among the read's changes.
        ts_ms: when the server wrote the statement.
        server_id: the server id that wrote it.
        gtid: the statement's GTID, when the server logs GTIDs.
    """

    table: TableId
    version: SchemaVersion
    position: ChangePosition
    ts_ms: int
    server_id: int
    gtid: str | None = None


@dataclass(frozen=True)
class BinlogReaderOptions:
    """What one binlog reader needs: a small picklable value (no open connection).

    Attributes:
        connection: the server and the CDC user.
        server_id: this reader's replica id, taken from ``source.server_id``'s range; readers
            that run at the same time must use different ids.
        tables: the tables this reader may be asked for.
        end_wait_timeout: seconds to keep retrying when the server's binlog stream ends before
            the requested ``end`` (a position it reported must become readable).
        read_timeout: socket read timeout of the replication connection, in seconds.
        check_server: validate settings and privileges (:func:`check_server`) on first use.
        history: where the schema history persists (the job's state directory); None keeps it
            in this reader only.
        behavior: ``source.schema_change.behavior``.
    """

    connection: Endpoint
    server_id: int
    tables: tuple[TableId, ...]
    end_wait_timeout: float = 10.0
    read_timeout: float = 60.0
    check_server: bool = True
    history: HistoryStore | None = None
    behavior: Behavior = "lenient"

    def __post_init__(self) -> None:
        if not 1 <= self.server_id <= MAX_SERVER_ID:
            ServerIdRange(self.server_id, self.server_id)  # raises ConfigError naming the key
        if not self.tables:
            raise ValueError("a binlog reader needs at least one table")


class MySqlBinlogReader:
    """Reads bounded binlog slices ``(start, end]`` of some tables; reusable for many slices.

    Not thread-safe: use one reader per thread, each with its own server id. Close it (or use it
    as a context manager) to release its replication and query connections.

    Args:
        config: connection, server id and tables.
    """

    def __init__(self, config: BinlogReaderOptions) -> None:
        self.config = config
        self.stream_opens = 0  # replication streams opened (one COM_BINLOG_DUMP each)
        self.reconnects = 0  # streams resumed after their connection was lost
        self._tables = frozenset(config.tables)
        self._table_names = frozenset(t.table.lower() for t in self._tables)  # may_name's filter
        self._conn: Any = None
        self._flavor: str | None = None
        self._server: str | None = None  # the server's identity (server_identity)
        self._found: dict[tuple[str | None, str, int], BinlogOffset] = {}  # offsets found by GTID
        self._after_cut: dict[tuple[str | None, str, int], BinlogOffset] = {}  # next_transaction
        self._stream: BinlogStream | None = None
        self._converters: dict[tuple[TableId, int], RowConverter] = {}  # by schema version
        self._ddl: list[DdlVersion] = []  # versions made by DDL the current read handed out
        self.history = SchemaHistory(config.history, config.behavior)

    def __enter__(self) -> MySqlBinlogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the replication stream and the query connection (the reader may be reused)."""
        self._drop_stream()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def read(self, start: BinlogOffset, end: BinlogOffset,
             tables: Collection[TableId] | None = None) -> Iterator[ChangeEvent]:
        """Yield the changes of ``tables`` (default: all configured) that lie in ``(start, end]``.

        Changes come in binlog order, one per row (a multi-row event gives rows 0..n-1).
        Stop iterating early and the stream is closed (the next read reopens it).

        Raises:
            ValueError: ``end`` is before ``start``, or a table is not configured.
            BinlogPurged: the server no longer has ``start``'s binlog file.
            BinlogNotConfigured: the server settings do not allow CDC.
            MissingPrivilege: the user lacks REPLICATION SLAVE or REPLICATION CLIENT.
            InvalidBinlogPosition: the server cannot serve ``start`` or never reaches ``end``.
            SchemaChanged: rows whose columns the schema history does not explain, or any DDL
                of a captured table with ``behavior: exception``.
            UnsupportedDdl: DDL of a captured table that the parser cannot follow.
            SourceUnreachable: the connection keeps dropping (or the server is down).
            ConfigError: another replica took over this reader's server id.
        """
        return self._slice(start, end, tables, BinlogStream.changes)

    def read_event_rows(self, start: BinlogOffset, end: BinlogOffset,
                    tables: Collection[TableId] | None = None, *,
                    decode_from: BinlogOffset | None = None,
                    walk_from: BinlogOffset | None = None) -> Iterator[EventRows]:
        """Like :meth:`read`, but one :class:`EventRows` (Arrow tables) per rows event.

        The same changes as :meth:`read`, in the same order, with the same slice, resume and end
        semantics and errors; an EventRows' rows are the event's rows in the slice. Rows are decoded
        column-wise into Arrow (``binlog/mysql/rows_decode.py``) unless the table has a column type
        that only the per-row path decodes, in which case its event rows hold that path's values.

        ``decode_from`` splits a slice over several readers: rows events before it are walked
        over but not decoded (a reader must still start at a transaction boundary to know the
        table maps). ``decode_from`` and ``end`` may then be any byte positions, even inside an
        event. Cuts (``cut=True``, what ``byte_cuts`` and ``capped_end`` make) split by
        transaction: a transaction belongs to the piece its first event starts in, and the piece
        reads it to its end, past ``end`` if need be. Other offsets split by event: an event
        belongs to the piece its first byte lies in. Either way readers of ``(start, c1]``,
        ``(start, c2]`` from ``c1``, ... together yield each change once. A slice may also start
        at a cut (the previous batch's end): its reader walks from ``walk_from``, the first
        transaction that begins at or after the cut when a reader of the slice ending there
        found it (:meth:`next_transaction`), else from the start of the cut's file.

        Raises:
            CdcError: the errors of :meth:`read`, for the same reasons.
            ValueError: ``decode_from`` lies outside the slice.
        """
        from binlog.mysql.columnar import (
            stream_event_rows,  # loads numba only where event rows are read
        )

        if decode_from is not None and (decode_from.is_before(start) or end.is_before(decode_from)):
            raise ValueError(f"decode_from {decode_from} is outside the slice ({start}, {end}]")
        if walk_from is not None and (not start.cut or walk_from.is_before(start)):
            raise ValueError(f"walk_from {walk_from} is not the transaction after the cut {start}")
        return self._slice(start, end, tables, stream_event_rows, decode_from, walk_from)

    def take_ddl(self) -> list[DdlVersion]:
        """The versions made by the DDL statements that the current read handed out since the
        last call, in binlog order (and forgets them). A statement is handed out by the rule rows
        events follow (``decode_from``, cuts by transaction), so of the readers of a cut slice
        exactly one hands out each; the part walked over before ``decode_from`` hands out none.
        A resumed connection may pass a statement twice: the caller keeps the first."""
        taken, self._ddl = self._ddl, []
        return taken

    def next_transaction(self, cut: BinlogOffset) -> BinlogOffset | None:
        """Where the first transaction that begins at or after ``cut`` begins, when a slice this
        reader read ended at ``cut`` and its walk stopped there (None: not known)."""
        return self._after_cut.get((cut.server, cut.file, cut.pos))

    def _slice(self, start: BinlogOffset, end: BinlogOffset, tables: Collection[TableId] | None,
               walk: Walk[T], decode_from: BinlogOffset | None = None,
               walk_from: BinlogOffset | None = None) -> Iterator[T]:
        wanted = self._tables if tables is None else frozenset(tables)
        if not wanted <= self._tables:
            raise ValueError(f"tables {sorted(map(str, wanted - self._tables))} are not configured")
        if start.same_server(end):  # else ordered once both are found on this server (_read)
            if end.is_before(start):
                raise ValueError(f"slice end {end} is before its start {start}")
            if not start.is_before(end):
                return iter(())
        return self._read(start, end, wanted, walk, decode_from, walk_from)

    def _read(self, start: BinlogOffset, end: BinlogOffset, wanted: frozenset[TableId],
              walk: Walk[T], decode_from: BinlogOffset | None,
              walk_from: BinlogOffset | None = None) -> Iterator[T]:
        finished, resumes = False, 0
        try:
            start, end = self.local(start), self.local(end)
            if end.is_before(start):
                raise ValueError(f"slice end {end} is before its start {start} on this server")
            if not start.is_before(end):
                finished = True
                return
            first = start if decode_from is None else decode_from
            cut_end = end
            stream = self._stream_at(walk_from if walk_from is not None and start.cut else walk_start(start))
            self._ddl = []  # from here on: this read's (not the walk that moved the stream here)
            deadline = time.monotonic() + self.config.end_wait_timeout
            while True:
                stream.decode_from(first)
                try:
                    yield from walk(stream, end, wanted)
                except StreamLost:
                    resumes += 1
                    stream = self._resume(stream, resumes)
                    continue
                if not stream.eof:
                    finished = True
                    if cut_end.cut and stream.next_transaction is not None:
                        self._after_cut[cut_end.server, cut_end.file, cut_end.pos] = stream.next_transaction
                    return
                if stream.resume_offset().is_at_or_after(end):  # last events were filtered out
                    self._drop_stream()
                    finished = True
                    return
                if time.monotonic() > deadline:
                    raise self._end_not_reached(stream.resume_offset(), end)
                time.sleep(0.05)  # the server reported `end` a moment before it can send it
                stream = self._open(stream.boundary, stream.last)
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, start) from exc
        finally:
            if not finished:
                self._drop_stream()

    def server_identity(self) -> str:
        """The identity of the server this reader reads (``server_identity``)."""
        self._connection()
        assert self._server is not None
        return self._server

    def local(self, offset: BinlogOffset) -> BinlogOffset:
        """``offset`` in this server's binlog: itself, or, when it was read on another server (a
        failover: its server differs, or its file is gone and its origin unknown), the position
        after the same GTID set here.

        Raises:
            InvalidBinlogPosition: the offset belongs to another server and cannot be found here:
                no GTID set recorded, this server lacks some of its transactions or has diverged,
                or a schema change was recorded before the failover.
            BinlogNotConfigured: this server is MySQL with gtid_mode off.
        """
        here = self.server_identity()
        if offset.server == here:
            return offset
        if offset.server is None and (offset.gtid is None or offset.file in binary_logs(self._connection())):
            return offset  # of unknown origin, and its file is here: read it as this server's
        key = (offset.server, offset.file, offset.pos)
        if key not in self._found:
            self._found[key] = self._find_by_gtid(offset, here)
        return self._found[key]

    def _find_by_gtid(self, offset: BinlogOffset, here: str) -> BinlogOffset:
        address = self.config.connection.address
        if not offset.gtid:
            raise InvalidBinlogPosition(
                f"binlog offset {offset} was read on server {offset.server or '(unknown)'}, but "
                f"{address} is server {here} (a failover?), and the offset has no GTID set to find "
                "it here: GTIDs were off, or it is a snapshot chunk's low watermark. Point the job back "
                "at the server the checkpoint was made on, or take a new snapshot (a new checkpoint, "
                "state directory and sink path) with GTIDs on", position=str(offset), server=here)
        self._refuse_recorded_ddl(offset)
        self._drop_stream()  # the GTID dump registers this reader's server id
        conn = self._connection()
        require_gtids(conn, "resuming the checkpoint on another server")
        want = GtidSet.parse(offset.gtid)
        for _ in range(3):
            now = current_offset(conn)
            order = want.compare(GtidSet.parse(now.gtid or ""))
            if order is None or order > 0:
                raise _not_here(offset, now, address)
            found: BinlogOffset | None = now
            if order < 0:
                try:
                    found = locate_gtid(self.config.connection, self.config.server_id, str(want),
                                        self._flavor == "mariadb", self.config.read_timeout)
                except pymysql.err.OperationalError as exc:
                    if exc.args and exc.args[0] == _ER_MASTER_FATAL_ERROR_READING_BINLOG:
                        raise _not_here(offset, now, address, str(exc.args[1])) from None
                    raise
            if found is not None:
                log.warning("resuming by GTID: binlog offset %s of server %s is %s:%s on server %s (%s)",
                            offset, offset.server or "(unknown)", found.file, found.pos, here, address)
                return BinlogOffset(found.file, found.pos, str(want), here)
        raise InvalidBinlogPosition(f"{address} kept moving while finding GTID set {offset.gtid} in its "
                                    "binlog; retry", position=str(offset))

    def _refuse_recorded_ddl(self, offset: BinlogOffset) -> None:
        """Schema versions are keyed by positions of the server they were read on: refuse to move
        a history with versions after the first to another server."""
        changed = sorted(str(t) for t in self._tables if len(self.history.versions(t)) > 1)
        if changed:
            raise InvalidBinlogPosition(
                f"cannot resume {offset} on another server by GTID: the schema history of "
                f"{', '.join(changed)} holds DDL keyed by the old server's binlog positions. Take a new "
                "snapshot (a new checkpoint, state directory and sink path)", position=str(offset))

    def _stream_at(self, start: BinlogOffset) -> BinlogStream:
        if self._stream is not None and self._skip_to(self._stream, start):
            return self._stream
        self._drop_stream()
        ensure_available(self._connection(), start)
        return self._open(start)

    def _skip_to(self, stream: BinlogStream, start: BinlogOffset) -> bool:
        """Move an open stream to ``start`` by reading forward, when that beats reopening.

        True when the stream stands at ``start``: already there, or ``start`` lies a little
        ahead in the same file (the next chunk's LW after the previous chunk's HW) and the events
        in between were read and discarded. A reopen costs a connection and a dump request.
        """
        if stream.continue_at(start):
            return True
        if not (stream.usable and not stream.eof and stream.file == start.file
                and stream.pos < start.pos <= stream.pos + _SKIP_AHEAD_BYTES):
            return False
        try:
            for _ in stream.changes(start, frozenset()):
                pass
        except StreamLost:
            return False
        return stream.continue_at(start)

    def _resume(self, lost: BinlogStream, resumes: int) -> BinlogStream:
        """Reopen at the start of the interrupted transaction, skipping changes handed out."""
        self.reconnects += 1
        c = self.config
        if resumes > _MAX_RESUMES:
            raise SourceUnreachable(
                f"the binlog connection to {c.connection.address} dropped {resumes} times while "
                f"reading one slice. Check that no other replica or CDC reader uses server id "
                f"{c.server_id} (the server drops the older connection of two with one id)",
                host=c.connection.host, port=c.connection.port, server_id=c.server_id)
        log.warning("binlog connection to %s lost at %s:%s; resuming from %s (server id %d: if "
                    "this repeats, another replica may use the same id)", c.connection.address,
                    lost.file, lost.pos, lost.restart_point(), c.server_id)
        return self._open(lost.restart_point(), lost.last)

    def _open(self, at: BinlogOffset, skip_through: tuple[int, int, int] | None = None,
              ) -> BinlogStream:
        self._drop_stream()
        self._connection()
        lib = open_library_stream(
            self.config.connection, self.config.server_id, self.config.tables, at,
            self.config.read_timeout, annotate_rows=self._flavor == "mariadb")
        self._stream = BinlogStream(lib, at, self._converter, skip_through, self._on_query)
        self.stream_opens += 1
        return self._stream

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self.config.connection.connect()
            if self.config.check_server:
                check_server(self._conn)
            self._flavor = flavor(self._conn)
            self._server = server_identity(self._conn)
        return self._conn

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _converter(self, table_id: TableId, map_id: int, names: tuple[str | None, ...],
                   where: ChangePosition) -> RowConverter:
        """The converter for rows at ``where``: the table's schema version in force there.

        A table without a history yet starts one from information_schema (version 0), which
        must then match the binlog's column names.
        """
        if any(n is None for n in names):
            raise BinlogNotConfigured(
                f"the table map of {table_id} at {where.file}:{where.pos} has no column names: "
                "it was written while binlog_row_metadata was not FULL. Set "
                "binlog_row_metadata=FULL (my.cnf and SET GLOBAL) and take a new snapshot",
                table=str(table_id), position=f"{where.file}:{where.pos}")
        version = self.history.at(table_id, where.sort_key()[:2])
        if version is None:
            schema = load_table_schema(self._connection(), table_id)
            if tuple(schema.column_names) != names:
                raise _schema_changed(schema, names, where)
            version = self.history.start(schema)
        elif tuple(version.schema.column_names) != names:
            raise _history_mismatch(version, names, where)
        converter = self._converters.get((table_id, version.version))
        if converter is None or converter.schema != version.schema:
            converter = RowConverter(version.schema, version.version)
            self._converters[table_id, version.version] = converter
        return converter

    def _on_query(self, q: QueryAt) -> None:
        """Follow a DDL statement of the walk: record the versions it makes, and keep those of a
        statement the read hands out for :meth:`take_ddl` (stream thread)."""
        if not is_ddl(q.sql) or not may_name(q.sql, self._table_names):
            return
        index = int(q.file.rsplit(".", 1)[1])

        def before(table: TableId) -> TableSchema | None:
            version = self.history.at(table, (index, q.start))
            return version.schema if version is not None else None

        for change in parse_ddl(q.db, q.sql, lambda t: t in self._tables, before):
            made = self._follow(change, before(change.table), (index, q.end), f"{q.file}:{q.start}")
            if made is not None and q.handed_out:
                self._ddl.append(DdlVersion(change.table, made, ChangePosition(q.file, q.start, 0), q.ts_ms,
                                            q.server_id, q.gtid))

    def _follow(self, change: TableDdl, base: TableSchema | None, key: tuple[int, int],
                position: str) -> SchemaVersion | None:
        """Record the version ``change`` makes; it (or the one a replay finds there), else None."""
        if change.kind == "create" and change.schema is None:  # a CREATE TABLE sqlglot cannot read
            # With one version only, that version is the server's definition of this table, read
            # after this CREATE (the rows' column names still check it); after later versions the
            # new definition is unknown.
            if base is not None and len(self.history.versions(change.table)) > 1:
                raise UnsupportedDdl(
                    f"{change.table} was created again at {position} with a definition spark-cdc cannot "
                    f"read: {change.statement.strip()!r}. Take a new snapshot from after it (new "
                    "checkpoint)", table=str(change.table), statement=change.statement)
            return None
        changes_columns = change.schema is None or base is None or change.schema != base
        if self.config.behavior == "exception" and changes_columns:
            raise SchemaChanged(
                f"{change.kind.upper()} of captured table {change.table} at {position}: "
                f"{change.statement.strip()!r}. source.schema_change.behavior is 'exception', so the "
                "job stops here; set it to 'lenient' to follow the change, or take a new snapshot "
                "from after it (new checkpoint)", table=str(change.table), position=position,
                ddl=change.statement)
        if change.schema is None:
            log.warning("%s at %s: %r; %s", change.kind.upper(), position, change.statement.strip(),
                        "its rows before stay in the sinks; TRUNCATE deletes no rows there" if
                        change.kind == "truncate" else f"{change.table} stops being captured under this "
                        "name; its sink tables stay")
            return None
        if base is None:
            if change.kind == "create":  # a table this reader first meets by its CREATE: version 0
                self.history.start(change.schema)
            return None
        if change.schema == base:
            return None  # indexes, options, defaults: the columns and key stay
        version = self.history.record(change.table, key, position, change.statement, change.schema,
                                      change.renames)
        log.info("%s: schema version %d from %s (%s)", change.table, version.version, position,
                 change.statement.strip())
        return version

    def _translate(self, exc: pymysql.err.MySQLError, start: BinlogOffset) -> Exception:
        code = exc.args[0] if exc.args else None
        if code == _ER_SLAVE_SAME_ID or "same server_uuid/server_id" in str(exc):
            return ConfigError(
                f"source.server_id: another replica connected to {self.config.connection.address} "
                f"with server id {self.config.server_id} while this reader was streaming, and "
                "the server dropped this reader. Every reader that runs at the same time needs "
                "its own id from source.server_id, distinct from the ids of real replicas",
                key="source.server_id", value=str(self.config.server_id))
        if code == _ER_MASTER_FATAL_ERROR_READING_BINLOG:
            files = binary_logs(self._connection())
            if start.file not in files:
                return purged(self._conn, start, files)
            return InvalidBinlogPosition(
                f"{self.config.connection.address} cannot stream the binlog from {start}: "
                f"{exc.args[1]}", position=str(start), server_error=str(exc.args[1]))
        if code == _ER_SPECIFIC_ACCESS_DENIED:
            return missing_privilege(self._connection(), REPLICATION_SLAVE)
        if code in _CONNECTION_LOST:
            return SourceUnreachable(
                f"lost the binlog connection to {self.config.connection.address}: {exc.args[-1]}",
                host=self.config.connection.host, port=self.config.connection.port)
        return exc

    def _end_not_reached(self, at: BinlogOffset, end: BinlogOffset) -> InvalidBinlogPosition:
        return InvalidBinlogPosition(
            f"the binlog on {self.config.connection.address} ends at {at}, before the slice end "
            f"{end}, and did not grow to it within {self.config.end_wait_timeout:.0f}s. The end "
            "must be a position the server reported (SHOW MASTER STATUS); was the server "
            "restored or failed over?", position=str(at), end=str(end))


def walk_start(start: BinlogOffset) -> BinlogOffset:
    """Where a reader of a slice from ``start`` opens its stream: ``start`` itself, or for a cut
    (which may lie inside a transaction) the start of its file; the transactions that begin
    before the cut are walked over, not decoded."""
    if not start.cut:
        return start
    return BinlogOffset(start.file, 4, server=start.server)


def _not_here(offset: BinlogOffset, now: BinlogOffset, address: str, detail: str = "") -> InvalidBinlogPosition:
    want, have = GtidSet.parse(offset.gtid or ""), GtidSet.parse(now.gtid or "")
    if want.kind != have.kind and have.kind != "empty":
        why = f"its GTID set {want} is in {want.kind}'s form, and this server's ({have}) in {have.kind}'s"
    elif not want.issubset(have):
        why = (f"this server's binlog holds GTIDs {have}, which lack some of {want}: it is behind the "
               "checkpoint (a replica promoted before it had applied everything the job read; those "
               "transactions are lost on it but may be in the sinks), or it has diverged")
    else:
        why = f"the server cannot start after {want}: {detail} (purged binlogs, or a diverged history)"
    return InvalidBinlogPosition(
        f"cannot resume binlog offset {offset} of server {offset.server or '(unknown)'} on {address} "
        f"(server {now.server}): {why}. Point the job at a server that has every transaction of the "
        "checkpoint, or take a new snapshot (a new checkpoint, state directory and sink path)",
        position=str(offset), gtid=str(want), server_gtid=str(have))


def _schema_changed(schema: TableSchema, names: tuple[str | None, ...],
                    where: ChangePosition) -> SchemaChanged:
    return SchemaChanged(
        f"rows of {schema.table_id} at {where.file}:{where.pos} have columns {list(names)}, but "
        f"the table now has {schema.column_names}: its definition changed (DDL) after this "
        "change was written, and this reader has no schema history from before it. Read from the "
        "job's start (its state directory keeps the history), or take a new snapshot of the table", table=str(schema.table_id), position=f"{where.file}:{where.pos}")


def _history_mismatch(version: SchemaVersion, names: tuple[str | None, ...],
                      where: ChangePosition) -> SchemaChanged:
    return SchemaChanged(
        f"rows of {version.schema.table_id} at {where.file}:{where.pos} have columns {list(names)}, but "
        f"its schema history has {version.schema.column_names} there (version {version.version}, from "
        f"{version.position}): a DDL changed the table where the job did not see it (before the job "
        "started, or while binlog_row_metadata was not FULL). Take a new snapshot (new checkpoint)",
        table=str(version.schema.table_id), position=f"{where.file}:{where.pos}")
