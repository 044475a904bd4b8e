"""The lock-free chunk reader: a chunk's exact state at a known binlog position (DBLog).

Flink CDC 2.0's refinement of DBLog, in two halves so the Spark source can run them in different
micro-batches (see docs/source-design.md):

* :func:`stage_chunk`: record the low watermark (LW), then SELECT the chunk's key range with a
  streaming fetch into Arrow. No locks: the SELECT is one autocommit statement (one InnoDB
  consistent read). The LW comes from :func:`binlog.mysql.low_watermark`, which on MariaDB is the
  binlog position of a consistent snapshot taken just before the SELECT, so no transaction can be
  in the binlog before LW yet invisible to the SELECT.
* :class:`Backfill`: given the binlog changes of the table in ``(LW, HW]``, apply those whose key
  lies in the chunk to the staged rows: an insert or update puts the after image, a delete (or
  the old key of a key-changing update) removes the key; keys outside the chunk are ignored. The
  result is the chunk's state at HW, whatever happened while the SELECT ran.

:class:`ChunkReader` runs both halves back to back (LW, SELECT, HW, binlog (LW, HW], merge), which
is the whole algorithm for one chunk; ``backfill_skip`` returns the SELECT rows unmerged
(at-least-once: the stream must then start from LW, and replays changes the rows already hold).

Memory is bounded by the chunk: the staged rows plus one entry per changed key of the chunk.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from binlog.mysql.connection import ConnectionSettings
from binlog.mysql.fetch import BackendName, fetch_arrow
from binlog.mysql.keys import KeyOrder
from binlog.mysql.reader import BinlogReaderConfig, MySqlBinlogReader, current_offset, low_watermark
from cdc.model.envelope import SnapshotSource, snapshot_envelope
from cdc.model.events import ChangeEvent, Row
from cdc.model.positions import BinlogOffset
from cdc.model.schema import TableSchema
from chunking.chunks import SnapshotSplit

log = logging.getLogger(__name__)

_KEY_BLOCK = 1024  # events whose keys are placed in the chunk with one batched sort-key lookup

Hook = Callable[[], None]


@dataclass(frozen=True)
class ReadHooks:
    """Test hooks: callables run between the steps of a chunk read (never set in production)."""

    after_low_watermark: Hook | None = None
    after_select: Hook | None = None


@dataclass(frozen=True)
class StagedChunk:
    """A chunk's SELECT result and the low watermark recorded before it."""

    split: SnapshotSplit
    low_watermark: BinlogOffset
    rows: pa.Table


@dataclass(frozen=True)
class ChunkResult:
    """A chunk's rows as of ``high_watermark`` (flat, ``TableSchema.arrow_schema()``)."""

    split: SnapshotSplit
    rows: pa.Table
    low_watermark: BinlogOffset
    high_watermark: BinlogOffset
    changes_applied: int = 0

    def envelope(self, schema: TableSchema, *, name: str, server_id: int, ts_ms: int) -> pa.Table:
        """The rows as Debezium ``op='r'`` change rows, positioned at the high watermark."""
        hw = self.high_watermark
        source = SnapshotSource(name=name, server_id=server_id, file=hw.file, pos=hw.pos,
                                gtid=hw.gtid, ts_ms=ts_ms)
        return snapshot_envelope(schema.table_id, schema, self.rows, source)


def stage_chunk(settings: ConnectionSettings, schema: TableSchema, split: SnapshotSplit, *,
                fetch_backend: BackendName = "auto", hooks: ReadHooks = ReadHooks()) -> StagedChunk:
    """Record LW, then SELECT the chunk into one Arrow table. Runs where the chunk is read.

    Raises:
        SourceUnreachable, AuthenticationFailed, MissingPrivilege: connecting or reading.
    """
    with contextlib.closing(settings.connect()) as conn:
        lw = low_watermark(conn)
    if hooks.after_low_watermark:
        hooks.after_low_watermark()
    batches = list(fetch_arrow(settings, schema, *split.where_clause(), backend=fetch_backend))
    rows = pa.Table.from_batches(batches, schema=schema.arrow_schema())
    log.debug("staged %s: %d rows at LW %s", split.split_name, rows.num_rows, lw)
    return StagedChunk(split=split, low_watermark=lw, rows=rows)


@dataclass
class Backfill:
    """Applies binlog changes of ``(LW, HW]`` to one chunk.

    Feed it the table's changes in binlog order (changes of other tables, or before LW, are
    skipped), then pass the chunk's staged rows to :meth:`result`. It keeps one entry per changed
    key of the chunk, not the rows, so one binlog read can feed many chunks before their staged
    rows are loaded. Key membership follows the server's ordering of the chunk key (collations
    included), through ``order``.

    Args:
        split: the chunk.
        low_watermark: the LW recorded before the chunk's SELECT.
        schema: the table.
        order: the chunk key's ordering (needs a connection for collated string keys).
    """

    split: SnapshotSplit
    low_watermark: BinlogOffset
    schema: TableSchema
    order: KeyOrder
    applied: int = 0
    _latest: dict[tuple[Any, ...], Row | None] = field(default_factory=dict)  # key -> image/None
    _delta: Counter[tuple[Any, ...]] = field(default_factory=Counter)  # keyless tables

    def offer(self, changes: Iterable[ChangeEvent], high_watermark: BinlogOffset) -> None:
        """Apply the changes that lie in ``(LW, high_watermark]`` and belong to this chunk."""
        block: list[ChangeEvent] = []
        for change in changes:
            if change.table_id != self.schema.table_id or change.position is None:
                continue
            if not change.position.in_slice(self.low_watermark, high_watermark):
                continue
            block.append(change)
            if len(block) >= _KEY_BLOCK:
                self._apply(block)
                block = []
        if block:
            self._apply(block)

    def _apply(self, block: Sequence[ChangeEvent]) -> None:
        key = self.split.key_column
        images = [img for e in block for img in (e.before, e.after) if img is not None]
        sort_keys = self.order.sort_keys([img[key] for img in images])
        inside = iter([self.split.contains(sk, self.order) for sk in sort_keys])
        for change in block:  # consumes one membership flag per image, in the same order
            if change.before is not None and next(inside):
                self._remove(change.before)
            if change.after is not None and next(inside):
                self._put(change.after)

    def _identity(self, row: Row) -> tuple[Any, ...]:
        columns = self.schema.primary_key or tuple(self.schema.column_names)
        return tuple(row[c] for c in columns)

    def _remove(self, row: Row) -> None:
        self.applied += 1
        if self.schema.primary_key:
            self._latest[self._identity(row)] = None
        else:
            self._delta[self._identity(row)] -= 1

    def _put(self, row: Row) -> None:
        self.applied += 1
        if self.schema.primary_key:
            self._latest[self._identity(row)] = row
        else:
            self._delta[self._identity(row)] += 1

    def result(self, rows: pa.Table) -> pa.Table:
        """The chunk's staged ``rows`` after the changes offered so far."""
        if self.schema.primary_key:
            return _apply_latest(rows, self.schema, self._latest)
        return _apply_delta(rows, self.schema, self._delta)


def _apply_latest(rows: pa.Table, schema: TableSchema, latest: dict[tuple[Any, ...], Row | None]) -> pa.Table:
    """Drop every changed key from ``rows``, then append the surviving after images."""
    if not latest:
        return rows
    target = schema.arrow_schema()
    pk = list(schema.primary_key)
    keys = pa.table({c: pa.array([k[i] for k in latest], target.field(c).type) for i, c in enumerate(pk)})
    kept = rows.join(keys, keys=pk, join_type="left anti").select(schema.column_names)
    puts = [row for row in latest.values() if row is not None]
    added = pa.Table.from_pylist([{c: r.get(c) for c in schema.column_names} for r in puts], schema=target)
    return pa.concat_tables([kept.cast(target), added])


def _apply_delta(rows: pa.Table, schema: TableSchema, delta: Counter[tuple[Any, ...]]) -> pa.Table:
    """Keyless tables: rows are a multiset; a delete removes one copy of an identical row."""
    delta = Counter({k: n for k, n in delta.items() if n})
    if not delta:
        return rows
    names = schema.column_names
    counts: Counter[tuple[Any, ...]] = Counter(tuple(r[c] for c in names) for r in rows.to_pylist())
    counts.update(delta)
    out = [dict(zip(names, k, strict=True)) for k, n in counts.items() for _ in range(max(n, 0))]
    return pa.Table.from_pylist(out, schema=schema.arrow_schema())


@dataclass(frozen=True)
class ChunkReaderOptions:
    """How :class:`ChunkReader` reads chunks.

    Attributes:
        server_id: the replica id its binlog reads use (unique among concurrent readers).
        backfill_skip: return SELECT rows without the (LW, HW] merge (at-least-once; off).
        fetch_backend: which SELECT-to-Arrow backend to use (see chunking/fetch.py).
    """

    server_id: int
    backfill_skip: bool = False
    fetch_backend: BackendName = "auto"


class ChunkReader:
    """Reads whole chunks of one table lock-free: LW, SELECT, HW, backfill (LW, HW].

    Opens its connections lazily; close it (or use ``with``) to release them.
    """

    def __init__(self, settings: ConnectionSettings, schema: TableSchema, options: ChunkReaderOptions) -> None:
        self.settings = settings
        self.schema = schema
        self.options = options
        self._conn: Any = None
        self._binlog: MySqlBinlogReader | None = None
        self._orders: dict[str, KeyOrder] = {}

    def __enter__(self) -> ChunkReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._binlog is not None:
            self._binlog.close()
            self._binlog = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def read(self, split: SnapshotSplit, hooks: ReadHooks = ReadHooks()) -> ChunkResult:
        """Read one chunk; the rows equal the chunk's state at the returned high watermark."""
        staged = stage_chunk(self.settings, self.schema, split, fetch_backend=self.options.fetch_backend,
                             hooks=hooks)
        if hooks.after_select:
            hooks.after_select()
        if self.options.backfill_skip:
            return ChunkResult(split, staged.rows, staged.low_watermark, staged.low_watermark)
        hw = current_offset(self._connection())
        return self.backfill(staged, hw)

    def backfill(self, staged: StagedChunk, high_watermark: BinlogOffset) -> ChunkResult:
        """Merge the binlog ``(LW, HW]`` into a staged chunk (skips the read when LW == HW)."""
        lw = staged.low_watermark
        fill = Backfill(staged.split, lw, self.schema, self.order(staged.split.key_column))
        if lw.is_before(high_watermark):
            fill.offer(self._binlog_reader().read(lw, high_watermark), high_watermark)
        return ChunkResult(staged.split, fill.result(staged.rows), lw, high_watermark, fill.applied)

    def order(self, key_column: str) -> KeyOrder:
        if key_column not in self._orders:
            self._orders[key_column] = KeyOrder(self.schema.column(key_column), self._connection())
        return self._orders[key_column]

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self.settings.connect()
        return self._conn

    def _binlog_reader(self) -> MySqlBinlogReader:
        if self._binlog is None:
            config = BinlogReaderConfig(connection=self.settings, server_id=self.options.server_id,
                                        tables=(self.schema.table_id,))
            self._binlog = MySqlBinlogReader(config)
        return self._binlog


def read_chunks(reader: ChunkReader, splits: Iterable[SnapshotSplit]) -> Iterator[ChunkResult]:
    """Read several chunks one after another with one reader."""
    for split in splits:
        yield reader.read(split)
