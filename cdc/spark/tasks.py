"""The executor side of the source: the work one Spark task does for one micro-batch.

A :class:`CdcPartition` is a list of work items run in order, with the log reader id its reads
use. Three kinds of work (docs/contributing/architecture.md, "Why stage, then emit"):

* :class:`StageChunk`: the dialect records the chunk's LW and reads its rows, under the table's
  definition at the LW; they go to the state directory. No rows are emitted.
* :class:`EmitChunk`: chunks staged by the previous batch, merged with the log (LW, HW] into
  ``op='r'`` rows (:class:`~chunking.backfill.Backfill`), tagged with the schema version they were
  read under. One log read per partition feeds all of its chunks; it starts at the batch's start,
  where the schema history is complete, so it records every DDL of its tables up to the HW. A
  chunk whose window holds a DDL of its table stops its merge at the DDL: its rows are its state
  just before it, and the changes of its keys after it are emitted as change rows
  (docs/concepts/schema-evolution.md, "DDL during a snapshot"). The rows of a table that joined the job
  again reach the sinks as changes, upserted by key (:class:`EmitChunk`).
* :class:`StreamSlice`: the log slice (start, end] of the batch (Flink CDC's ``StreamSplit``),
  keeping the changes whose key lies in a chunk emitted before this batch (``shouldEmit``), and
  following the DDL of every other captured table (``follow``), so that each batch leaves the
  schema history complete up to its end. A DDL of a table it streams reaches the sinks where it
  lies, as a staged set without rows (the reader of the piece that holds it hands it over), not
  only with the table's next change.

With sinks (the job's case) the task hands its rows to every sink's writer, which stages them,
and yields one manifest row per staged set instead of the rows (:class:`~sinks.base.Staged`).
Every row is a function of the partition and the state files, so a replayed batch emits the same
rows. Connections open here, never on the driver.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyarrow import ipc
from pyspark.sql.datasource import InputPartition

from binlog.dialect import ChunkVersion, Dialect, LogReader
from cdc.model.envelope import snapshot_envelope
from cdc.model.errors import CdcError, SchemaChanged
from cdc.model.events import ChangeEvent
from cdc.model.history import SchemaVersion, tagged_change, tagged_schema
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.positions import Offset, min_offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.layout import StreamLayout
from cdc.spark.state import StateStore
from chunking.backfill import Backfill, ChunkFilter, Region, RegionFilter, same_columns
from chunking.chunks import KeyOrder, SnapshotSplit
from sinks.base import SinkWriter, Staged, StreamKind

log = logging.getLogger(__name__)

BACKFILL_BATCH = 4096  # log changes merged into staged chunks at a time
STAGED_ROWS = 131_072  # snapshot rows of one table buffered by an emit task before sinks stage them


@dataclass(frozen=True)
class StageChunk:
    """Read chunk ``split_id`` of ``table`` (its LW and rows) into the state directory."""

    table: str
    split_id: int


@dataclass(frozen=True)
class EmitChunk:
    """Emit chunk ``split_id`` of ``table``, staged by the previous batch, as of the batch's HW.

    ``rejoined``: the table joined the offsets again (:attr:`cdc.spark.offsets.TableProgress.rejoined`),
    so its sink tables may hold the chunk's keys: its rows are staged as ``changes``, which sinks
    upsert by key, instead of ``snapshot`` rows, which they may append (:mod:`sinks.base`).
    """

    table: str
    split_id: int
    rejoined: bool = False


@dataclass(frozen=True)
class StreamSlice:
    """The log slice ``(start, end]`` (Flink CDC's ``StreamSplit``), or the piece of it from
    ``decode_from`` on (every reader of a cut slice starts at ``start``). ``follow``: tables
    without a region whose DDL the slice follows into the schema history (their rows not read)."""

    start: Offset
    end: Offset
    regions: dict[str, Region]
    decode_from: Offset | None = None
    follow: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskContext:
    """What every task needs; built on the driver, pickled to executors.

    Attributes:
        dialect: the source's dialect (its config; no connection).
        schemas: the captured tables.
        store: the state directory.
        layout: the stream's columns.
        writers: the sinks' executor sides, in the job's ``sink:`` order (empty: rows flow
            through Spark instead).
        hooks: crash points for tests.
    """

    dialect: Dialect
    schemas: dict[TableId, TableSchema]
    store: StateStore
    layout: StreamLayout
    writers: tuple[SinkWriter, ...] = ()
    hooks: Hooks = field(default=NO_HOOKS)


class CdcPartition(InputPartition):
    """One task's work for one batch.

    ``since`` is the batch's start: the schema history is complete up to there (the batches
    before it followed every captured table's DDL), so the emits' log reads begin there.
    """

    def __init__(self, index: int, reader_id: int, items: list[Any], high_watermark: Offset,
                 ts_ms: int, since: Offset | None = None) -> None:
        super().__init__(index)
        self.index = index
        self.reader_id = reader_id
        self.items = items
        self.high_watermark = high_watermark
        self.ts_ms = ts_ms
        self.since = since

    def __repr__(self) -> str:
        return f"CdcPartition({self.index}, reader {self.reader_id}, {len(self.items)} items)"


def run_partition(part: CdcPartition, ctx: TaskContext) -> Iterator[pa.RecordBatch]:
    """Run a partition's work items in order, yielding the stream's record batches."""
    stages = [i for i in part.items if isinstance(i, StageChunk)]
    emits = [i for i in part.items if isinstance(i, EmitChunk)]
    streams = [i for i in part.items if isinstance(i, StreamSlice)]
    if ctx.dialect.config.backfill_skip and emits:
        with contextlib.ExitStack() as resources:
            yield from _read_and_emit(emits, part, ctx, resources)
        emits = []
    if not emits and not streams:
        _stage_all(stages, ctx)
        return
    # Staging waits on the server's SELECTs, emitting on file writes; both release the GIL, so
    # one task does both at once (the pipeline's two halves on one core).
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stage") as pool, \
            contextlib.ExitStack() as resources:
        staging = pool.submit(_stage_all, stages, ctx) if stages else None
        conn = resources.enter_context(contextlib.closing(ctx.dialect.connect()))
        orders = _KeyOrders(ctx, conn)
        if emits:
            yield from _emit(emits, part, ctx, orders, resources)
        for stream in streams:
            yield from _stream(stream, part, ctx, orders, resources)
        if staging is not None:
            staging.result()  # re-raises a staging failure in the task


class _KeyOrders:
    """The dialect's key order per (table, column), built once per task on its connection."""

    def __init__(self, ctx: TaskContext, conn: Any) -> None:
        self.ctx, self.conn = ctx, conn
        self.orders: dict[tuple[TableId, str], KeyOrder] = {}

    def of(self, table: TableId, column: str) -> KeyOrder:
        if (table, column) not in self.orders:
            schema = self.ctx.schemas[table]
            self.orders[table, column] = self.ctx.dialect.key_order(schema.column(column), self.conn)
        return self.orders[table, column]


def _stage_all(items: list[StageChunk], ctx: TaskContext) -> None:
    for item in items:
        table = TableId.parse(item.table)
        split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
        lw, rows = ctx.dialect.read_chunk(ctx.schemas[table], split, functools.partial(ctx.hooks.reached, "low_watermark"))
        ctx.hooks.reached("stage")
        ctx.store.write_staged(table, item.split_id, rows, lw)
        log.info("staged %s: %d rows (LW %s)", split.split_name, rows.num_rows, lw)


def _log_reader(part: CdcPartition, ctx: TaskContext, tables: Iterable[TableId],
                resources: contextlib.ExitStack, follow: Iterable[TableId] = ()) -> Any:
    mine = sorted(set(tables))
    schemas = [ctx.schemas[t] for t in mine]
    others = [ctx.schemas[t] for t in sorted(set(follow) - set(mine)) if t in ctx.schemas]
    return resources.enter_context(ctx.dialect.log_reader(part.reader_id, schemas, others))


def _staged_schema(ctx: TaskContext, table: TableId, split_id: int) -> pa.Schema:
    """A staged chunk's Arrow schema (its columns, and the definition they were read under)."""
    with ctx.store.fs.open_input_file(ctx.store.path(StateStore.staged_path(table, split_id))) as f:
        return ipc.open_file(f).schema


class _ChunkMerge:
    """One chunk's emission: its schema version, where a DDL ends its merge, and the backfill.

    The version is known once the log reader has read past the chunk's LW (the reader records
    every DDL before it yields a change after it), so it is settled at the first batch of
    changes in the chunk's window, or at the end of the read.
    """

    def __init__(self, split: SnapshotSplit, lw: Offset, read: pa.Schema, order: KeyOrder,
                 rejoined: bool = False) -> None:
        self.split, self.lw, self.read, self.order, self.rejoined = split, lw, read, order, rejoined
        self.table = split.table_id
        self.found: ChunkVersion | None = None
        self.fill: Backfill | None = None

    @property
    def version(self) -> SchemaVersion:
        assert self.found is not None
        return self.found.version

    @property
    def split_at(self) -> Offset | None:
        """Where the chunk's rows end: the first DDL of its table inside its window."""
        return self.found.split if self.found is not None else None

    def settle(self, reader: LogReader, hw: Offset) -> None:
        found = reader.chunk_version(self.table, self.lw, hw, self.read)
        if self.found is not None and found.version.version != self.found.version.version:
            raise CdcError(f"{self.split.split_name}: its schema version changed from {self.found.version.version} "
                           f"to {found.version.version} while its window was read")
        for later in found.later:
            if self.split.key_column.lower() not in (c.lower() for c in later.schema.column_names):
                raise SchemaChanged(
                    f"{self.table}: {later.ddl!r} at {later.position} renames or drops the chunk key column "
                    f"{self.split.key_column} while the table's snapshot is in flight; spark-cdc follows DDL "
                    "during a snapshot except on the chunk key. Take a new snapshot (a new checkpoint, state "
                    "directory and sink path)", table=str(self.table), position=later.position,
                    ddl=later.ddl or "")
        self.found = found
        if self.fill is None:
            self.fill = Backfill(self.split, self.lw, found.version.schema, self.order)

    def offer(self, changes: list[ChangeEvent], reader: LogReader, hw: Offset) -> None:
        """Apply the changes of the chunk's window, up to its first DDL (known by now for every
        change of the batch: the reader records a DDL before it yields the changes after it)."""
        if self.found is None and not any(c.table_id == self.table and c.position is not None
                                          and c.position.in_slice(self.lw, hw) for c in changes):
            return  # not past the LW yet (once it is, the first DDL after it is looked up per batch)
        self.settle(reader, hw)
        assert self.fill is not None
        self.fill.offer(changes, self.split_at or hw)

    def result(self, rows: pa.Table) -> pa.Table:
        assert self.fill is not None
        return self.fill.result(rows)


def _emit(items: list[EmitChunk], part: CdcPartition, ctx: TaskContext, orders: _KeyOrders,
          resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    hw, merges = part.high_watermark, []
    for item in items:
        table = TableId.parse(item.table)
        split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
        lw = ctx.dialect.offset_from_dict(ctx.store.staged_low_watermark(table, item.split_id))
        merges.append(_ChunkMerge(split, lw, _staged_schema(ctx, table, item.split_id),
                                  orders.of(table, split.key_column), item.rejoined))
    low = functools.reduce(min_offset, (m.lw for m in merges))
    # From the batch's start, where the history is complete: the DDL before the LWs is recorded
    # (walked over, not decoded), and every DDL up to the HW with its true version number.
    since = part.since if part.since is not None and part.since.is_before(low) else low
    reader = _log_reader(part, ctx, (m.table for m in merges), resources)
    if since.is_before(hw):
        for changes in _batches(reader.changes(since, hw, low)):
            for merge in merges:
                merge.offer(changes, reader, hw)
    pending = _Pending(ctx)
    for merge in merges:
        merge.settle(reader, hw)
        table = merge.table
        rows = merge.result(ctx.store.read_staged(table, merge.split.split_id))
        at = merge.split_at or hw
        envelope = reader.snapshot_rows(table, merge.version, snapshot_envelope(
            merge.version.schema, rows, ctx.dialect.snapshot_source(table, at, part.ts_ms)), part.ts_ms)
        ctx.hooks.reached("emit")
        assert merge.fill is not None
        log.info("emitted %s: %d rows (schema version %d), %d log changes merged%s", merge.split.split_name,
                 rows.num_rows, merge.version.version, merge.fill.applied,
                 f"; a DDL at {at} ends them, its later changes follow as changes" if merge.split_at else "")
        if ctx.writers:
            yield from pending.add(table, envelope, merge.rejoined)
        else:
            yield from ctx.layout.to_stream(table, envelope).to_batches(max_chunksize=BACKFILL_BATCH * 4)
    yield from pending.flush()
    yield from _after_ddl([m for m in merges if m.split_at is not None], reader, hw, ctx)


def _after_ddl(merges: list[_ChunkMerge], reader: LogReader, hw: Offset, ctx: TaskContext) -> Iterator[pa.RecordBatch]:
    """The changes of chunks whose window holds a DDL, from the DDL to the HW: their rows stop
    at the DDL, so these reach the sinks as change rows, each under its own schema version (the
    stream takes the chunks' keys over from the next batch on). One log read per DDL position."""
    by_start: dict[Any, list[_ChunkMerge]] = {}
    for merge in merges:
        by_start.setdefault(json.dumps(merge.split_at.to_dict(), sort_keys=True), []).append(merge)  # type: ignore[union-attr]
    for group in by_start.values():
        start = group[0].split_at
        assert start is not None
        total = 0
        for batch in reader.change_rows(start, hw):
            for merge in group:
                if batch.table_id != merge.table:
                    continue
                rows = ChunkFilter(merge.split, merge.order).keep(batch.rows)
                if not rows.num_rows:
                    continue
                total += rows.num_rows
                if ctx.writers:
                    yield from stage_rows(ctx, ctx.schemas[merge.table], rows, "changes", batch.first)
                else:
                    yield from ctx.layout.to_stream(merge.table, rows).to_batches()
        log.info("%s: %d changes of their keys after the DDL at %s, up to %s",
                 ", ".join(m.split.split_name for m in group), total, start, hw)


def _read_and_emit(items: list[EmitChunk], part: CdcPartition, ctx: TaskContext,
                   resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    """``backfill_skip``: read each chunk and emit its rows as they are, as of the batch's HW.

    The HW was taken when the batch was planned, so before every SELECT here; the rows hold every
    change up to their LW, and the log from the HW on reaches the sinks through later batches'
    stream slices (changes between the HW and the SELECT twice: at-least-once). The next chunk's
    SELECT runs in a thread while this one is written (one chunk ahead: memory stays bounded).
    The log up to each chunk's LW is walked for its DDL (nothing decoded), so that its rows carry
    the schema version in force at their LW.

    Raises:
        CdcError: a chunk's LW lies before the batch's HW (its changes in between could be lost).
    """
    pending = _Pending(ctx)
    walk = _DdlWalk(part, ctx, {TableId.parse(i.table) for i in items}, resources)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="read") as pool:
        # the next chunk's SELECT (waiting on the server) runs while this one is written
        ahead = pool.submit(_read_chunk, items[0], ctx) if items else None
        for i in range(len(items)):
            assert ahead is not None
            split, lw, rows = ahead.result()
            ahead = pool.submit(_read_chunk, items[i + 1], ctx) if i + 1 < len(items) else None
            yield from _emit_read(split, lw, rows, walk, part, ctx, pending, items[i].rejoined)
    yield from pending.flush()


class _DdlWalk:
    """``backfill_skip``: one log reader per task, walked forward to each chunk's LW (from the
    batch's start, where the history is complete) so that the history knows the version there."""

    def __init__(self, part: CdcPartition, ctx: TaskContext, tables: set[TableId],
                 resources: contextlib.ExitStack) -> None:
        self.part, self.ctx, self.tables, self.resources = part, ctx, tables, resources
        self.reader: LogReader | None = None
        self.at: Offset | None = part.since

    def version(self, table: TableId, lw: Offset, read: pa.Schema) -> tuple[LogReader, SchemaVersion]:
        if self.reader is None:
            self.reader = _log_reader(self.part, self.ctx, self.tables, self.resources)
        known = self.reader.version_at(table, lw)
        if known is not None and same_columns(known.schema, read):
            return self.reader, known  # the history explains the rows: no walk (no DDL since)
        if self.at is not None and self.at.is_before(lw):
            for _ in self.reader.changes(self.at, lw, lw):
                pass  # nothing is decoded: the walk records the DDL on the way
            self.at = lw
        return self.reader, self.reader.chunk_version(table, lw, lw, read).version


def _read_chunk(item: EmitChunk, ctx: TaskContext) -> tuple[SnapshotSplit, Offset, pa.Table]:
    table = TableId.parse(item.table)
    split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
    lw, rows = ctx.dialect.read_chunk(ctx.schemas[table], split, functools.partial(ctx.hooks.reached, "low_watermark"))
    return split, lw, rows


def _emit_read(split: SnapshotSplit, lw: Offset, rows: pa.Table, walk: _DdlWalk, part: CdcPartition,
               ctx: TaskContext, pending: _Pending, rejoined: bool) -> Iterator[pa.RecordBatch]:
    """Emit one chunk read without backfill (see :func:`_read_and_emit`)."""
    table = split.table_id
    if lw.is_before(part.high_watermark):
        raise CdcError(f"{split.split_name}: its low watermark {lw} is before the batch's high watermark "
                       f"{part.high_watermark}; the server's log position went backwards")
    reader, version = walk.version(table, lw, rows.schema)
    envelope = reader.snapshot_rows(table, version, snapshot_envelope(
        version.schema, rows, ctx.dialect.snapshot_source(table, part.high_watermark, part.ts_ms)), part.ts_ms)
    ctx.hooks.reached("emit")
    log.info("read and emitted %s: %d rows (LW %s, schema version %d, no backfill)", split.split_name,
             rows.num_rows, lw, version.version)
    if ctx.writers:
        yield from pending.add(table, envelope, rejoined)
    else:
        yield from ctx.layout.to_stream(table, envelope).to_batches(max_chunksize=BACKFILL_BATCH * 4)


class _Pending:
    """Buffers an emit task's snapshot rows per table and schema version; hands them to the
    sinks in sets of about :data:`STAGED_ROWS` (fewer, larger files).

    The rows of a table that joined again are staged as ``changes`` (upserted by key by the
    sinks; :class:`EmitChunk`), before the batch's changes of their keys (``first`` is empty:
    only the changes after a DDL in the chunks' windows share their keys)."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self.tables: dict[tuple[TableId, int, bool], list[pa.Table]] = {}

    def add(self, table: TableId, envelope: pa.Table, rejoined: bool = False) -> Iterator[pa.RecordBatch]:
        if envelope.num_rows:
            tagged = tagged_schema(envelope)
            key = (table, tagged[1] if tagged is not None else 0, rejoined)
            self.tables.setdefault(key, []).append(envelope)
            if sum(t.num_rows for t in self.tables[key]) >= STAGED_ROWS:
                yield from self._stage(key)

    def flush(self) -> Iterator[pa.RecordBatch]:
        for key in list(self.tables):
            yield from self._stage(key)

    def _stage(self, key: tuple[TableId, int, bool]) -> Iterator[pa.RecordBatch]:
        table, _, rejoined = key
        rows = pa.concat_tables(self.tables.pop(key))
        yield from stage_rows(self.ctx, self.ctx.schemas[table], rows, "changes" if rejoined else "snapshot", (),
                              reads=rejoined)


def stage_rows(ctx: TaskContext, schema: TableSchema, rows: pa.Table, stream: StreamKind,
               first: tuple[int, ...], reads: bool = False) -> Iterator[pa.RecordBatch]:
    """Hand one table's rows to every sink's writer; yield the manifest row of what they staged.
    Rows a dialect tagged with a sink schema (:func:`cdc.model.history.with_schema`) are staged
    with it; ``schema`` is the table's otherwise. A set without a row is a DDL handed over
    where it lies (:meth:`sinks.base.SinkWriter.stage`); its manifest row has a null op, source
    and ts_ms (no change). ``reads``: ``changes`` that are snapshot rows (:attr:`sinks.base.Staged.reads`)."""
    staged = [Staged(i, str(schema.table_id), stream, first, rows.num_rows, writer.stage(schema, rows, stream),
                     reads) for i, writer in enumerate(ctx.writers)]
    if rows.num_rows:
        log.info("staged %d %s%s rows of %s in %d sink(s)", rows.num_rows, stream,
                 " (snapshot reads of a table that joined again, upserted)" if reads else "", schema.table_id,
                 len(staged))
    else:
        log.info("staged a schema change of %s (no row) in %d sink(s)", schema.table_id, len(staged))
    last = rows if rows.num_rows else pa.Table.from_arrays([pa.nulls(1, f.type) for f in rows.schema],
                                                          schema=rows.schema)
    yield from ctx.layout.manifest(last, [s.to_dict() for s in staged]).to_batches()


def _stream(item: StreamSlice, part: CdcPartition, ctx: TaskContext, orders: _KeyOrders,
            resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    filters = {}
    for name, region in item.regions.items():
        table = TableId.parse(name)
        order = None if region.everything or region.key_column is None else orders.of(table, region.key_column)
        filters[table] = RegionFilter(region, order)
    follow = [t for t in map(TableId.parse, item.follow) if t in ctx.schemas and t not in filters]
    if not (filters or follow) or not item.start.is_before(item.end):
        return
    reader = _log_reader(part, ctx, filters, resources, follow)
    total, began = 0, time.perf_counter()
    if not filters:  # no rows wanted: the slice is walked for the followed tables' DDL only
        for _ in reader.changes(item.start, item.end, item.end):
            pass
        log.info("followed the DDL of %d table(s) over %s..%s in %.2f s", len(follow), item.start, item.end,
                 time.perf_counter() - began)
        return
    for batch in reader.change_rows(item.start, item.end, item.decode_from):
        ctx.hooks.reached("stream")
        total += batch.rows.num_rows
        if not batch.rows.num_rows:  # a DDL, handed to the sinks where it lies (not with a later change)
            if ctx.writers and tagged_change(batch.rows) is not None:
                yield from stage_rows(ctx, ctx.schemas[batch.table_id], batch.rows, "changes", batch.first)
            continue
        rows = filters[batch.table_id].keep(batch.rows)
        if not rows.num_rows:
            continue
        if ctx.writers:
            yield from stage_rows(ctx, ctx.schemas[batch.table_id], rows, "changes", batch.first)
        else:
            yield from ctx.layout.to_stream(batch.table_id, rows).to_batches()
    log.info("streamed %s..%s%s: %d changes in %.2f s", item.start, item.end,
             f" from {item.decode_from}" if item.decode_from else "", total, time.perf_counter() - began)


def _batches(changes: Iterable[ChangeEvent]) -> Iterator[list[ChangeEvent]]:
    batch: list[ChangeEvent] = []
    for change in changes:
        batch.append(change)
        if len(batch) >= BACKFILL_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
