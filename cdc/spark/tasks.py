"""The executor side of the source: the work one Spark task does for one micro-batch.

A :class:`CdcPartition` is a list of work items run in order, with the log reader id its reads
use. Three kinds of work (docs/architecture.md, "Why stage, then emit"):

* :class:`StageChunk`: the dialect records the chunk's LW and reads its rows; they go to the
  state directory. No rows are emitted.
* :class:`EmitChunk`: chunks staged by the previous batch, merged with the log (LW, HW] into
  ``op='r'`` rows (:class:`~chunking.backfill.Backfill`). One log read per partition feeds all of
  its chunks.
* :class:`StreamSlice`: the log slice (start, end] of the batch (Flink CDC's ``StreamSplit``),
  keeping the changes whose key lies in a chunk emitted before this batch (``shouldEmit``).

With sinks (the job's case) the task hands its rows to every sink's writer, which stages them,
and yields one manifest row per staged set instead of the rows (:class:`~sinks.base.Staged`).
Every row is a function of the partition and the state files, so a replayed batch emits the same
rows. Connections open here, never on the driver.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from binlog.dialect import Dialect
from cdc.model.envelope import snapshot_envelope
from cdc.model.errors import CdcError
from cdc.model.events import ChangeEvent
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.positions import Offset, min_offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.layout import StreamLayout
from cdc.spark.state import StateStore
from chunking.backfill import Backfill, Region, RegionFilter
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
    """Emit chunk ``split_id`` of ``table``, staged by the previous batch, as of the batch's HW."""

    table: str
    split_id: int


@dataclass(frozen=True)
class StreamSlice:
    """The log slice ``(start, end]`` (Flink CDC's ``StreamSplit``), or the piece of it from
    ``decode_from`` on (every reader of a cut slice starts at ``start``)."""

    start: Offset
    end: Offset
    regions: dict[str, Region]
    decode_from: Offset | None = None


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
    """One task's work for one batch."""

    def __init__(self, index: int, reader_id: int, items: list[Any], high_watermark: Offset,
                 ts_ms: int) -> None:
        super().__init__(index)
        self.index = index
        self.reader_id = reader_id
        self.items = items
        self.high_watermark = high_watermark
        self.ts_ms = ts_ms

    def __repr__(self) -> str:
        return f"CdcPartition({self.index}, reader {self.reader_id}, {len(self.items)} items)"


def run_partition(part: CdcPartition, ctx: TaskContext) -> Iterator[pa.RecordBatch]:
    """Run a partition's work items in order, yielding the stream's record batches."""
    stages = [i for i in part.items if isinstance(i, StageChunk)]
    emits = [i for i in part.items if isinstance(i, EmitChunk)]
    streams = [i for i in part.items if isinstance(i, StreamSlice)]
    if ctx.dialect.config.backfill_skip:
        yield from _read_and_emit(emits, part, ctx)
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
        lw, rows = ctx.dialect.read_chunk(ctx.schemas[table], split)
        ctx.hooks.reached("stage")
        ctx.store.write_staged(table, item.split_id, rows, lw)
        log.info("staged %s: %d rows (LW %s)", split.split_name, rows.num_rows, lw)


def _log_reader(part: CdcPartition, ctx: TaskContext, tables: Iterable[TableId],
                resources: contextlib.ExitStack) -> Any:
    schemas = [ctx.schemas[t] for t in sorted(set(tables))]
    return resources.enter_context(ctx.dialect.log_reader(part.reader_id, schemas))


def _emit(items: list[EmitChunk], part: CdcPartition, ctx: TaskContext, orders: _KeyOrders,
          resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    hw, fills = part.high_watermark, []
    for item in items:
        table = TableId.parse(item.table)
        split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
        lw = ctx.dialect.offset_from_dict(ctx.store.staged_low_watermark(table, item.split_id))
        fills.append(Backfill(split, lw, ctx.schemas[table], orders.of(table, split.key_column)))
    low = functools.reduce(min_offset, (f.low_watermark for f in fills))
    if low.is_before(hw):
        reader = _log_reader(part, ctx, (f.schema.table_id for f in fills), resources)
        for changes in _batches(reader.changes(low, hw)):
            for fill in fills:
                fill.offer(changes, hw)
    pending = _Pending(ctx)
    for fill in fills:
        table = fill.schema.table_id
        rows = fill.result(ctx.store.read_staged(table, fill.split.split_id))
        envelope = snapshot_envelope(fill.schema, rows, ctx.dialect.snapshot_source(table, hw, part.ts_ms))
        ctx.hooks.reached("emit")
        log.info("emitted %s: %d rows, %d log changes merged", fill.split.split_name, rows.num_rows, fill.applied)
        if ctx.writers:
            yield from pending.add(fill.schema, envelope)
        else:
            yield from ctx.layout.to_stream(table, envelope).to_batches(max_chunksize=BACKFILL_BATCH * 4)
    yield from pending.flush()


def _read_and_emit(items: list[EmitChunk], part: CdcPartition, ctx: TaskContext) -> Iterator[pa.RecordBatch]:
    """``backfill_skip``: read each chunk and emit its rows as they are, as of the batch's HW.

    The HW was taken when the batch was planned, so before every SELECT here; the rows hold every
    change up to their LW, and the log from the HW on reaches the sinks through later batches'
    stream slices (changes between the HW and the SELECT twice: at-least-once). The next chunk's
    SELECT runs in a thread while this one is written (one chunk ahead: memory stays bounded).

    Raises:
        CdcError: a chunk's LW lies before the batch's HW (its changes in between could be lost).
    """
    pending = _Pending(ctx)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="read") as pool:
        # the next chunk's SELECT (waiting on the server) runs while this one is written
        ahead = pool.submit(_read_chunk, items[0], ctx) if items else None
        for i in range(len(items)):
            assert ahead is not None
            split, lw, rows = ahead.result()
            ahead = pool.submit(_read_chunk, items[i + 1], ctx) if i + 1 < len(items) else None
            yield from _emit_read(split, lw, rows, part, ctx, pending)
    yield from pending.flush()


def _read_chunk(item: EmitChunk, ctx: TaskContext) -> tuple[SnapshotSplit, Offset, pa.Table]:
    table = TableId.parse(item.table)
    split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
    lw, rows = ctx.dialect.read_chunk(ctx.schemas[table], split)
    return split, lw, rows


def _emit_read(split: SnapshotSplit, lw: Offset, rows: pa.Table, part: CdcPartition, ctx: TaskContext,
               pending: _Pending) -> Iterator[pa.RecordBatch]:
    """Emit one chunk read without backfill (see :func:`_read_and_emit`)."""
    table = split.table_id
    if lw.is_before(part.high_watermark):
        raise CdcError(f"{split.split_name}: its low watermark {lw} is before the batch's high watermark "
                       f"{part.high_watermark}; the server's log position went backwards")
    envelope = snapshot_envelope(ctx.schemas[table], rows,
                                 ctx.dialect.snapshot_source(table, part.high_watermark, part.ts_ms))
    ctx.hooks.reached("emit")
    log.info("read and emitted %s: %d rows (LW %s, no backfill)", split.split_name, rows.num_rows, lw)
    if ctx.writers:
        yield from pending.add(ctx.schemas[table], envelope)
    else:
        yield from ctx.layout.to_stream(table, envelope).to_batches(max_chunksize=BACKFILL_BATCH * 4)


class _Pending:
    """Buffers an emit task's snapshot rows per table; hands them to the sinks in sets of
    about :data:`STAGED_ROWS` (fewer, larger files)."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self.tables: dict[TableId, tuple[TableSchema, list[pa.Table]]] = {}

    def add(self, schema: TableSchema, envelope: pa.Table) -> Iterator[pa.RecordBatch]:
        if envelope.num_rows:
            self.tables.setdefault(schema.table_id, (schema, []))[1].append(envelope)
            if sum(t.num_rows for t in self.tables[schema.table_id][1]) >= STAGED_ROWS:
                yield from self._stage(schema.table_id)

    def flush(self) -> Iterator[pa.RecordBatch]:
        for table in list(self.tables):
            yield from self._stage(table)

    def _stage(self, table: TableId) -> Iterator[pa.RecordBatch]:
        schema, parts = self.tables.pop(table)
        yield from stage_rows(self.ctx, schema, pa.concat_tables(parts), "snapshot", ())


def stage_rows(ctx: TaskContext, schema: TableSchema, rows: pa.Table, stream: StreamKind,
               first: tuple[int, ...]) -> Iterator[pa.RecordBatch]:
    """Hand one table's rows to every sink's writer; yield the manifest row of what they staged."""
    staged = [Staged(i, str(schema.table_id), stream, first, rows.num_rows, writer.write(schema, rows, stream))
              for i, writer in enumerate(ctx.writers)]
    log.info("staged %d %s rows of %s in %d sink(s)", rows.num_rows, stream, schema.table_id, len(staged))
    yield from ctx.layout.manifest(rows, [s.to_dict() for s in staged]).to_batches()


def _stream(item: StreamSlice, part: CdcPartition, ctx: TaskContext, orders: _KeyOrders,
            resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    filters = {}
    for name, region in item.regions.items():
        table = TableId.parse(name)
        order = None if region.everything or region.key_column is None else orders.of(table, region.key_column)
        filters[table] = RegionFilter(region, order)
    if not filters or not item.start.is_before(item.end):
        return
    reader = _log_reader(part, ctx, filters, resources)
    total, began = 0, time.perf_counter()
    for batch in reader.change_rows(item.start, item.end, item.decode_from):
        ctx.hooks.reached("stream")
        total += batch.rows.num_rows
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
