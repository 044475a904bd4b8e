"""Debezium-shaped change rows as Arrow: ``op``, ``before``, ``after``, ``source``, ``ts_ms``.

This is the row layout of the Spark stream and of the Delta changelog tables. ``before`` and
``after`` are structs of the table's columns (types from ``cdc/schema.py``), ``source`` carries
Debezium's MySQL source fields. Snapshot rows are built column-wise from the chunk's Arrow table
(no per-row Python); binlog changes arrive as Python events and are built once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from cdc import __version__
from cdc.model.events import ChangeEvent
from cdc.model.schema import TableId, TableSchema

CONNECTOR = "mysql"

SOURCE_TYPE = pa.struct([
    pa.field("version", pa.string()),
    pa.field("connector", pa.string()),
    pa.field("name", pa.string()),
    pa.field("ts_ms", pa.int64()),
    pa.field("snapshot", pa.string()),
    pa.field("db", pa.string()),
    pa.field("table", pa.string()),
    pa.field("server_id", pa.int64()),
    pa.field("gtid", pa.string()),
    pa.field("file", pa.string()),
    pa.field("pos", pa.int64()),
    pa.field("row", pa.int32()),
    pa.field("thread", pa.int64()),
    pa.field("query", pa.string()),
])


def row_type(schema: TableSchema) -> pa.StructType:
    """The struct type of one row image of ``schema``'s table."""
    return pa.struct(list(schema.arrow_schema()))


def envelope_schema(schema: TableSchema) -> pa.Schema:
    """The Arrow schema of change rows for one table."""
    image = row_type(schema)
    return pa.schema([
        pa.field("op", pa.string()),
        pa.field("before", image),
        pa.field("after", image),
        pa.field("source", SOURCE_TYPE),
        pa.field("ts_ms", pa.int64()),
    ])


@dataclass(frozen=True)
class SnapshotSource:
    """The ``source`` block shared by every ``op='r'`` row of one emitted chunk.

    Attributes:
        name: the logical server name (Debezium's ``topic.prefix``), from the job config.
        server_id: the id of the server the snapshot read from.
        file: binlog file of the chunk's high watermark.
        pos: binlog position of the chunk's high watermark.
        gtid: GTID set at the high watermark, if known.
        ts_ms: when the chunk's rows were fixed (planning time of the high watermark).
    """

    name: str
    server_id: int
    file: str
    pos: int
    gtid: str | None
    ts_ms: int


def snapshot_envelope(table_id: TableId, schema: TableSchema, rows: pa.Table, source: SnapshotSource) -> pa.Table:
    """Wrap a chunk's rows (flat, ``schema.arrow_schema()``) as ``op='r'`` change rows."""
    n = rows.num_rows
    rows = rows.select(schema.column_names).cast(schema.arrow_schema())
    image = row_type(schema)
    after = pa.StructArray.from_arrays(
        [c.combine_chunks() for c in rows.columns], fields=list(image)
    ) if n else pa.array([], type=image)
    constant = {
        "version": __version__, "connector": CONNECTOR, "name": source.name, "ts_ms": source.ts_ms,
        "snapshot": "true", "db": table_id.db, "table": table_id.table,
        "server_id": source.server_id, "gtid": source.gtid, "file": source.file, "pos": source.pos,
        "row": 0, "thread": None, "query": None,
    }
    source_array = pa.repeat(pa.scalar(constant, type=SOURCE_TYPE), n)
    return pa.Table.from_arrays(
        [pa.repeat(pa.scalar("r"), n).cast(pa.string()), pa.nulls(n, image), after, source_array,
         pa.repeat(pa.scalar(source.ts_ms, pa.int64()), n)],
        schema=envelope_schema(schema),
    )


def split_key_changes(events: Sequence[ChangeEvent], primary_key: Sequence[str]) -> list[ChangeEvent]:
    """Turn each update that changes the primary key into a delete and a create (as Debezium).

    Both halves keep the update's position, so a change is still identified by file/pos/row.
    """
    out: list[ChangeEvent] = []
    for e in events:
        if e.op == "u" and primary_key and e.before is not None and e.after is not None and any(
            e.before[k] != e.after[k] for k in primary_key
        ):
            out.append(replace(e, op="d", after=None))
            out.append(replace(e, op="c", before=None))
        else:
            out.append(e)
    return out


def change_envelope(schema: TableSchema, events: Sequence[ChangeEvent], *, name: str) -> pa.Table:
    """Build change rows for binlog events (c/u/d) of one table, in the given order."""
    image = row_type(schema)
    cols = schema.column_names
    ops, befores, afters, sources, ts = [], [], [], [], []
    for e in events:
        ops.append(e.op)
        befores.append(None if e.before is None else {c: e.before.get(c) for c in cols})
        afters.append(None if e.after is None else {c: e.after.get(c) for c in cols})
        p = e.position
        sources.append({
            "version": __version__, "connector": CONNECTOR, "name": name, "ts_ms": e.ts_ms,
            "snapshot": "false", "db": e.table_id.db, "table": e.table_id.table,
            "server_id": e.server_id, "gtid": e.gtid, "file": p.file if p else None,
            "pos": p.pos if p else None, "row": p.row if p else None, "thread": e.thread,
            "query": e.query,
        })
        ts.append(e.ts_ms)
    return pa.Table.from_arrays(
        [pa.array(ops, pa.string()), pa.array(befores, image), pa.array(afters, image),
         pa.array(sources, SOURCE_TYPE), pa.array(ts, pa.int64())],
        schema=envelope_schema(schema),
    )
