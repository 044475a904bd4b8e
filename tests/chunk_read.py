"""The lock-free read of one chunk, composed from the dialect's pieces as the job composes them
across two micro-batches: LW, SELECT, HW, then the backfill of the log (LW, HW].

The job splits this over two batches (stage, then emit); the tests run it back to back, with
hooks between the steps where they inject writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from binlog.mysql.dialect import MySqlDialect
from binlog.mysql.positions import BinlogOffset
from binlog.mysql.server import low_watermark
from cdc.model.schema import TableSchema
from chunking.backfill import Backfill
from chunking.chunks import SnapshotSplit

Hook = Callable[[], None]


@dataclass(frozen=True)
class ReadHooks:
    """Callables run between the steps of a chunk read."""

    after_low_watermark: Hook | None = None
    after_select: Hook | None = None


@dataclass(frozen=True)
class ChunkResult:
    """A chunk's rows as of ``high_watermark``."""

    split: SnapshotSplit
    rows: pa.Table
    low_watermark: BinlogOffset
    high_watermark: BinlogOffset
    changes_applied: int = 0


def read_chunk(dialect: MySqlDialect, schema: TableSchema, split: SnapshotSplit, server_id: int,
               hooks: ReadHooks | None = None) -> ChunkResult:
    """Read one chunk lock-free; its rows equal the chunk's state at the returned HW."""
    hooks = hooks or ReadHooks()
    with contextlib.closing(dialect.connect()) as conn:
        lw = low_watermark(conn)
        if hooks.after_low_watermark:
            hooks.after_low_watermark()
        rows = dialect.select_chunk(schema, split)
        if hooks.after_select:
            hooks.after_select()
        hw = dialect.current_offset(conn)
        fill = Backfill(split, lw, schema, dialect.key_order(schema.column(split.key_column), conn))
        if lw.is_before(hw):
            with dialect.log_reader(server_id, [schema]) as reader:
                fill.offer(reader.changes(lw, hw), hw)
        return ChunkResult(split, fill.result(rows), lw, hw, fill.applied)
