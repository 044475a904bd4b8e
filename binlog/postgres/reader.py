"""Reads slices ``(start, end]`` of the change log from the job's logical slot (executor).

``pg_logical_slot_peek_binary_changes(slot, end, NULL, 'proto_version', '1', 'publication_names',
pub)`` decodes the WAL from the slot's restart point up to ``end`` without consuming anything,
so a replayed batch reads the same slice again; the transactions committed in ``[start, end)``
(by commit LSN) are kept. The slot moves only when the driver releases a committed batch
(:meth:`PostgresDialect.release`). PostgreSQL serves a slot to one session at a time: readers
take turns (:func:`~binlog.postgres.server.with_slot`).

The slice is decoded column-wise (:mod:`pgoutput_columnar`, :mod:`change_rows`); the per-row
decoder below (:meth:`PostgresLogReader.raw_changes`) is the reference it is tested against,
selected by ``SPARK_CDC_PG_DECODER=rows`` (internal, for benchmarks/postgres_bench.py).

The stream's change rows (:meth:`PostgresLogReader.change_rows`) follow DDL: each change is
decoded with the schema version its Relation message describes (:mod:`relations`), and tagged
with the sinks' schema under ``source.schema_change.behavior``
(:func:`cdc.model.history.with_schema`), as the MySQL reader does. The backfill's changes
(:meth:`PostgresLogReader.changes`) are decoded the same way, each with its version's columns, so
a DDL during a table's snapshot is followed (docs/concepts/schema-evolution.md, "DDL during a snapshot").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import psycopg
import pyarrow as pa

from binlog.dialect import ChangeRows, ChunkVersion
from binlog.postgres import pgoutput
from binlog.postgres.change_rows import column_order, table_rows
from binlog.postgres.config import PostgresSourceConfig
from binlog.postgres.pgoutput import UNCHANGED, Begin, Commit, Relation, RowChange, Truncate
from binlog.postgres.pgoutput_columnar import MessageBlock, Scan, scan
from binlog.postgres.positions import ChangeLsn, LsnOffset, format_lsn
from binlog.postgres.relations import RelationVersions, describe, infer_renames
from binlog.postgres.server import check_start, close_quietly, copy_slot, drop_slot, with_slot
from binlog.postgres.types import CONNECTOR, quote_ident, sql_table, to_arrow_rows
from cdc.model.envelope import envelope_schema, row_type, source_block, source_type
from cdc.model.errors import SchemaChanged
from cdc.model.events import ChangeEvent
from cdc.model.history import (
    EVOLVING,
    Behavior,
    HistoryStore,
    SchemaHistory,
    SchemaVersion,
    project_rows,
    with_schema,
)
from cdc.model.schema import TableId, TableSchema
from chunking.backfill import read_schema, same_columns

log = logging.getLogger(__name__)

STREAM_ROWS = 65_536  # changes turned into Arrow change rows at a time
# A piece of a cut slice after the first also peeks the WAL before it for the relation
# definitions (row changes cut to kind and relation): on 150k TPC-DS updates the server took
# 0.26 s for that against 0.28 s for the whole messages, while turning the messages into change
# rows and files costs several times the peek. So later pieces get less WAL by this factor each
# (binlog.dialect.piece_offsets); in Spark's event log of a 300k-update catch-up cut in two, the
# tasks took 1.60 and 1.64 s (docs/sources/postgres.md, "A long catch-up slice").
SKIP_COST = 0.2
# The decoder: "columnar" (the job's), or "rows", the per-row reference kept for tests and for
# benchmarks/postgres_bench.py's comparison (internal; not a config option).
DECODER_ENV = "SPARK_CDC_PG_DECODER"

_PEEK_BINARY = ("SELECT (lsn - '0/0'::pg_lsn)::int8, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, "
                "NULL, 'proto_version', '1', 'publication_names', %s)")
# The messages of a piece's prefix: whole, but row changes cut to their kind and relation oid,
# which is all that following the relation definitions needs (pgoutput_columnar.scan).
_PEEK_STEERING = ("SELECT (lsn - '0/0'::pg_lsn)::int8, CASE WHEN get_byte(data, 0) IN (73, 85, 68) "
                  "THEN substring(data FROM 1 FOR 5) ELSE data END FROM pg_logical_slot_peek_binary_changes("
                  "%s, %s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %s)")
_PEEK = ("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
         "'proto_version', '1', 'publication_names', %s)")


@dataclass(frozen=True)
class RawChange:
    """One row change with its values still text, aligned to the table's columns.

    Attributes:
        table: the table.
        op: ``c``, ``u`` or ``d``.
        before: the old row's texts (key columns only under replica identity DEFAULT), or None.
        after: the new row's texts, or None.
        position: where it sits.
        ts_ms: commit time.
        xid: the transaction id.
        lsn: the change's own LSN.
        version: the schema version its texts are aligned to (0 when read with the job's schema).
    """

    table: TableId
    op: str
    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    position: ChangeLsn
    ts_ms: int
    xid: int
    lsn: int
    version: int = 0


class PostgresLogReader:
    """The change log of some tables, read from the job's slot (executor; a context manager).

    Args:
        config: the source config (slot, publication, source name).
        connect: opens a connection as the CDC role.
        schemas: the tables read.
        history: where the schema history persists (the job's state directory); None keeps it in
            this reader's memory, starting each table at ``schemas``.
        follow: tables whose changes are decoded for their schema versions only (recorded in the
            history when new), never yielded.
    """

    def __init__(self, config: PostgresSourceConfig, connect: Callable[[], Any],
                 schemas: dict[TableId, TableSchema], history: HistoryStore | None = None,
                 follow: dict[TableId, TableSchema] | None = None) -> None:
        self.config = config
        self.connect = connect
        self.schemas = schemas
        self.tables = {**(follow or {}), **schemas}  # decoded: rows of ``schemas``, versions of all
        self.decoder = os.environ.get(DECODER_ENV, "columnar")
        self._conn: Any = None
        behavior = cast(Behavior, config.schema_change.behavior)
        self.versions = RelationVersions(SchemaHistory(history, behavior), self.connection, config.name)
        self._columns_now: dict[TableId, set[str]] = {}

    def __enter__(self) -> PostgresLogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            close_quietly(self._conn)
            self._conn = None

    def connection(self) -> Any:
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    # --- the contract ---------------------------------------------------------------------

    def changes(self, start: LsnOffset, end: LsnOffset, decode_from: LsnOffset | None = None) -> Iterator[ChangeEvent]:
        """The changes in ``(start, end]``, one per row, in commit order (key updates whole),
        each decoded with its schema version (recorded when new, as :meth:`change_rows` does);
        those committed before ``decode_from`` are decoded for their versions only."""
        self._start_versions()
        first = start.lsn if decode_from is None else max(start.lsn, decode_from.lsn)
        if self.decoder == "columnar":
            for table, rows in self._columnar(start, end, versioned=True, split=False, tag=False):
                for r in rows.to_pylist():
                    s = r["source"]
                    if s["commit_lsn"] >= first:
                        yield ChangeEvent(table, r["op"], r["before"], r["after"],
                                          ChangeLsn(s["commit_lsn"], s["lsn"], s["row"]), r["ts_ms"], s)
            return
        pending: list[RawChange] = []
        for raw in self._raw_changes(start, end, versioned=True):
            if raw.position.commit < first:
                continue
            pending.append(raw)
            if len(pending) >= STREAM_ROWS:
                yield from self._events(pending)
                pending = []
        if pending:
            yield from self._events(pending)

    def chunk_version(self, table: TableId, low: LsnOffset, high: LsnOffset, read: pa.Schema) -> ChunkVersion:
        """The version a chunk of ``table`` read at ``low`` was read under, and the versions that
        start in its window (their first change committed in ``[low, high)``).

        PostgreSQL shows a DDL only with the table's next change, so the history may not know yet
        the definition a chunk was read under (``read``): then its first change came after the LW
        (the first version in the window is the chunk's), or has not come up to ``high``: the
        version is recorded here, at ``high``, where the job first knows it (every change after
        ``high`` is written under it; none of the table's changes lies between the DDL and
        ``high``). Call it only after :meth:`changes` read up to ``high``.

        Raises:
            SchemaChanged: under ``exception`` when the version is recorded here; or a definition
                that neither the history nor the catalog at the read explains.
        """
        self._start_versions()
        history = self.versions.history
        base = history.at(table, (low.lsn, -1))
        if base is None:
            raise ValueError(f"{table} has no schema history (its version 0 is started first)")
        later = tuple(v for v in history.versions(table) if (low.lsn, -1) < v.key and v.key[0] < high.lsn)
        if same_columns(base.schema, read):
            version = base
        elif later and same_columns(later[0].schema, read):
            version, later = later[0], later[1:]  # the DDL came before the LW, its first change after
        elif not later:
            version = self._record_read(table, base, high, read)
        else:
            raise SchemaChanged(
                f"a snapshot chunk of {table} read at {low} has columns {read.names}, but the table had "
                f"{base.schema.column_names} there and {later[0].schema.column_names} from {later[0].position}: "
                "its definition changed twice around the chunk's read with no change of the table in "
                "between. Take a new snapshot (a new checkpoint, state directory and sink path)",
                table=str(table), position=str(low))
        return ChunkVersion(version, LsnOffset(later[0].key[0]) if later else None, later)

    def _record_read(self, table: TableId, base: SchemaVersion, high: LsnOffset, read: pa.Schema) -> SchemaVersion:
        """Record the definition a chunk was read under, which no change has shown yet, at
        ``high`` (see :meth:`chunk_version`)."""
        schema = read_schema(read)
        if schema is None:
            raise SchemaChanged(f"a staged snapshot chunk of {table} does not say which definition it was read "
                                "under (staged by an older version); take a new snapshot", table=str(table))
        renames = infer_renames(base.schema, schema) if self.versions.behavior in EVOLVING else ()
        ddl = describe(base.schema, schema, renames) + " (seen in the catalog by a snapshot chunk's read; no change " \
            "of the table was written under it yet)"
        where = format_lsn(high.lsn)
        if self.versions.behavior == "exception":
            raise SchemaChanged(
                f"captured table {table} changed while its snapshot was in flight: a snapshot chunk read it "
                f"before {where}; {ddl}. source.schema_change.behavior is 'exception', so the job stops "
                "here; set it to 'lenient' to follow the change, or take a new snapshot from after it (new "
                "checkpoint)", table=str(table), position=where, ddl=ddl)
        version = self.versions.history.record(table, (high.lsn, 0), where, ddl, schema, renames)
        if not same_columns(version.schema, read):
            raise SchemaChanged(
                f"{table}: snapshot chunks emitted at {where} were read under two definitions "
                f"({version.schema.column_names} and {read.names}) with no change of the table in between; "
                "take a new snapshot (a new checkpoint, state directory and sink path)", table=str(table))
        log.info("%s: schema version %d from %s: %s", table, version.version, where, ddl)
        return version

    def version_at(self, table: TableId, offset: LsnOffset) -> SchemaVersion | None:
        self._start_versions()
        return self.versions.history.at(table, (offset.lsn, -1))

    def snapshot_rows(self, table: TableId, version: SchemaVersion, rows: pa.Table, ts_ms: int) -> pa.Table:
        return self._tagged(table, version.version, rows, ts_ms, 0)

    def _start_versions(self) -> None:
        for schema in self.tables.values():
            self.versions.start(schema)

    def change_rows(self, start: LsnOffset, end: LsnOffset, decode_from: LsnOffset | None = None) -> Iterator[ChangeRows]:
        """The same changes as Arrow change rows per table and schema version (key updates
        split), built column-wise from up to :data:`STREAM_ROWS` changes at a time; each decoded
        with its version, in the sinks' schema, tagged (:func:`cdc.model.history.with_schema`).

        ``decode_from``: a piece of a slice cut for several readers: only the transactions that
        commit in ``[decode_from, end)`` are decoded, from a temporary copy of the slot advanced
        to ``decode_from`` (:meth:`_piece_blocks`); the Relation messages before it are still
        followed, so that every reader of the slice records the same schema versions.

        Raises:
            SchemaChanged: a table's definition changed under ``schema_change.behavior:
                exception``, or ``lenient`` cannot widen a column to its new type.
        """
        self._start_versions()
        if self.decoder == "columnar":
            for table, rows in self._columnar(start, end, versioned=True, decode_from=decode_from):
                source = rows.column("source").chunk(0)
                first = (source.field("commit_lsn")[0].as_py(), source.field("row")[0].as_py())
                yield ChangeRows(table, rows, first)
            return
        first_commit = start.lsn if decode_from is None else max(start.lsn, decode_from.lsn)
        pending: list[RawChange] = []
        for raw in self._raw_changes(start, end, versioned=True):
            if raw.position.commit < first_commit:
                continue  # a cut slice's earlier piece: decoded for its versions only
            pending.append(raw)
            if len(pending) >= STREAM_ROWS:
                yield from self._rows(pending)
                pending = []
        if pending:
            yield from self._rows(pending)

    # --- decoding, column-wise (pgoutput_columnar, change_rows) ----------------------------

    def _columnar(self, start: LsnOffset, end: LsnOffset, versioned: bool, split: bool = True,
                  tag: bool = True, decode_from: LsnOffset | None = None) -> Iterator[tuple[TableId, pa.Table]]:
        """The kept changes as change rows per table, :data:`STREAM_ROWS` changes at a time (the
        tables of each in order of their first change). ``versioned``: per schema version (key
        updates split and rows tagged unless ``split``/``tag`` say otherwise); else with the
        job's schemas, key updates whole. Rows of ``follow`` tables are never built.
        ``decode_from``: only the changes committed from there on (:meth:`change_rows`)."""
        if not start.is_before(end):
            return
        d = self.config
        conn = self.connection()
        check_start(conn, d.slot, start)

        def wanted(rel: Relation) -> bool:
            return TableId(rel.namespace, rel.name) in self.tables

        lo = start.lsn
        if decode_from is not None and start.is_before(decode_from):
            lo = min(decode_from.lsn, end.lsn)
            before, block = self._piece_blocks(start, LsnOffset(lo), end)
            if versioned:  # the versions the readers of the earlier pieces record, in the same order
                earlier = scan(before, start.lsn, lo, wanted)
                self._relation_versions(before, earlier, [TableId(r.namespace, r.name) for r in earlier.relations])
        else:
            block = self._peek_job_slot(conn, end)
        kept = scan(block, lo, end.lsn, wanted)
        for relations, lsn in kept.truncates:
            self._truncated(relations, format_lsn(lsn))
        tables = [TableId(r.namespace, r.name) for r in kept.relations]
        ids = {t: i for i, t in enumerate(dict.fromkeys(tables))}
        table_of = np.array([ids[t] for t in tables] + [-1], np.int64)[kept.version]
        by_id = list(ids)
        change_version = (self._relation_versions(block, kept, tables) if versioned
                          else np.zeros(len(kept.relations) + 1, np.int64))[kept.version]
        for lo in range(0, len(kept.messages), STREAM_ROWS):
            piece, versions = table_of[lo:lo + STREAM_ROWS], change_version[lo:lo + STREAM_ROWS]
            _, first = np.unique(piece, return_index=True)
            for t in piece[np.sort(first)].tolist():
                table, mine = by_id[t], piece == t
                if table not in self.schemas:
                    continue  # a followed table: its versions are recorded, its rows not wanted
                for v in np.unique(versions[mine]).tolist():  # versions follow log order
                    at = lo + np.flatnonzero(mine & (versions == v))
                    if not versioned:
                        yield table, table_rows(block, kept, at, self.schemas[table], self.config.name,
                                                self._current_values, split=False)
                        continue
                    schema = self.versions.history.versions(table)[v].schema
                    rows = table_rows(block, kept, at, schema, self.config.name, self._current_values, split=split)
                    yield table, (self._tagged(table, v, rows, int(kept.ts_ms[at[0]]), int(kept.xid[at[0]]))
                                  if tag else rows)

    def _peek_job_slot(self, conn: Any, end: LsnOffset) -> MessageBlock:
        """The job's slot decoded up to ``end`` (in turn with the batch's other readers)."""
        d = self.config
        return MessageBlock.from_rows(with_slot(
            lambda: conn.cursor(binary=True).execute(_PEEK_BINARY, (d.slot, format_lsn(end.lsn),
                                                                    d.publication_name)).fetchall(),
            d.slot, d.slot_wait_s))

    def _piece_blocks(self, start: LsnOffset, cut: LsnOffset, end: LsnOffset) -> tuple[MessageBlock, MessageBlock]:
        """The messages of the transactions committed in ``[start, cut)`` (row changes cut to
        their kind and relation) and in ``[cut, end)`` (whole), for a piece of a cut slice.

        Read from a temporary copy of the job's slot (:func:`~server.copy_slot`): first up to
        ``cut``, then, the copy advanced to ``cut`` (fast-forward: the server skips the changes
        before it without decoding them), up to ``end``. So the piece runs beside the other
        readers of the batch instead of taking turns on the job's slot, and of the prefix only
        the steering messages and the changes' kinds and relations are sent. Logical decoding skips exactly the
        transactions whose commit is before a slot's confirmed position (positions.py), so the
        copy's peek holds the transactions of ``[cut, end)``, all of each. Without a free slot on
        the server, both come from one peek of the job's slot.
        """
        d, conn = self.config, self.connection()
        copy = copy_slot(conn, d.slot)
        if copy is None:
            log.warning("no free replication slot for a copy of %r: this piece of the slice peeks the job's slot, "
                        "in turn with the other readers. Raise the server's max_replication_slots (one more per "
                        "task a slice is cut for), or set source.log_readers: 1 to read each slice in one task",
                        d.slot)
            whole = self._peek_job_slot(conn, end)
            return whole, whole
        try:
            check_start(conn, copy, start)
            before = conn.cursor(binary=True).execute(_PEEK_STEERING, (copy, format_lsn(cut.lsn),
                                                                       d.publication_name)).fetchall()
            conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (copy, format_lsn(cut.lsn)))
            rows = conn.cursor(binary=True).execute(_PEEK_BINARY, (copy, format_lsn(end.lsn),
                                                                   d.publication_name)).fetchall()
        finally:
            try:
                drop_slot(conn, copy)
            except psycopg.Error as exc:  # the read's own error matters more; the session's end drops it
                log.warning("could not drop the slot copy %s: %s", copy, exc)
        return MessageBlock.from_rows(before), MessageBlock.from_rows(rows)

    def _relation_versions(self, block: MessageBlock, kept: Scan, tables: list[TableId]) -> np.ndarray:
        """Per Relation message of ``kept`` (and a last entry for none), the schema version its
        kept changes were written under: one look per message, in log order (:mod:`relations`)."""
        out = np.zeros(len(kept.relations) + 1, np.int64)
        n = len(kept.version)
        if not n:
            return out
        rels, first = np.unique(kept.version, return_index=True)
        _, from_end = np.unique(kept.version[::-1], return_index=True)
        last = n - 1 - from_end
        lsns = block.lsns[kept.messages]
        for i in np.argsort(first).tolist():
            r, f, x = int(rels[i]), int(first[i]), int(last[i])
            version = self.versions.version(kept.relations[r], tables[r], (int(kept.commit_lsn[f]), int(lsns[f])),
                                            (int(kept.commit_lsn[x]), int(lsns[x])))
            out[r] = version.version
        return out

    def _tagged(self, table: TableId, version: int, rows: pa.Table, ts_ms: int, xid: int) -> pa.Table:
        """Rows decoded with ``version`` as rows of the sinks' schema, tagged with both and with
        the version's schema change event."""
        history = self.versions.history
        source = history.versions(table)[version]
        sink = history.sink_schema(table, version)
        if sink is not source.schema:
            rows = project_rows(rows, sink)
        return with_schema(rows, sink, version, self.versions.schema_change(table, source, ts_ms, xid))

    def _truncated(self, relations: Sequence[Relation], lsn_text: str) -> None:
        names = [str(TableId(r.namespace, r.name)) for r in relations]
        mine = [n for n in names if TableId.parse(n) in self.schemas]
        if mine:  # Debezium's default too (skipped.operations=t): the envelope has no truncate
            log.warning("TRUNCATE of %s at %s is not captured: the mirror keeps the rows it had",
                        ", ".join(mine), lsn_text)

    # --- decoding, per row (the reference) ------------------------------------------------

    def raw_changes(self, start: LsnOffset, end: LsnOffset) -> Iterator[RawChange]:
        """Decode the slot up to ``end``; keep the changes of transactions committed in
        ``[start, end)`` on the tables read, aligned to the job's schemas."""
        return self._raw_changes(start, end, versioned=False)

    def _raw_changes(self, start: LsnOffset, end: LsnOffset, versioned: bool) -> Iterator[RawChange]:
        """:meth:`raw_changes`; ``versioned``: each change aligned to its schema version."""
        if not start.is_before(end):
            return
        d = self.config
        conn = self.connection()
        check_start(conn, d.slot, start)
        rows = with_slot(lambda: conn.execute(_PEEK, (d.slot, format_lsn(end.lsn), d.publication_name)).fetchall(),
                         d.slot, d.slot_wait_s)
        relations: dict[int, tuple[Relation, int]] = {}  # oid -> its last Relation message, numbered
        resolved: dict[int, SchemaVersion] = {}  # Relation message number -> the version of its changes
        numbered = 0
        begin: Begin | None = None
        txn: list[tuple[RowChange, int, Relation, int]] = []
        for lsn_text, data in rows:
            msg = pgoutput.decode(data)
            if isinstance(msg, RowChange):
                rel, number = relations[msg.relation]
                if TableId(rel.namespace, rel.name) in (self.tables if versioned else self.schemas):
                    txn.append((msg, _lsn(lsn_text), rel, number))
            elif isinstance(msg, Begin):
                begin, txn = msg, []
            elif isinstance(msg, Relation):
                numbered += 1
                relations[msg.oid] = (msg, numbered)
            elif isinstance(msg, Commit):
                if txn and begin is not None and start.lsn <= msg.commit_lsn < end.lsn:
                    yield from self._transaction(begin, msg, txn, resolved if versioned else None)
                begin, txn = None, []
            elif isinstance(msg, Truncate):
                self._truncated([relations[r][0] for r in msg.relations if r in relations], lsn_text)

    def _transaction(self, begin: Begin, commit: Commit, txn: list[tuple[RowChange, int, Relation, int]],
                     resolved: dict[int, SchemaVersion] | None) -> Iterator[RawChange]:
        """One committed transaction's changes, aligned to the job's schemas or, with
        ``resolved``, to each Relation message's schema version (recorded when new)."""
        layouts: dict[int, tuple[TableId, TableSchema, int, list[int], set[int]]] = {}  # per message, once
        for row, (msg, lsn, rel, number) in enumerate(txn):
            table, key = TableId(rel.namespace, rel.name), (commit.commit_lsn, lsn)
            if resolved is not None:
                if number not in resolved:
                    resolved[number] = self.versions.version(rel, table, key, key)
                self.versions.check(table, resolved[number], key)
            if table not in self.schemas:
                continue  # a followed table: its version recorded, its rows not wanted
            layout = layouts.get(number)
            if layout is None:
                version = resolved[number] if resolved is not None else None
                schema = version.schema if version is not None else self.schemas[table]
                names = schema.column_names
                layout = layouts[number] = (table, schema, version.version if version is not None else 0,
                                            column_order(rel.columns, schema),
                                            {names.index(k) for k in schema.primary_key})
            table, schema, v, order, keys = layout
            old = None if msg.old is None else tuple(msg.old[i] for i in order)
            new = None if msg.new is None else tuple(msg.new[i] for i in order)
            if new is not None and any(v is UNCHANGED for v in new):
                new = self._fill_unchanged(schema, old, new)
            if msg.op == "u" and old is None and new is not None and keys:
                old = tuple(v if i in keys else None for i, v in enumerate(new))  # replica identity DEFAULT
            yield RawChange(table, msg.op, old, new, ChangeLsn(commit.commit_lsn, lsn, row), commit.ts_ms,
                            begin.xid, lsn, v)

    def _fill_unchanged(self, schema: TableSchema, old: tuple[Any, ...] | None,
                        new: tuple[Any, ...]) -> tuple[Any, ...]:
        """Unchanged TOASTed values: from the old row (replica identity FULL), else the table's
        current value by primary key (never null over the mirror's value)."""
        out = list(new)
        missing = []
        for i, v in enumerate(new):
            if v is UNCHANGED:
                if old is not None and old[i] is not UNCHANGED and old[i] is not None:
                    out[i] = old[i]
                else:
                    missing.append(i)
        if missing:
            if not schema.primary_key:
                raise SchemaChanged(f"table {schema.table_id}: an unchanged TOASTed value arrived without the old "
                                    f"row and the table has no primary key. Run: ALTER TABLE {sql_table(schema.table_id)} "
                                    "REPLICA IDENTITY FULL;", table=str(schema.table_id))
            row = self._current_values(schema, [new[schema.column_names.index(k)] for k in schema.primary_key],
                                       missing)
            for j, i in enumerate(missing):
                out[i] = row[j] if row is not None else None
        return tuple(out)

    def _current_values(self, schema: TableSchema, key: list[Any], columns: list[int]) -> list[Any] | None:
        """The texts of ``columns`` of the row with primary key ``key`` now (None: deleted since).

        ``schema`` may be an older version of the table: a column dropped or renamed since has no
        current value, and is null (with a warning) rather than failing the query.
        """
        names = schema.column_names
        now = self._table_columns(schema.table_id)
        gone = [names[i] for i in columns if names[i] not in now]
        if gone:
            log.warning("%s: unchanged TOASTed column(s) %s no longer exist in the table; written as null",
                        schema.table_id, ", ".join(gone))
        where = " AND ".join(f"{quote_ident(k)} = %s" for k in schema.primary_key)
        cols = ", ".join(f"{quote_ident(names[i])}::text" if names[i] in now else "NULL::text" for i in columns)
        row = self.connection().execute(f"SELECT {cols} FROM {sql_table(schema.table_id)} WHERE {where}",
                                        key).fetchone()
        if row is None:
            log.warning("%s: unchanged TOASTed column(s) of a row deleted since; the next change deletes it",
                        schema.table_id)
        return None if row is None else list(row)

    def _table_columns(self, table: TableId) -> set[str]:
        """The table's column names now (once per reader)."""
        if table not in self._columns_now:
            rows = self.connection().execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                "AND NOT attisdropped", (sql_table(table),)).fetchall()
            self._columns_now[table] = {r[0] for r in rows}
        return self._columns_now[table]

    # --- Arrow ----------------------------------------------------------------------------

    def _events(self, raws: list[RawChange]) -> Iterator[ChangeEvent]:
        """Per-row changes (key updates whole), each image with its version's columns."""
        for table, mine in _by_table(raws).items():
            runs: dict[int, list[RawChange]] = {}
            for r in mine:
                runs.setdefault(r.version, []).append(r)
            for version, run in runs.items():
                schema = self.versions.history.versions(table)[version].schema
                rows = envelope(schema, run, self.config.name).to_pylist()
                for raw, r in zip(run, rows, strict=True):
                    yield ChangeEvent(table, r["op"], r["before"], r["after"], raw.position, raw.ts_ms, r["source"])

    def _rows(self, raws: list[RawChange]) -> Iterator[ChangeRows]:
        """Change rows per table and schema version (versions follow log order), tagged."""
        for table, mine in _by_table(raws).items():
            runs: dict[int, list[RawChange]] = {}
            for r in mine:
                runs.setdefault(r.version, []).append(r)
            for version, run in runs.items():
                schema = self.versions.history.versions(table)[version].schema
                split = split_key_changes(run, schema)
                rows = self._tagged(table, version, envelope(schema, split, self.config.name), split[0].ts_ms,
                                    split[0].xid)
                yield ChangeRows(table, rows, split[0].position.sort_key())


def _lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _by_table(raws: list[RawChange]) -> dict[TableId, list[RawChange]]:
    out: dict[TableId, list[RawChange]] = {}
    for r in raws:
        out.setdefault(r.table, []).append(r)
    return out


def split_key_changes(raws: Sequence[RawChange], schema: TableSchema) -> list[RawChange]:
    """Each update that changes the primary key as a delete and a create (as Debezium)."""
    keys = [schema.column_names.index(k) for k in schema.primary_key]
    out: list[RawChange] = []
    for r in raws:
        if r.op == "u" and keys and r.before is not None and r.after is not None and \
                any(r.before[i] != r.after[i] for i in keys):
            out.append(RawChange(r.table, "d", r.before, None, r.position, r.ts_ms, r.xid, r.lsn))
            out.append(RawChange(r.table, "c", None, r.after, r.position, r.ts_ms, r.xid, r.lsn))
        else:
            out.append(r)
    return out


def _images(schema: TableSchema, images: list[tuple[Any, ...] | None]) -> pa.Array:
    image = row_type(schema)
    arrays = [to_arrow_rows(pa.array([None if img is None else img[i] for img in images], pa.string()), col)
              for i, col in enumerate(schema.columns)]
    mask = pa.array([img is None for img in images], pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=list(image), mask=mask)


def envelope(schema: TableSchema, raws: Sequence[RawChange], name: str) -> pa.Table:
    """Change rows (:mod:`cdc.model.envelope` layout) of one table's changes, column-wise."""
    sources = [source_block(CONNECTOR, name, r.table, r.ts_ms, "false",
                            {"schema": r.table.db, "txId": r.xid, "lsn": r.lsn,
                             "sequence": f'["{r.position.commit}","{r.lsn}"]',
                             "commit_lsn": r.position.commit, "row": r.position.row}) for r in raws]
    return pa.Table.from_arrays(
        [pa.array([r.op for r in raws], pa.string()), _images(schema, [r.before for r in raws]),
         _images(schema, [r.after for r in raws]), pa.array(sources, source_type(CONNECTOR)),
         pa.array([r.ts_ms for r in raws], pa.int64())],
        schema=envelope_schema(schema))
