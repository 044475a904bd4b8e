"""The enumerator: plans micro-batches on the driver (Flink CDC's SplitEnumerator).

A :class:`SourceOffset` is what Spark writes to ``<checkpoint>/offsets/N``: the binlog position
read when batch N was planned (the stream slice end, and the HW of the chunks emitted in N), the
snapshot progress of every table after batch N, and the chunks batch N stages and emits. See
docs/source-design.md for why every emitted row is a function of (start, end) and the state files.

Runs on the driver only, in Spark's Python streaming-source process, which lives as long as the
query: the planner keeps one connection open between calls.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from binlog.mysql.connection import ConnectionSettings
from binlog.mysql.reader import current_offset
from cdc.model.positions import BinlogOffset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.state import StateStore
from chunking.chunks import SnapshotSplit, encode_value
from chunking.splitter import ChunkSplitter, SplitterOptions, SplitterState

log = logging.getLogger(__name__)

TableState = Literal["pending", "snapshot", "stream"]
OFFSET_VERSION = 1


@dataclass(frozen=True)
class TableProgress:
    """A table's snapshot progress after a batch.

    Attributes:
        state: ``pending`` (no chunk yet), ``snapshot`` (chunks in flight), ``stream`` (every
            chunk emitted, or the table is not snapshotted: all its changes flow).
        assigned: chunks ``0..assigned-1`` have been given to a batch to stage.
        emitted: chunks ``0..emitted-1`` have been emitted.
        upto: encoded chunk boundary: keys below it (MySQL order) are in emitted chunks.
            None while nothing is emitted.
        splitter: the lazy splitter's state, None before the first chunk.
        split_done: the splitter produced its last chunk.
    """

    state: TableState
    assigned: int = 0
    emitted: int = 0
    upto: Any = None
    splitter: dict[str, Any] | None = None
    split_done: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"state": self.state}
        if self.state == "snapshot":
            d.update(assigned=self.assigned, emitted=self.emitted, upto=self.upto,
                     splitter=self.splitter, split_done=self.split_done)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableProgress:
        return cls(state=d["state"], assigned=d.get("assigned", 0), emitted=d.get("emitted", 0),
                   upto=d.get("upto"), splitter=d.get("splitter"), split_done=d.get("split_done", False))


Ranges = dict[str, list[int]]  # table name -> [first chunk id, last chunk id + 1)


@dataclass(frozen=True)
class SourceOffset:
    """The offset of one micro-batch (its end), as Spark stores it."""

    binlog: BinlogOffset
    ts_ms: int
    tables: dict[str, TableProgress]
    stage: Ranges = field(default_factory=dict)
    emit: Ranges = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": OFFSET_VERSION, "binlog": self.binlog.to_dict(), "ts_ms": self.ts_ms,
            "tables": {t: p.to_dict() for t, p in sorted(self.tables.items())},
            "stage": self.stage, "emit": self.emit,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceOffset:
        if d.get("v") != OFFSET_VERSION:
            raise ValueError(f"offset version {d.get('v')!r} is not {OFFSET_VERSION}: this checkpoint "
                             "was written by another spark-cdc version")
        return cls(binlog=BinlogOffset.from_dict(d["binlog"]), ts_ms=int(d["ts_ms"]),
                   tables={t: TableProgress.from_dict(p) for t, p in d["tables"].items()},
                   stage={t: list(r) for t, r in d.get("stage", {}).items()},
                   emit={t: list(r) for t, r in d.get("emit", {}).items()})

    @property
    def snapshot_done(self) -> bool:
        return all(p.state == "stream" for p in self.tables.values()) and not self.stage and not self.emit


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
        chunk_key_columns: ``db.table`` -> column, for tables without a primary key.
        snapshot: snapshot the tables (startup modes initial and snapshot).
        stream: read the binlog (every mode but snapshot).
    """

    chunks_per_batch: int = 8
    warmup_chunks: int = 2
    splitter: SplitterOptions = field(default_factory=SplitterOptions)
    chunk_key_columns: dict[str, str] = field(default_factory=dict)
    snapshot: bool = True
    stream: bool = True


class Planner:
    """Plans batches: which chunks to stage and emit, and the binlog slice.

    Args:
        settings: connection to the source.
        schemas: the captured tables.
        store: the state directory.
        options: chunk assignment options.
    """

    def __init__(self, settings: ConnectionSettings, schemas: dict[TableId, TableSchema],
                 store: StateStore, options: PlannerOptions) -> None:
        self.settings = settings
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
        if self._conn is None:
            self._conn = self.settings.connect()
        else:
            self._conn.ping(reconnect=True)
        return self._conn

    def initial(self, start: BinlogOffset | None = None) -> SourceOffset:
        """The offset before the first batch: stream from ``start`` (default: now)."""
        binlog = start or current_offset(self.connection())
        state: TableState = "pending" if self.options.snapshot else "stream"
        tables = {str(t): TableProgress(state) for t in sorted(self.schemas)}
        return SourceOffset(binlog=binlog, ts_ms=_now_ms(), tables=tables)

    def plan(self, start: SourceOffset, target: BinlogOffset | None = None) -> SourceOffset:
        """The next batch's end offset, or ``start`` itself when there is nothing to do.

        Args:
            start: the end of the last committed batch.
            target: for available-now runs, the binlog position to stop at once the snapshot
                is done.
        """
        tables = self._with_new_tables(start.tables)
        tables = self._mark_emitted(tables, start.stage)
        budget = min(self.options.chunks_per_batch, max(self.options.warmup_chunks, 4 * _count(start.stage)))
        stage, tables = self._assign(tables, budget)
        hw = self._high_watermark(start, emitting=bool(start.stage), target=target)
        if not stage and not start.stage and hw == start.binlog and tables == start.tables:
            return start
        end = SourceOffset(binlog=hw, ts_ms=_now_ms(), tables=tables, stage=stage, emit=dict(start.stage))
        log.info("planned batch: stage %s, emit %s, binlog %s", _count(stage), _count(end.emit), hw)
        return end

    def _high_watermark(self, start: SourceOffset, *, emitting: bool, target: BinlogOffset | None) -> BinlogOffset:
        """The binlog end of the next batch; never behind ``start``.

        A batch that emits chunks takes the current position: it is their HW and must be after
        every SELECT of the previous batch. Otherwise snapshot-only runs stay where they are and
        available-now runs stop at their target.
        """
        hw = current_offset(self.connection())
        if not emitting:
            if not self.options.stream:
                hw = start.binlog
            elif target is not None and target.is_before(hw):
                hw = target
        return start.binlog if hw.is_before(start.binlog) else hw

    def forget_emitted(self, committed: SourceOffset) -> None:
        """Delete the state files of chunks whose emission is committed (idempotent)."""
        for name, (lo, hi) in committed.emit.items():
            table = TableId.parse(name)
            for split_id in range(lo, hi):
                self.store.forget_chunk(table, split_id)

    def _with_new_tables(self, tables: dict[str, TableProgress]) -> dict[str, TableProgress]:
        """Tables matched since the checkpoint was made join as pending (then snapshot)."""
        out = dict(tables)
        for t in sorted(self.schemas):
            if str(t) not in out:
                log.info("table %s is new to this checkpoint: it will be snapshotted, then streamed", t)
                out[str(t)] = TableProgress("pending" if self.options.snapshot else "stream")
        return out

    def _mark_emitted(self, tables: dict[str, TableProgress], emitted: Ranges) -> dict[str, TableProgress]:
        out = dict(tables)
        for name, (_, hi) in emitted.items():
            progress = out[name]
            last = SnapshotSplit.from_dict(self.store.read_json(StateStore.chunk_path(TableId.parse(name), hi - 1)))
            if last.end is None and progress.split_done and hi == progress.assigned:
                out[name] = TableProgress("stream")
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
        options = replace(self.options.splitter, chunk_key_column=self.options.chunk_key_columns.get(str(table)))
        state = SplitterState.from_dict(progress.splitter) if progress.splitter else None
        return ChunkSplitter(self.connection(), self.schemas[table], options, state)


def _count(ranges: Ranges) -> int:
    return sum(hi - lo for lo, hi in ranges.values())


def _now_ms() -> int:
    return int(time.time() * 1000)
