"""Debezium-shaped change rows as Arrow: ``op``, ``before``, ``after``, ``source``, ``ts_ms``.

This is the row layout of the Spark stream, of the files sinks stage and of the Delta changelog
tables. ``before`` and ``after`` are structs of the table's columns (their Arrow types come from
the dialect, see :class:`~cdc.model.schema.Column`); ``source`` is the Debezium connector's
``source`` block, whose fields depend on the connector (:data:`SOURCE_TYPES`). Snapshot rows are
built column-wise from a chunk's Arrow table; :func:`change_envelope` builds change rows from
per-row events (dialects build their hot path column-wise, with the same result).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from cdc import __version__
from cdc.model.events import ChangeEvent
from cdc.model.schema import TableId, TableSchema

_COMMON = [
    pa.field("version", pa.string()),
    pa.field("connector", pa.string()),
    pa.field("name", pa.string()),
    pa.field("ts_ms", pa.int64()),
    pa.field("snapshot", pa.string()),
    pa.field("db", pa.string()),
    pa.field("table", pa.string()),
]

# Each connector's source block: Debezium's common fields, then the connector's own.
SOURCE_TYPES: dict[str, pa.StructType] = {
    "mysql": pa.struct([
        *_COMMON,
        pa.field("server_id", pa.int64()),
        pa.field("gtid", pa.string()),
        pa.field("file", pa.string()),
        pa.field("pos", pa.int64()),
        pa.field("row", pa.int32()),
        pa.field("thread", pa.int64()),
        pa.field("query", pa.string()),
    ]),
    "postgresql": pa.struct([
        *_COMMON,
        pa.field("schema", pa.string()),
        pa.field("sequence", pa.string()),
        pa.field("txId", pa.int64()),
        pa.field("lsn", pa.int64()),
        pa.field("xmin", pa.int64()),
        pa.field("commit_lsn", pa.int64()),  # spark-cdc: the transaction's commit LSN (orders changes)
        pa.field("row", pa.int32()),  # spark-cdc: the change's index in its transaction
    ]),
}


SOURCE_TYPES["mariadb"] = SOURCE_TYPES["mysql"]  # Debezium's MariaDB connector: the MySQL connector's block


def source_type(connector: str) -> pa.StructType:
    """The Arrow struct of ``connector``'s source block.

    Raises:
        ValueError: an unknown connector.
    """
    try:
        return SOURCE_TYPES[connector]
    except KeyError:
        raise ValueError(f"no source block for connector {connector!r}; known: "
                         f"{', '.join(sorted(SOURCE_TYPES))}") from None


def source_block(connector: str, name: str, table_id: TableId, ts_ms: int, snapshot: str,
                 fields: Mapping[str, Any]) -> dict[str, Any]:
    """One change's source block as a dict in ``connector``'s field order.

    Args:
        connector: the Debezium connector (``mysql``).
        name: the logical source name (Debezium's ``topic.prefix``).
        table_id: the table changed.
        ts_ms: when the source wrote the change (or fixed a snapshot chunk).
        snapshot: ``true`` for snapshot reads, ``false`` for log changes.
        fields: the connector's own fields (missing ones are null).
    """
    common = {"version": __version__, "connector": connector, "name": name, "ts_ms": ts_ms,
              "snapshot": snapshot, "db": table_id.db, "table": table_id.table}
    return {f.name: common[f.name] if f.name in common else fields.get(f.name)
            for f in source_type(connector)}


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
        pa.field("source", source_type(schema.connector)),
        pa.field("ts_ms", pa.int64()),
    ])


def snapshot_envelope(schema: TableSchema, rows: pa.Table, source: Mapping[str, Any]) -> pa.Table:
    """Wrap a chunk's rows (flat, ``schema.arrow_schema()``) as ``op='r'`` change rows.

    Args:
        schema: the table.
        rows: the chunk's rows.
        source: the source block every row carries (:func:`source_block` with
            ``snapshot='true'``: the chunk's high watermark and when it was fixed).
    """
    n = rows.num_rows
    rows = rows.select(schema.column_names).cast(schema.arrow_schema())
    image = row_type(schema)
    after = pa.StructArray.from_arrays(
        [c.combine_chunks() for c in rows.columns], fields=list(image)
    ) if n else pa.array([], type=image)
    source_array = pa.repeat(pa.scalar(dict(source), type=source_type(schema.connector)), n)
    return pa.Table.from_arrays(
        [pa.repeat(pa.scalar("r"), n).cast(pa.string()), pa.nulls(n, image), after, source_array,
         pa.repeat(pa.scalar(source["ts_ms"], pa.int64()), n)],
        schema=envelope_schema(schema),
    )


def split_key_changes(events: Sequence[ChangeEvent], primary_key: Sequence[str]) -> list[ChangeEvent]:
    """Turn each update that changes the primary key into a delete and a create (as Debezium).

    Both halves keep the update's position, so a change is still identified by its position.
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
    """Change rows for log events (c/u/d) of one table, in the given order (per-row Python:
    the reference the dialects' column-wise builders are tested against)."""
    image = row_type(schema)
    cols = schema.column_names
    ops, befores, afters, sources, ts = [], [], [], [], []
    for e in events:
        ops.append(e.op)
        befores.append(None if e.before is None else {c: e.before.get(c) for c in cols})
        afters.append(None if e.after is None else {c: e.after.get(c) for c in cols})
        sources.append(source_block(schema.connector, name, e.table_id, e.ts_ms, "false", e.source))
        ts.append(e.ts_ms)
    return pa.Table.from_arrays(
        [pa.array(ops, pa.string()), pa.array(befores, image), pa.array(afters, image),
         pa.array(sources, source_type(schema.connector)), pa.array(ts, pa.int64())],
        schema=envelope_schema(schema),
    )
