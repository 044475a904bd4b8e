"""Change rows (``cdc/envelope.py``'s layout) from binlog change events, built column-wise.

:func:`event_rows_envelope` is the event counterpart of
``change_envelope(schema, split_key_changes(events, schema.primary_key), name=...)``: the same
rows in the same order, from :class:`~binlog.mysql.event_rows.EventRows` s instead of one Python event per
row. Per-event values (position, GTID, thread, ...) are taken once per event and spread to the
rows with Arrow ``take``; the row images are the events' Arrow tables, concatenated.

An update that changes the primary key becomes a delete (before image) then a create (after
image), both at the update's position, as Debezium emits it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlog.mysql.event_rows import EventRows
from binlog.mysql.types import CONNECTOR
from cdc import __version__
from cdc.model.envelope import envelope_schema, row_type, source_type
from cdc.model.schema import TableSchema

_C, _U, _D = 0, 1, 2
_CODES = {"c": _C, "u": _U, "d": _D}


@functools.cache
def _op_text() -> pa.Array:
    """The op texts by code. Built on first use: pyarrow imports pandas (0.3 s) at its first
    ``pa.array``, which Spark's planning processes that import this module never need."""
    return pa.array(["c", "u", "d"], pa.string())


def event_rows_envelope(schema: TableSchema, events: Sequence[EventRows], *, name: str,
                        connector: str = CONNECTOR, include_query: bool = True) -> pa.Table:
    """Change rows for the events of one table, in event order.

    Args:
        schema: the table's schema (the events' images are typed by it).
        events: change events of the table, in binlog order.
        name: the logical server name (``source.name``).
        connector: the Debezium connector the rows speak as (``source.connector``: ``mysql`` or
            ``mariadb``).
        include_query: put each event's statement in ``source.query`` (else null).

    Raises:
        ValueError: a event is of another table.
    """
    others = {str(b.table_id) for b in events if b.table_id != schema.table_id}
    if others:
        raise ValueError(f"events of {sorted(others)} passed with the schema of {schema.table_id}")
    events = [b for b in events if b.num_rows]
    if not events:
        return envelope_schema(schema).empty_table()
    counts = np.array([b.num_rows for b in events], np.int64)
    ops = np.repeat(np.array([_CODES[b.op] for b in events], np.int8), counts)
    total = int(counts.sum())
    before = _images(schema, [b.before for b in events])
    after = _images(schema, [b.after for b in events])
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
    event = np.repeat(np.arange(len(events)), counts)[source_row]
    row_in_event = (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))[source_row]
    return pa.Table.from_arrays(
        [_op_text().take(pa.array(out_ops)),
         _pick(schema, before, before_at[source_row], out_ops != _C),
         _pick(schema, after, after_at[source_row], out_ops != _D),
         _source(events, name, connector, include_query, event, row_in_event),
         pa.array([b.ts_ms for b in events], pa.int64()).take(pa.array(event))],
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


def _source(events: Sequence[EventRows], name: str, connector: str, include_query: bool, event: np.ndarray,
            row_in_event: np.ndarray) -> pa.StructArray:
    """The Debezium ``source`` struct: per-event fields spread to rows, plus the row index."""
    per_event = {
        "version": pa.array([__version__] * len(events), pa.string()),
        "connector": pa.array([connector] * len(events), pa.string()),
        "name": pa.array([name] * len(events), pa.string()),
        "ts_ms": pa.array([b.ts_ms for b in events], pa.int64()),
        "snapshot": pa.array(["false"] * len(events), pa.string()),
        "db": pa.array([b.table_id.db for b in events], pa.string()),
        "table": pa.array([b.table_id.table for b in events], pa.string()),
        "server_id": pa.array([b.server_id for b in events], pa.int64()),
        "gtid": pa.array([b.gtid for b in events], pa.string()),
        "file": pa.array([b.file for b in events], pa.string()),
        "pos": pa.array([b.pos for b in events], pa.int64()),
        "thread": pa.array([b.thread for b in events], pa.int64()),
        "query": pa.array([b.query if include_query else None for b in events], pa.string()),
    }
    take = pa.array(event)
    first_rows = np.array([b.first_row for b in events], np.int64)
    rows = pa.array((first_rows[event] + row_in_event).astype(np.int32))
    struct = source_type(CONNECTOR)
    fields = [rows if f.name == "row" else per_event[f.name].take(take) for f in struct]
    return pa.StructArray.from_arrays(fields, fields=list(struct))
