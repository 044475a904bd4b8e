"""The executor side of the source: the work one Spark task does for one micro-batch.

A :class:`CdcPartition` is a list of work items run in order, with the server id its binlog
reads use. Three kinds of work (docs/source-design.md):

* :class:`StageItem`: record LW, SELECT the chunk, write it to the state directory. No rows.
* :class:`EmitItem`: chunks staged by the previous batch, merged with the binlog (LW, HW] into
  ``op='r'`` rows. One binlog read per partition feeds all of its chunks. With a snapshot
  hand-off (cdc/handoff.py) the task writes those rows to the sink's files itself and yields
  one manifest row per file set.
* :class:`StreamItem`: the binlog slice (start, end] of the batch, keeping the changes whose key
  lies in a chunk emitted before this batch (Flink CDC's ``shouldEmit``).

Every row is a function of the partition and the state files, so a replayed batch emits the
same rows. Connections open here, never on the driver.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from binlog.mysql.blocks import ChangeBlock
from binlog.mysql.change_rows import block_envelope
from binlog.mysql.connection import ConnectionSettings
from binlog.mysql.fetch import BackendName
from binlog.mysql.keys import KeyOrder, select_chunk_key
from binlog.mysql.reader import BinlogReaderConfig, MySqlBinlogReader
from cdc.model.envelope import SnapshotSource, snapshot_envelope
from cdc.model.events import ChangeEvent
from cdc.model.positions import BinlogOffset, min_offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark import faults
from cdc.spark.handoff import SnapshotHandoff
from cdc.spark.layout import StreamLayout
from cdc.spark.state import StateStore
from chunking.chunks import SnapshotSplit, decode_value
from chunking.reader import Backfill, stage_chunk

log = logging.getLogger(__name__)

EVENT_BLOCK = 4096  # binlog changes merged into staged chunks at a time
STREAM_ROWS = 65_536  # binlog changes turned into stream rows at a time
HANDOFF_ROWS = 131_072  # snapshot rows of one table buffered by an emit task before it writes files


@dataclass(frozen=True)
class StageItem:
    table: str
    split_id: int


@dataclass(frozen=True)
class EmitItem:
    table: str
    split_id: int


@dataclass(frozen=True)
class Region:
    """The finished key region of a table when a batch starts: keys below ``upto`` flow.

    ``everything`` means the table is streaming (snapshot finished or skipped).
    """

    everything: bool
    upto: Any = None  # encoded boundary value (chunking.chunks.encode_value)
    key_column: str | None = None


@dataclass(frozen=True)
class StreamItem:
    """The binlog slice ``(start, end]``, or the piece of it from ``decode_from`` on (the
    tasks of a split slice all start reading at ``start``; see cdc.model.positions.byte_cuts)."""

    start: BinlogOffset
    end: BinlogOffset
    regions: dict[str, Region]
    decode_from: BinlogOffset | None = None


@dataclass(frozen=True)
class TaskContext:
    """What every task needs; built on the driver, pickled to executors."""

    settings: ConnectionSettings
    schemas: dict[TableId, TableSchema]
    store: StateStore
    layout: StreamLayout
    name: str
    fetch_backend: BackendName = "auto"
    handoff: SnapshotHandoff | None = None


class CdcPartition(InputPartition):
    """One task's work for one batch."""

    def __init__(self, index: int, server_id: int, items: list[Any], high_watermark: BinlogOffset,
                 ts_ms: int) -> None:
        super().__init__(index)
        self.index = index
        self.server_id = server_id
        self.items = items
        self.high_watermark = high_watermark
        self.ts_ms = ts_ms

    def __repr__(self) -> str:
        kinds = [type(i).__name__ for i in self.items]
        return f"CdcPartition({self.index}, server_id={self.server_id}, {len(kinds)} items)"


def run_partition(part: CdcPartition, ctx: TaskContext) -> Iterator[pa.RecordBatch]:
    """Run a partition's work items in order, yielding the stream's record batches."""
    stages = [i for i in part.items if isinstance(i, StageItem)]
    emits = [i for i in part.items if isinstance(i, EmitItem)]
    streams = [i for i in part.items if isinstance(i, StreamItem)]
    if not emits and not streams:
        for item in stages:
            _stage(item, ctx)
        return
    # Staging waits on the server's SELECTs, emitting on Parquet writes; both release the GIL,
    # so one task does both at once (the pipeline's two halves on one core).
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stage") as pool, \
            contextlib.ExitStack() as resources:
        staging = pool.submit(_stage_all, stages, ctx) if stages else None
        conn = resources.enter_context(contextlib.closing(ctx.settings.connect()))
        if emits:
            yield from _emit(emits, part, ctx, conn, resources)
        for stream in streams:
            yield from _stream(stream, part, ctx, conn, resources)
        if staging is not None:
            staging.result()  # re-raises a staging failure in the task


def _stage_all(items: list[StageItem], ctx: TaskContext) -> None:
    for item in items:
        _stage(item, ctx)


def _stage(item: StageItem, ctx: TaskContext) -> None:
    table = TableId.parse(item.table)
    split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
    staged = stage_chunk(ctx.settings, ctx.schemas[table], split, fetch_backend=ctx.fetch_backend)
    faults.check(ctx.store, "stage")
    ctx.store.write_staged(table, item.split_id, staged.rows, staged.low_watermark)
    log.info("staged %s: %d rows (LW %s)", split.split_name, staged.rows.num_rows, staged.low_watermark)


def _binlog(part: CdcPartition, ctx: TaskContext, tables: Iterable[TableId],
            resources: contextlib.ExitStack) -> MySqlBinlogReader:
    config = BinlogReaderConfig(connection=ctx.settings, server_id=part.server_id,
                                tables=tuple(sorted(set(tables))))
    return resources.enter_context(MySqlBinlogReader(config))


def _emit(items: list[EmitItem], part: CdcPartition, ctx: TaskContext, conn: Any,
          resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    hw, fills = part.high_watermark, []
    orders: dict[tuple[TableId, str], KeyOrder] = {}
    for item in items:
        table = TableId.parse(item.table)
        split = SnapshotSplit.from_dict(ctx.store.read_json(StateStore.chunk_path(table, item.split_id)))
        key = (table, split.key_column)
        if key not in orders:
            orders[key] = KeyOrder(ctx.schemas[table].column(split.key_column), conn)
        lw = ctx.store.staged_low_watermark(table, item.split_id)
        fills.append(Backfill(split, lw, ctx.schemas[table], orders[key]))
    low = functools.reduce(min_offset, (f.low_watermark for f in fills))
    if low.is_before(hw):
        reader = _binlog(part, ctx, (f.schema.table_id for f in fills), resources)
        for block in _blocks(reader.read(low, hw)):
            for fill in fills:
                fill.offer(block, hw)
    source = SnapshotSource(name=ctx.name, server_id=0, file=hw.file, pos=hw.pos, gtid=hw.gtid, ts_ms=part.ts_ms)
    pending = _Handoff(ctx)
    for fill in fills:
        table = fill.schema.table_id
        rows = fill.result(ctx.store.read_staged(table, fill.split.split_id))
        envelope = snapshot_envelope(table, fill.schema, rows, source)
        faults.check(ctx.store, "emit")
        log.info("emitted %s: %d rows, %d binlog changes merged", fill.split.split_name, rows.num_rows, fill.applied)
        if ctx.handoff is None:
            yield from ctx.layout.to_stream(table, envelope).to_batches(max_chunksize=EVENT_BLOCK * 4)
        else:
            yield from pending.add(fill.schema, envelope)
    yield from pending.flush()


class _Handoff:
    """Buffers an emit task's snapshot rows per table; writes them as files, yields manifests."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self.tables: dict[TableId, tuple[TableSchema, list[pa.Table]]] = {}

    def add(self, schema: TableSchema, envelope: pa.Table) -> Iterator[pa.RecordBatch]:
        if envelope.num_rows:
            self.tables.setdefault(schema.table_id, (schema, []))[1].append(envelope)
            if sum(t.num_rows for t in self.tables[schema.table_id][1]) >= HANDOFF_ROWS:
                yield from self._write(schema.table_id)

    def flush(self) -> Iterator[pa.RecordBatch]:
        for table in list(self.tables):
            yield from self._write(table)

    def _write(self, table: TableId) -> Iterator[pa.RecordBatch]:
        schema, parts = self.tables.pop(table)
        rows = pa.concat_tables(parts)
        assert self.ctx.handoff is not None
        files = self.ctx.handoff.write(schema, rows)
        log.info("handed off %d snapshot rows of %s as %d files", rows.num_rows, table, len(files))
        yield from self.ctx.layout.manifest(rows, files).to_batches()


def _stream(item: StreamItem, part: CdcPartition, ctx: TaskContext, conn: Any,
            resources: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    filters = {TableId.parse(t): _RegionFilter(ctx.schemas[TableId.parse(t)], r, conn)
               for t, r in item.regions.items()}
    if not filters or not item.start.is_before(item.end):
        return
    reader = _binlog(part, ctx, filters, resources)
    pending: list[ChangeBlock] = []
    rows = total = 0
    began = time.perf_counter()
    for block in reader.read_blocks(item.start, item.end, decode_from=item.decode_from):
        pending.append(block)
        rows += block.num_rows
        if rows >= STREAM_ROWS:
            yield from _stream_rows(pending, filters, ctx)
            pending, total, rows = [], total + rows, 0
    if pending:
        yield from _stream_rows(pending, filters, ctx)
    log.info("streamed binlog %s..%s%s: %d changes in %.2f s", item.start, item.end,
             f" from {item.decode_from}" if item.decode_from else "", total + rows, time.perf_counter() - began)


def _stream_rows(blocks: list[ChangeBlock], filters: dict[TableId, _RegionFilter],
                 ctx: TaskContext) -> Iterator[pa.RecordBatch]:
    """The stream's rows for consecutive change blocks, per table, column-wise."""
    faults.check(ctx.store, "stream")
    by_table: dict[TableId, list[ChangeBlock]] = {}
    for block in blocks:
        by_table.setdefault(block.table_id, []).append(block)
    for table, mine in by_table.items():
        envelope = filters[table].keep(block_envelope(ctx.schemas[table], mine, name=ctx.name))
        if not envelope.num_rows:
            continue
        if ctx.handoff is None:
            yield from ctx.layout.to_stream(table, envelope).to_batches()
        else:
            files = ctx.handoff.write(ctx.schemas[table], envelope, "changes")
            yield from ctx.layout.manifest(envelope, files).to_batches()


class _RegionFilter:
    """Keeps the changes whose key lies in a table's finished region."""

    def __init__(self, schema: TableSchema, region: Region, conn: Any) -> None:
        self.region = region
        self.column = region.key_column
        self.order: KeyOrder | None = None
        self.bound: Any = None
        if not region.everything:
            assert self.column is not None
            self.order = KeyOrder(schema.column(self.column), conn)
            self.bound = self.order.bound_key(decode_value(region.upto))

    def keep(self, envelope: pa.Table) -> pa.Table:
        """The change rows (``cdc.model.envelope`` layout) whose key (before image for deletes) is in."""
        if self.region.everything or not envelope.num_rows:
            return envelope
        assert self.order is not None and self.column is not None
        keys = pc.if_else(pc.equal(envelope["op"], "d"), pc.struct_field(envelope["before"], self.column),
                          pc.struct_field(envelope["after"], self.column))
        sort_keys = self.order.sort_keys(keys.to_pylist())
        return envelope.filter(pa.array([k < self.bound for k in sort_keys], pa.bool_()))


def region_for(schema: TableSchema, state: str, upto: Any, chunk_key_column: str | None) -> Region | None:
    """The region a table contributes to a stream slice (None: nothing of it flows yet)."""
    if state == "stream":
        return Region(everything=True)
    if state == "snapshot" and upto is not None:
        column = select_chunk_key(schema, chunk_key_column).name
        return Region(everything=False, upto=upto, key_column=column)
    return None


def _blocks(changes: Iterable[ChangeEvent]) -> Iterator[list[ChangeEvent]]:
    block: list[ChangeEvent] = []
    for change in changes:
        block.append(change)
        if len(block) >= EVENT_BLOCK:
            yield block
            block = []
    if block:
        yield block
