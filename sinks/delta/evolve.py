"""Schema evolution of a mirror or changelog: the table follows its source table's sink schema.

The sink schema only grows (``cdc/model/history.py``): columns are added, never removed, and types
only widen. So an existing Delta table reaches a new storage schema by:

* **added columns**, top-level or inside the changelog's ``before``/``after`` structs: a Delta
  schema change (delta-rs ``ALTER TABLE ADD COLUMNS``, one metadata commit, no data rewritten;
  files written before read the new columns as null);
* **widened types** (``int`` -> ``bigint``, ``float`` -> ``double``, wider decimals): delta-rs has no
  Delta type widening, so the table is **rewritten** with the wider types in one overwrite
  commit, and a warning says so (a changelog's ``delta.appendOnly`` is lifted for that commit).

Each table records its sink schema in the table property ``spark_cdc.schema`` (at creation and at
every evolution), which a restart reads back (:func:`recorded_schema`): after a lenient DROP
COLUMN the source's catalog no longer has the column, but the sink tables still do, and a DDL
not streamed yet is not in them yet. Runs on the driver; every step checks
the table first, so a crash part-way and a replay finish the work without doing it twice.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.schema import Schema as DeltaSchema

from cdc.model.history import wider_type
from cdc.model.schema import TableSchema, schema_from_dict, schema_to_dict
from sinks.changes import conform
from sinks.delta.tables import (
    PROP_SCHEMA,
    TableKind,
    check_table,
    create_table,
    open_table,
    read_table,
    stats_columns,
)

log = logging.getLogger(__name__)

PROP_STATS = "delta.dataSkippingStatsColumns"
_APPEND_ONLY = "delta.appendOnly"


def ensure_table(uri: str, storage_options: dict[str, str], schema: TableSchema, kind: TableKind,
                 storage: pa.Schema) -> DeltaTable:
    """Open the table at ``uri`` (creating it when absent), evolve it to ``storage`` when that only
    adds columns or widens types, and check that it fits.

    Raises:
        SinkSchemaMismatch: the existing table has columns or types ``storage`` does not grow from,
            or another key.
    """
    table = open_table(uri, storage_options)
    if table is None:
        table = create_table(uri, storage_options, schema, kind, storage)
    else:
        evolve_table(table, uri, storage_options, schema, storage)
    check_table(table, uri, schema, storage)
    return table


def recorded_schema(table: DeltaTable) -> TableSchema | None:
    """The sink schema a table recorded (None: a table written before the property existed)."""
    text = table.metadata().configuration.get(PROP_SCHEMA)
    return schema_from_dict(json.loads(text)) if text else None


def delta_arrow(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Delta stores it, read back as Arrow (for comparisons)."""
    return pa.schema(DeltaSchema.from_arrow(schema).to_arrow())


def evolve_table(table: DeltaTable, uri: str, storage_options: dict[str, str], schema: TableSchema,
                 storage: pa.Schema) -> bool:
    """Bring ``table`` to ``storage`` when that only adds columns and widens types.

    Returns:
        True when the table changed; False when it already had ``storage`` or when ``storage`` is
        not a growth of it (the caller's schema check then names the mismatch).
    """
    actual = pa.schema(table.schema().to_arrow())
    expected = delta_arrow(storage)
    if actual.equals(expected, check_metadata=False):
        return False
    plan = _plan(list(actual), list(expected))
    if plan is None:
        return False
    added, widened = plan
    if added:
        table.alter.add_columns(added)  # type: ignore[arg-type]  # delta-rs Fields
        log.info("%s: added columns %s (Delta schema change, no rewrite)", uri,
                 ", ".join(_names(f) for f in added))
    if widened:
        _rewrite(table, uri, storage_options, storage, widened)
    table.update_incremental()
    properties = {PROP_SCHEMA: json.dumps(schema_to_dict(schema))}
    stats = stats_columns(storage)
    if stats:
        properties[PROP_STATS] = ",".join(stats)
    table.alter.set_table_properties(properties, raise_if_not_exists=False)
    table.update_incremental()
    return True


def _plan(actual: list[pa.Field], expected: list[pa.Field]) -> tuple[list[object], list[str]] | None:
    """The delta-rs fields to add and the paths to widen; None when ``expected`` drops or narrows."""
    have = {f.name: f for f in actual}
    if set(have) - {f.name for f in expected}:
        return None
    added: list[object] = []
    widened: list[str] = []
    for f in expected:
        old = have.get(f.name)
        if old is None:
            added.append(_delta_field(f))
        elif pa.types.is_struct(f.type) and pa.types.is_struct(old.type):
            inner = _plan(list(old.type), list(f.type))
            if inner is None:
                return None
            if inner[0]:
                added.append(_delta_field(pa.field(f.name, pa.struct([]), nullable=True), inner[0]))
            widened += [f"{f.name}.{p}" for p in inner[1]]
        elif old.type != f.type:
            if wider_type(old.type, f.type) != f.type:
                return None
            widened.append(f.name)
    return added, widened


def _delta_field(field: pa.Field, children: list[object] | None = None) -> object:
    """A delta-rs field for ``field``; with ``children``, a struct holding only those (delta-rs
    merges them into the existing struct column)."""
    from deltalake.schema import Field, StructType

    if children is not None:
        return Field(field.name, StructType(children), nullable=True)  # type: ignore[arg-type]
    return DeltaSchema.from_arrow(pa.schema([field])).fields[0]


def _names(field: object) -> str:
    from deltalake.schema import StructType

    name, kind = getattr(field, "name", "?"), getattr(field, "type", None)
    if isinstance(kind, StructType):
        return ", ".join(f"{name}.{_names(f)}" for f in kind.fields)
    return str(name)


def _rewrite(table: DeltaTable, uri: str, storage_options: dict[str, str], storage: pa.Schema,
             widened: list[str]) -> None:
    """Rewrite every row with the wider types (one overwrite commit)."""
    rows = conform(read_table(uri, storage_options), storage)
    log.warning("%s: rewriting the table (%d rows) to widen %s: delta-rs has no Delta type widening",
                uri, rows.num_rows, ", ".join(widened))
    append_only = table.metadata().configuration.get(_APPEND_ONLY) == "true"
    if append_only:
        table.alter.set_table_properties({_APPEND_ONLY: "false"})
        table.update_incremental()
    write_deltalake(table, rows, mode="overwrite", schema_mode="overwrite")
    if append_only:
        table.update_incremental()
        table.alter.set_table_properties({_APPEND_ONLY: "true"})
