"""Change rows (``cdc/envelope.py``'s layout) from binlog change blocks, built column-wise.

:func:`block_envelope` is the block counterpart of
``change_envelope(schema, split_key_changes(events, schema.primary_key), name=...)``: the same
rows in the same order, from :class:`~binlog.mysql.blocks.ChangeBlock` s instead of one Python event per
row. Per-block values (position, GTID, thread, ...) are taken once per block and spread to the
rows with Arrow ``take``; the row images are the blocks' Arrow tables, concatenated.

An update that changes the primary key becomes a delete (before image) then a create (after
image), both at the update's position, as Debezium emits it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlog.mysql.blocks import ChangeBlock
from binlog.mysql.types import CONNECTOR
from cdc import __version__
from cdc.model.envelope import envelope_schema, row_type, source_type
from cdc.model.schema import TableSchema

_C, _U, _D = 0, 1, 2
_CODES = {"c": _C, "u": _U, "d": _D}
_OP_TEXT = pa.array(["c", "u", "d"], pa.string())


def block_envelope(schema: TableSchema, blocks: Sequence[ChangeBlock], *, name: str) -> pa.Table:
    """Change rows for the blocks of one table, in block order.

    Args:
        schema: the table's schema (the blocks' images are typed by it).
        blocks: change blocks of the table, in binlog order.
        name: the logical server name (``source.name``).

    Raises:
        ValueError: a block is of another table.
    """
    others = {str(b.table_id) for b in blocks if b.table_id != schema.table_id}
    if others:
        raise ValueError(f"blocks of {sorted(others)} passed with the schema of {schema.table_id}")
    blocks = [b for b in blocks if b.num_rows]
    if not blocks:
        return envelope_schema(schema).empty_table()
    counts = np.array([b.num_rows for b in blocks], np.int64)
    ops = np.repeat(np.array([_CODES[b.op] for b in blocks], np.int8), counts)
    total = int(counts.sum())
    before = _images(schema, [b.before for b in blocks])
    after = _images(schema, [b.after for b in blocks])
    has_before, has_after = ops != _C, ops != _D
    before_at = np.cumsum(has_before) - 1  # row -> its row in `before` (where it has one)
    after_at = np.cumsum(has_after) - 1
    changed = _key_changed(schema, before, after, ops == _U, before_at, after_at)
    # each changed update is emitted twice: as a delete, then as a create
    source_row = np.repeat(np.arange(total), 1 + changed)
    second = np.zeros(source_row.shape[0], np.bool_)
    second[1:] = source_row[1:] == source_row[:-1]
    out_ops = ops[source_row]
    split = changed[source_row]
    out_ops[split & ~second] = _D
    out_ops[split & second] = _C
    block = np.repeat(np.arange(len(blocks)), counts)[source_row]
    row_in_block = (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))[source_row]
    return pa.Table.from_arrays(
        [_OP_TEXT.take(pa.array(out_ops)),
         _pick(schema, before, before_at[source_row], out_ops != _C),
         _pick(schema, after, after_at[source_row], out_ops != _D),
         _source(blocks, name, block, row_in_block),
         pa.array([b.ts_ms for b in blocks], pa.int64()).take(pa.array(block))],
        schema=envelope_schema(schema),
    )


def _images(schema: TableSchema, tables: Sequence[pa.Table | None]) -> pa.Table:
    """The given images back to back, one chunk per column, typed as the schema."""
    wanted = schema.arrow_schema()
    present = [t if t.schema == wanted else t.cast(wanted) for t in tables if t is not None]
    if not present:
        return wanted.empty_table()
    return pa.concat_tables(present).combine_chunks()


def _key_changed(schema: TableSchema, before: pa.Table, after: pa.Table, updates: np.ndarray,
                 before_at: np.ndarray, after_at: np.ndarray) -> np.ndarray:
    """Per row: an update whose primary key differs between its images."""
    changed = np.zeros(updates.shape[0], np.bool_)
    if not schema.primary_key or not updates.any():
        return changed
    b_rows, a_rows = pa.array(before_at[updates]), pa.array(after_at[updates])
    differs = np.zeros(len(b_rows), np.bool_)
    for key in schema.primary_key:
        old, new = before[key].take(b_rows), after[key].take(a_rows)
        # Python's != : values differ, or exactly one of them is None
        ne = pc.fill_null(pc.not_equal(old, new), False)
        one_null = pc.xor(pc.is_null(old), pc.is_null(new))
        differs |= pc.or_(ne, one_null).to_numpy(zero_copy_only=False)
    changed[updates] = differs
    return changed


def _pick(schema: TableSchema, images: pa.Table, at: np.ndarray, present: np.ndarray) -> pa.Array:
    """The struct column of row images: ``images`` row ``at[i]`` where ``present[i]``, else null."""
    image = row_type(schema)
    n = at.shape[0]
    if images.num_rows == 0:
        return pa.nulls(n, image)
    rows = pa.StructArray.from_arrays([c.chunk(0) for c in images.columns], fields=list(image))
    if present.all() and n == images.num_rows and (np.diff(at) == 1).all() and at[0] == 0:
        return rows  # every row has this image, in order: no copy
    return rows.take(pa.array(at, mask=~present))


def _source(blocks: Sequence[ChangeBlock], name: str, block: np.ndarray,
            row_in_block: np.ndarray) -> pa.StructArray:
    """The Debezium ``source`` struct: per-block fields spread to rows, plus the row index."""
    per_block = {
        "version": pa.array([__version__] * len(blocks), pa.string()),
        "connector": pa.array([CONNECTOR] * len(blocks), pa.string()),
        "name": pa.array([name] * len(blocks), pa.string()),
        "ts_ms": pa.array([b.ts_ms for b in blocks], pa.int64()),
        "snapshot": pa.array(["false"] * len(blocks), pa.string()),
        "db": pa.array([b.table_id.db for b in blocks], pa.string()),
        "table": pa.array([b.table_id.table for b in blocks], pa.string()),
        "server_id": pa.array([b.server_id for b in blocks], pa.int64()),
        "gtid": pa.array([b.gtid for b in blocks], pa.string()),
        "file": pa.array([b.file for b in blocks], pa.string()),
        "pos": pa.array([b.pos for b in blocks], pa.int64()),
        "thread": pa.array([b.thread for b in blocks], pa.int64()),
        "query": pa.array([b.query for b in blocks], pa.string()),
    }
    take = pa.array(block)
    first_rows = np.array([b.first_row for b in blocks], np.int64)
    rows = pa.array((first_rows[block] + row_in_block).astype(np.int32))
    struct = source_type(CONNECTOR)
    fields = [rows if f.name == "row" else per_block[f.name].take(take) for f in struct]
    return pa.StructArray.from_arrays(fields, fields=list(struct))
