"""The enumerator: plans micro-batches on the driver (Flink CDC's SplitEnumerator).

Each plan is a :class:`~cdc.spark.offsets.SourceOffset`, what Spark writes to
``<checkpoint>/offsets/N``. It talks to the source only through the dialect: the current log
position (the HW) and the chunk splitter's queries.

Runs on the driver only, in Spark's Python streaming-source process, which lives as long as the
query: the planner keeps one connection open between calls.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from binlog.dialect import Dialect, SupportsBatchCap, SupportsStatePruning
from cdc.model.positions import Offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.offsets import Ranges, SourceOffset, TableProgress, TableState
from cdc.spark.state import StateStore
from chunking.chunks import SnapshotSplit, encode_value
from chunking.splitter import ChunkSplitter, SplitterOptions, SplitterState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannerOptions:
    """How the planner assigns chunks.

    Attributes:
        chunks_per_batch: the most chunks a batch stages (and so the next one emits).
        warmup_chunks: the most chunks a batch stages when it emits none (the first snapshot
            batch): a small first batch starts the stage/emit pipeline sooner. Later batches
            stage at most 4 times what they emit, up to ``chunks_per_batch``, so that staging
            and emitting stay balanced while the pipeline fills.
        splitter: chunk size, distribution-factor bounds.
        snapshot: snapshot the tables (startup modes initial and snapshot).
        stream: read the log (every mode but snapshot).
        backfill_skip: a batch reads its chunks and emits them at once, without the watermark
            merge (``source.backfill_skip``; at-least-once, see :func:`Planner.plan`).
    """

    chunks_per_batch: int = 8
    warmup_chunks: int = 2
    splitter: SplitterOptions = field(default_factory=SplitterOptions)
    snapshot: bool = True
    stream: bool = True
    backfill_skip: bool = False


class Planner:
    """Plans batches: which chunks to stage and emit, and the log slice.

    Args:
        dialect: the source database's dialect.
        schemas: the captured tables.
        store: the state directory.
        options: chunk assignment options.
    """

    def __init__(self, dialect: Dialect, schemas: dict[TableId, TableSchema],
                 store: StateStore, options: PlannerOptions) -> None:
        self.dialect = dialect
        self.schemas = schemas
        self.store = store
        self.options = options
        self._conn: Any = None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def connection(self) -> Any:
        if self._conn is not None:
            try:
                self._conn.ping(reconnect=True)
            except Exception:  # a connection the server dropped: open a new one
                self.close()
        if self._conn is None:
            self._conn = self.dialect.connect()
        return self._conn

    def initial(self) -> SourceOffset:
        """The offset before the first batch: the log from the startup mode's position."""
        conn = self.connection()
        position = self.dialect.startup_offset(conn) or self.dialect.current_offset(conn)
        state: TableState = "pending" if self.options.snapshot else "stream"
        tables = {str(t): TableProgress(state) for t in sorted(self.schemas)}
        return SourceOffset(position=position, ts_ms=_now_ms(), tables=tables)

    def plan(self, start: SourceOffset, target: Offset | None = None,
             max_bytes: int | None = None) -> SourceOffset:
        """The next batch's end offset, or ``start`` itself when there is nothing to do.

        With ``backfill_skip`` a batch emits the chunks it assigns, read by its own tasks, as of
        its HW (read here, so before their SELECTs), and the next batch's stream slice already
        covers their keys: a change between the HW and a chunk's SELECT arrives twice, once in
        the chunk's rows and once from the log (at-least-once; the mirror still ends equal).

        Args:
            start: the end of the last committed batch.
            target: for available-now runs, the log position to stop at once the snapshot
                is done.
            max_bytes: the most bytes of log a batch that emits no chunks reads (Spark's
                ``ReadMaxBytes``; None: up to the server's position). A batch that emits chunks
                is not capped: its end is their HW, which must follow the previous batch's SELECTs.
        """
        if self.options.backfill_skip:
            return self._plan_without_backfill(start, target, max_bytes)
        tables, left = self._with_current_tables(start)
        tables = self._mark_emitted(tables, start.stage)
        budget = min(self.options.chunks_per_batch, max(self.options.warmup_chunks, 4 * _count(start.stage)))
        stage, tables = self._assign(tables, budget)
        hw = self._high_watermark(start, emitting=bool(start.stage), target=target, max_bytes=max_bytes)
        if not stage and not start.stage and hw.compare(start.position) == 0 and tables == start.tables:
            return start
        emit = {name: ids for name, ids in start.stage.items() if name in tables}  # not those of tables that left
        end = SourceOffset(position=hw, ts_ms=_now_ms(), tables=tables, stage=stage, emit=emit, left=left)
        log.info("planned batch: stage %s, emit %s, log at %s", _count(stage), _count(end.emit), hw)
        return end

    def _plan_without_backfill(self, start: SourceOffset, target: Offset | None,
                               max_bytes: int | None) -> SourceOffset:
        tables, left = self._with_current_tables(start)
        emit, tables = self._assign(tables, self.options.chunks_per_batch)
        tables = self._mark_emitted(tables, emit)
        hw = self._high_watermark(start, emitting=bool(emit), target=target, max_bytes=max_bytes)
        if not emit and hw.compare(start.position) == 0 and tables == start.tables:
            return start
        end = SourceOffset(position=hw, ts_ms=_now_ms(), tables=tables, emit=emit, left=left)
        log.info("planned batch: read and emit %s (no backfill), log at %s", _count(emit), hw)
        return end

    def _high_watermark(self, start: SourceOffset, *, emitting: bool, target: Offset | None,
                        max_bytes: int | None) -> Offset:
        """The log end of the next batch; never behind ``start``.

        A batch that emits chunks takes the current position: it is their HW and must be after
        every SELECT of the previous batch. Otherwise snapshot-only runs stay where they are,
        available-now runs stop at their target, and a long slice ends after ``max_bytes``.
        """
        hw = self.dialect.current_offset(self.connection())
        if not emitting:
            if not self.options.stream:
                hw = start.position
            elif target is not None and target.is_before(hw):
                hw = target
            if max_bytes and isinstance(self.dialect, SupportsBatchCap) and start.position.is_before(hw):
                capped = self.dialect.capped_end(self.connection, start.position, hw, max_bytes)
                if capped.is_before(hw):
                    log.info("log slice from %s capped at %d bytes: ends at %s (the server is at %s)",
                             start.position, max_bytes, capped, hw)
                hw = capped
        return start.position if hw.is_before(start.position) else hw

    def forget_emitted(self, committed: SourceOffset) -> None:
        """Delete the state files of chunks whose emission is committed, and the dialect's files
        that only batches before ``committed`` could use (idempotent)."""
        for name, (lo, hi) in committed.emit.items():
            table = TableId.parse(name)
            for split_id in range(lo, hi):
                self.store.forget_chunk(table, split_id)
        if isinstance(self.dialect, SupportsStatePruning):
            self.dialect.prune_state(committed.position)

    def _with_current_tables(self, start: SourceOffset) -> tuple[dict[str, TableProgress], tuple[str, ...]]:
        """Each captured table's progress, and the tables that left the offsets.

        Tables matched since the checkpoint was made join as pending (then snapshot); tables no
        longer captured (dropped, or no longer matched) leave, so that one that comes back joins
        again with a snapshot of its own instead of streaming on after a gap. One that comes back
        is :attr:`~cdc.spark.offsets.TableProgress.rejoined`: its sink tables may hold its keys,
        so its snapshot is upserted."""
        tables = start.tables
        out = {name: p for name, p in tables.items() if TableId.parse(name) in self.schemas}
        gone = sorted(set(tables) - set(out))
        for name in gone:
            log.info("table %s is no longer captured (dropped, or no longer matched): its sink tables stay", name)
        left = set(start.left) | set(gone)
        for t in sorted(self.schemas):
            if str(t) in out:
                continue
            back = str(t) in left
            log.info("table %s is %s this checkpoint: it will be snapshotted, then streamed%s", t,
                     "back in" if back else "new to",
                     "; its snapshot rows are upserted by key (its sink tables may hold them)" if back else "")
            out[str(t)] = TableProgress("pending" if self.options.snapshot else "stream", rejoined=back)
        return out, tuple(sorted(left - set(out)))

    def _mark_emitted(self, tables: dict[str, TableProgress], emitted: Ranges) -> dict[str, TableProgress]:
        out = dict(tables)
        for name, (_, hi) in emitted.items():
            if name not in out:
                continue  # a table that left: its chunks were not emitted
            progress = out[name]
            last = SnapshotSplit.from_dict(self.store.read_json(StateStore.chunk_path(TableId.parse(name), hi - 1)))
            if last.end is None and progress.split_done and hi == progress.assigned:
                out[name] = TableProgress("stream", rejoined=progress.rejoined)
                log.info("snapshot of %s finished (%d chunks)", name, hi)
            else:
                out[name] = replace(progress, emitted=hi, upto=encode_value(last.end))
        return out

    def _assign(self, tables: dict[str, TableProgress], budget: int) -> tuple[Ranges, dict[str, TableProgress]]:
        stage: Ranges = {}
        out = dict(tables)
        for name in sorted(out):
            progress = out[name]
            if budget <= 0 or progress.state == "stream" or progress.split_done:
                continue
            splitter = self._splitter(TableId.parse(name), progress)
            chunks = splitter.next_chunks(budget)
            for chunk in chunks:
                self.store.write_json(StateStore.chunk_path(chunk.table_id, chunk.split_id), chunk.to_dict())
            out[name] = replace(progress, state="snapshot", assigned=progress.assigned + len(chunks),
                                splitter=splitter.state.to_dict(), split_done=splitter.finished)
            if chunks:
                stage[name] = [chunks[0].split_id, chunks[-1].split_id + 1]
                budget -= len(chunks)
        return stage, out

    def _splitter(self, table: TableId, progress: TableProgress) -> ChunkSplitter:
        schema = self.schemas[table]
        column = self.dialect.chunk_key(schema)
        state = SplitterState.from_dict(progress.splitter) if progress.splitter else None
        queries = self.dialect.split_queries(self.connection(), schema, column)
        return ChunkSplitter(queries, schema, column, self.options.splitter, state)


def _count(ranges: Ranges) -> int:
    return sum(hi - lo for lo, hi in ranges.values())


def _now_ms() -> int:
    return int(time.time() * 1000)
