"""The watermark merge: a chunk's exact state at a known log position (DBLog), and the region
filter of the stream (Flink CDC's ``shouldEmit``). Dialect-neutral: keys are ordered by the
dialect's :class:`~chunking.chunks.KeyOrder`, positions compared through the model's protocols.

The lock-free chunk read is Flink CDC 2.0's refinement of DBLog, in two halves so the Spark
source can run them in different micro-batches (see docs/contributing/architecture.md):

* the dialect reads the chunk: it records the low watermark (LW), then SELECTs the chunk's key
  range (one consistent read, no locks);
* :class:`Backfill`: given the log changes of the table in ``(LW, HW]``, apply those whose key
  lies in the chunk to the staged rows: an insert or update puts the after image, a delete (or
  the old key of a key-changing update) removes the key; keys outside the chunk are ignored. The
  result is the chunk's state at HW, whatever happened while the SELECT ran.

Memory is bounded by the chunk: the staged rows plus one entry per changed key of the chunk.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from cdc.model.errors import SchemaChanged
from cdc.model.events import ChangeEvent, Row
from cdc.model.positions import Offset
from cdc.model.schema import TableSchema, schema_from_dict, schema_to_dict
from chunking.chunks import KeyOrder, SnapshotSplit, decode_value

_KEY_BATCH = 1024  # events whose keys are placed in the chunk with one batched sort-key lookup

# the key of the Arrow schema metadata that carries the table definition a chunk was read under
READ_SCHEMA_METADATA = b"spark_cdc.read_schema"


def tag_read_schema(rows: pa.Table, schema: TableSchema) -> pa.Table:
    """A chunk's ``rows`` tagged with the table definition its SELECT read them under (schema
    metadata: it survives staging, so the emit knows what the rows are without the server)."""
    meta = dict(rows.schema.metadata or {})
    meta[READ_SCHEMA_METADATA] = json.dumps(schema_to_dict(schema)).encode()
    return rows.replace_schema_metadata(meta)


def read_schema(schema: pa.Schema) -> TableSchema | None:
    """The definition :func:`tag_read_schema` put on a chunk's rows (None: untagged)."""
    meta = schema.metadata or {}
    return schema_from_dict(json.loads(meta[READ_SCHEMA_METADATA])) if READ_SCHEMA_METADATA in meta else None


READ_ATTEMPTS = 5  # reads of one chunk while DDL keeps changing its table

W = TypeVar("W")
log = logging.getLogger(__name__)


def read_as_defined(expected: TableSchema, split: SnapshotSplit, low_watermark: Callable[[], W],
                    select: Callable[[TableSchema], pa.Table],
                    definition: Callable[[], TableSchema]) -> tuple[W, pa.Table, TableSchema]:
    """The LW, then a chunk's rows under its table's definition at the LW (a dialect's
    ``read_chunk``, whatever its server).

    The definition is read again after the SELECT (``definition()``) and compared with the one the
    SELECT used (``expected``, the last one the caller read): equal, no DDL changed the table
    between the two reads, which enclose the LW and the SELECT. Otherwise (a DDL in between: the
    SELECT failed, or read columns the table no longer has at the LW) the chunk is read again under
    the new definition, with a new LW.

    Returns:
        The LW, the rows tagged with the definition (:func:`tag_read_schema`), and the definition.

    Raises:
        SchemaChanged: the chunk key column is gone (renamed or dropped), or the table's
            definition kept changing over :data:`READ_ATTEMPTS` reads.
    """
    table = expected.table_id
    for _ in range(READ_ATTEMPTS):
        _require_key(expected, split)
        lw = low_watermark()
        failure: Exception | None = None
        try:
            rows = select(expected)
        except Exception as exc:  # a column the SELECT names is gone: the check below tells
            failure, rows = exc, None
        now = definition()
        if now == expected:
            if failure is not None or rows is None:
                raise failure or AssertionError("no rows and no failure")
            return lw, tag_read_schema(rows, expected), expected
        log.info("%s: %s changed while the chunk was read (DDL); reading it again under %s",
                 split.split_name, table, now.column_names)
        expected = now
    raise SchemaChanged(f"{table}: its definition changed {READ_ATTEMPTS} times while {split.split_name} was "
                        "read; the job stops rather than read it forever. Restart it once the DDL is done",
                        table=str(table))


def _require_key(schema: TableSchema, split: SnapshotSplit) -> None:
    """Refuse to read a chunk whose key column the table no longer has."""
    if split.key_column.lower() not in (c.lower() for c in schema.column_names):
        raise SchemaChanged(
            f"{schema.table_id}: its chunk key column {split.key_column} was renamed or dropped while its "
            f"snapshot was in flight (the table now has {schema.column_names}); spark-cdc follows DDL "
            "during a snapshot except on the chunk key. Take a new snapshot (a new checkpoint, state "
            "directory and sink path)", table=str(schema.table_id))


def same_columns(a: TableSchema | pa.Schema, b: TableSchema | pa.Schema) -> bool:
    """Whether two definitions give rows the same columns: names and Arrow types, in order."""
    def columns(s: TableSchema | pa.Schema) -> list[tuple[str, pa.DataType]]:
        fields = s.arrow_schema() if isinstance(s, TableSchema) else s
        return [(f.name, f.type) for f in fields]
    return columns(a) == columns(b)


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
    low_watermark: Offset
    schema: TableSchema
    order: KeyOrder
    applied: int = 0
    _latest: dict[tuple[Any, ...], Row | None] = field(default_factory=dict)  # key -> image/None
    _delta: Counter[tuple[Any, ...]] = field(default_factory=Counter)  # keyless tables

    def offer(self, changes: Iterable[ChangeEvent], high_watermark: Offset) -> None:
        """Apply the changes that lie in ``(LW, high_watermark]`` and belong to this chunk."""
        batch: list[ChangeEvent] = []
        for change in changes:
            if change.table_id != self.schema.table_id or change.position is None:
                continue
            if not change.position.in_slice(self.low_watermark, high_watermark):
                continue
            batch.append(change)
            if len(batch) >= _KEY_BATCH:
                self._apply(batch)
                batch = []
        if batch:
            self._apply(batch)

    def _apply(self, batch: Sequence[ChangeEvent]) -> None:
        key = self.split.key_column
        images = [img for e in batch for img in (e.before, e.after) if img is not None]
        sort_keys = self.order.sort_keys([img[key] for img in images])
        inside = iter([self.split.contains(sk, self.order) for sk in sort_keys])
        for change in batch:  # consumes one membership flag per image, in the same order
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
class Region:
    """The finished key region of a table when a batch starts: keys below ``upto`` flow.

    ``everything`` means the table is streaming (snapshot finished or skipped).
    """

    everything: bool
    upto: Any = None  # encoded boundary value (chunking.chunks.encode_value)
    key_column: str | None = None


class ChunkFilter:
    """Keeps the change rows whose key lies in one chunk (a key-changing update's halves each by
    their own key): the changes of a chunk's keys after a DDL inside its window, which the emit
    hands to the sinks as changes because its rows stop at the DDL.

    Args:
        split: the chunk.
        order: its key column's order.
    """

    def __init__(self, split: SnapshotSplit, order: KeyOrder) -> None:
        self.split = split
        self.order = order

    def keep(self, envelope: pa.Table) -> pa.Table:
        """The change rows (``cdc.model.envelope`` layout) whose key (before image for deletes)
        lies in the chunk."""
        if not envelope.num_rows:
            return envelope
        keys = _keys(envelope, self.split.key_column)
        sort_keys = self.order.sort_keys(keys.to_pylist())
        return envelope.filter(pa.array([self.split.contains(k, self.order) for k in sort_keys], pa.bool_()))


def _keys(envelope: pa.Table, column: str) -> pa.Array:
    """Each change row's key: the before image's for deletes, else the after image's."""
    return pc.if_else(pc.equal(envelope["op"], "d"), pc.struct_field(envelope["before"], column),
                      pc.struct_field(envelope["after"], column))


class RegionFilter:
    """Keeps the change rows whose key lies in a table's finished region (``shouldEmit``).

    Args:
        region: the table's finished region.
        order: the key order of the region's key column (None when ``region.everything``).
    """

    def __init__(self, region: Region, order: KeyOrder | None) -> None:
        self.region = region
        self.order = order
        self.bound: Any = None
        if not region.everything:
            assert order is not None and region.key_column is not None
            self.bound = order.bound_key(decode_value(region.upto))

    def keep(self, envelope: pa.Table) -> pa.Table:
        """The change rows (``cdc.model.envelope`` layout) whose key (before image for
        deletes) is in."""
        if self.region.everything or not envelope.num_rows:
            return envelope
        assert self.order is not None and self.region.key_column is not None
        keys = _keys(envelope, self.region.key_column)
        sort_keys = self.order.sort_keys(keys.to_pylist())
        return envelope.filter(pa.array([k < self.bound for k in sort_keys], pa.bool_()))
