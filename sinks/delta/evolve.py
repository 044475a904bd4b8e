"""Schema evolution of a mirror or changelog: the table follows its source table's sink schema.

The sink schema only grows (``cdc/model/history.py``): columns are added, never removed, and types
only widen. So an existing Delta table reaches a new storage schema by:

* **added columns**, top-level or inside the changelog's ``before``/``after`` structs: a Delta
  schema change (delta-rs ``ALTER TABLE ADD COLUMNS``, one metadata commit, no data rewritten;
  files written before read the new columns as null);
* **widened types** (``int`` -> ``bigint``, ``float`` -> ``double``, wider decimals): delta-rs has no
  Delta type widening, so the table is **rewritten** with the wider types in one overwrite
  commit, and a warning says so (a changelog's ``delta.appendOnly`` is lifted for that commit).

Under ``schema_change.behavior: evolve`` (and ``try_evolve``) the sink schema is each version's own:
columns also leave and are renamed. Its columns carry their identity across renames
(:attr:`cdc.model.schema.Column.origin`), and each table records the sink schema it has, so a
new schema's columns are matched to the table's by identity (:func:`column_sources`), not by
name. Added columns and widenings go as above. A **drop or a rename** rewrites the table in one
overwrite commit (mirror: the columns; changelog: the fields of ``before``/``after``, so old
images follow too): a dropped column's values leave, a renamed column's values move to the new
name, and a warning says so. The rewrite's commit carries an app transaction naming the schema
it made (:func:`schema_token`), which a replay after a crash finds, so a rewrite is never done
twice (a rename followed by the re-use of the old name must not move data again); and the
table names the schema it is making (``spark_cdc.schemaPending``) before the rewrite, so a restart
after the rewrite's commit and before its record reads the table's schema as the new one
(:func:`current_schema`) rather than bringing it back to the recorded one. The tables
keep plain Parquet column names (no Delta column mapping): the executors write the Parquet files
that a batch commits, and every reader reads the tables.

Each commit of a schema change is planned on the table's newest version, and planned again when
another writer (a platform's OPTIMIZE, VACUUM or properties change) commits first
(:func:`sinks.delta.conflicts.replanning`; a schema or data change by another stops it, naming the
commit). A rewrite's overwrite replaces the whole table as Delta's ``replaceWhere`` does (a
predicate true of every row), so that delta-rs checks the commits since the version it read: a
plain overwrite planned before another writer's compaction removed the files it had read and kept
the compaction's, every row twice (delta-rs 1.6.6; tests/test_shared_lake.py).

Each table records its sink schema in the table property ``spark_cdc.schema`` (at creation and at
every evolution), which a restart reads back (:func:`recorded_schema`): after a lenient DROP
COLUMN the source's catalog no longer has the column, but the sink tables still do, and a DDL
not streamed yet is not in them yet. Runs on the driver; every step checks
the table first, so a crash part-way and a replay finish the work without doing it twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.schema import Schema as DeltaSchema

from cdc.model.history import wider_type
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableSchema, schema_from_dict, schema_to_dict
from sinks.changes import conform
from sinks.delta.conflicts import replanning
from sinks.delta.tables import (
    PROP_KEY,
    PROP_PENDING,
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
APP_SCHEMA = "spark-cdc/schema"  # app transaction of a rewrite that dropped or renamed columns
IMAGES = ("before", "after")  # the changelog's struct columns that hold the table's columns
WHOLE_TABLE = "1 = 1"  # a rewrite's overwrite predicate: every row replaced, concurrent commits checked
R = TypeVar("R")


def ensure_table(uri: str, storage_options: dict[str, str], schema: TableSchema, kind: TableKind,
                 storage: pa.Schema, hooks: Hooks = NO_HOOKS) -> DeltaTable:
    """Open the table at ``uri`` (creating it when absent), evolve it to ``storage`` when that only
    adds columns or widens types (under ``evolve``: also drops, renames, places columns), and check
    that it fits. ``hooks`` pass ``sink_rewritten`` after a drop's or rename's rewrite committed.

    Raises:
        SinkSchemaMismatch: the existing table has columns or types ``storage`` does not grow from,
            or another key.
    """
    table = open_table(uri, storage_options)
    if table is None:
        table = create_table(uri, storage_options, schema, kind, storage)
    else:
        evolve_table(table, uri, storage_options, schema, storage, hooks)
    check_table(table, uri, schema, storage)
    return table


def recorded_schema(table: DeltaTable) -> TableSchema | None:
    """The sink schema a table recorded (None: a table written before the property existed)."""
    text = table.metadata().configuration.get(PROP_SCHEMA)
    return schema_from_dict(json.loads(text)) if text else None


def current_schema(table: DeltaTable) -> TableSchema | None:
    """The sink schema a table has: the one it recorded, or the one its last rewrite made when the
    driver died after that rewrite's commit and before its record (the rewrite names the schema
    it is making in the table's properties first, and its commit carries that schema's token)."""
    pending = table.metadata().configuration.get(PROP_PENDING)
    if pending:
        made = schema_from_dict(json.loads(pending))
        if table.transaction_version(APP_SCHEMA) == schema_token(made):
            return made
    return recorded_schema(table)


def delta_arrow(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Delta stores it, read back as Arrow (for comparisons)."""
    return pa.schema(DeltaSchema.from_arrow(schema).to_arrow())


def evolve_table(table: DeltaTable, uri: str, storage_options: dict[str, str], schema: TableSchema,
                 storage: pa.Schema, hooks: Hooks = NO_HOOKS) -> bool:
    """Bring ``table`` to ``storage`` when that only adds columns and widens types; for a sink
    schema of ``evolve`` (its columns carry their identity), also when it drops, renames or
    reorders columns.

    Returns:
        True when the table changed; False when it already had ``storage`` or when ``storage`` is
        not a growth of it (the caller's schema check then names the mismatch).
    """
    actual = pa.schema(table.schema().to_arrow())
    expected = delta_arrow(storage)
    if has_lineage(schema):
        return _evolve_exactly(table, uri, storage_options, schema, storage, actual, hooks)
    if actual.equals(expected, check_metadata=False):
        return False
    return _grow(table, uri, storage_options, schema, storage, actual, hooks)


def _committing(table: DeltaTable, storage_options: dict[str, str], what: str, hooks: Hooks,
                write: Callable[[DeltaTable], R]) -> R:
    """One commit of a schema change: ``write`` on the table's newest version, planned again when
    another writer commits first (:func:`sinks.delta.conflicts.replanning`; ``hooks`` pass
    ``delta_planned`` before each attempt)."""
    def read() -> DeltaTable:
        table.update_incremental()
        return table

    return replanning(read, write, storage_options, APP_SCHEMA, f"{what} of {table.table_uri}", hooks)


def _grow(table: DeltaTable, uri: str, storage_options: dict[str, str], schema: TableSchema,
          storage: pa.Schema, actual: pa.Schema, hooks: Hooks) -> bool:
    """Add columns and widen types (see :func:`evolve_table`)."""
    plan = _plan(list(actual), list(delta_arrow(storage)))
    if plan is None:
        return False
    added, widened = plan
    if added:
        _committing(table, storage_options, "adding columns", hooks,
                    lambda t: t.alter.add_columns(added))  # type: ignore[arg-type]  # delta-rs Fields
        log.info("%s: added columns %s (Delta schema change, no rewrite)", uri,
                 ", ".join(_names(f) for f in added))
    if widened:
        _rewrite(table, uri, storage_options, storage, widened, hooks)
    _record(table, storage_options, schema, storage, hooks)
    return True


def _record(table: DeltaTable, storage_options: dict[str, str], schema: TableSchema, storage: pa.Schema,
            hooks: Hooks, key: bool = False) -> None:
    """Record ``schema`` (and its statistics columns; with ``key``, its primary key: a key column
    was renamed) in the table's properties."""
    def write(t: DeltaTable) -> None:
        properties = {PROP_SCHEMA: json.dumps(schema_to_dict(schema))}
        if t.metadata().configuration.get(PROP_PENDING):
            properties[PROP_PENDING] = ""  # the rewrite it named is recorded
        if key:
            properties[PROP_KEY] = json.dumps(list(schema.primary_key))
        stats = stats_columns(storage)
        if stats:
            properties[PROP_STATS] = ",".join(stats)
        t.alter.set_table_properties(properties, raise_if_not_exists=False)

    _committing(table, storage_options, "recording the sink schema", hooks, write)
    table.update_incremental()


def has_lineage(schema: TableSchema) -> bool:
    """True for a sink schema of ``evolve``/``try_evolve`` (its columns carry their identity)."""
    return any(c.origin for c in schema.columns)


def schema_token(schema: TableSchema) -> int:
    """A number naming ``schema`` (the app-transaction version of the rewrite that made it)."""
    text = json.dumps(schema_to_dict(schema), sort_keys=True)
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def column_sources(have: TableSchema | None, names: list[str], want: TableSchema) -> dict[str, str | None]:
    """For each column of ``want``, the column of a table that holds its values (None: new).

    Args:
        have: the sink schema the table recorded (None, or one without origins: a table created
            before its first evolution, whose columns are version 0's).
        names: the table's columns now (the mirror's, or the fields of the changelog's images).
        want: the new sink schema.

    A column takes the table's column of the same origin (a renamed column its old name). A table
    without recorded origins also matches the remaining columns by name.
    """
    present = set(names)
    lineage = have is not None and has_lineage(have)
    origins = {c.origin: c.name for c in have.columns if c.origin} if have is not None and lineage \
        else {f"{n}@0": n for n in names}
    out: dict[str, str] = {}
    for c in want.columns:
        source = origins.get(c.origin or "")
        if source in present and source not in out.values():
            out[c.name] = source
    if not lineage:
        for c in want.columns:
            if c.name not in out and c.name in present and c.name not in out.values():
                out[c.name] = c.name
    return {c.name: out.get(c.name) for c in want.columns}


def data_names(actual: pa.Schema) -> list[str]:
    """The table's own columns: the mirror's top-level ones, or the changelog's image fields."""
    if "after" in actual.names and pa.types.is_struct(actual.field("after").type) and "op" in actual.names:
        return [f.name for f in actual.field("after").type]
    return list(actual.names)


def _evolve_exactly(table: DeltaTable, uri: str, storage_options: dict[str, str], schema: TableSchema,
                    storage: pa.Schema, actual: pa.Schema, hooks: Hooks) -> bool:
    """Bring ``table`` to ``schema`` under ``evolve``: add and widen in place, rewrite for drops and
    renames (once: the rewrite's app transaction names the schema it made)."""
    recorded = recorded_schema(table)
    have = recorded if recorded is not None and recorded.table_id == schema.table_id else None
    if have == schema and actual.equals(delta_arrow(storage), check_metadata=False):
        return False  # the common case: every batch's commit passes here
    names = data_names(actual)
    rewritten = table.transaction_version(APP_SCHEMA) == schema_token(schema)  # the rewrite to it committed
    sources: dict[str, str | None] = {c.name: c.name for c in schema.columns} if rewritten \
        else column_sources(have, names, schema)
    moved = {n: s for n, s in sources.items() if s is not None and s != n}
    dropped = set(names) - {s for s in sources.values() if s is not None}
    # an added column that is not last (ADD ... FIRST / AFTER): Delta adds columns at the end
    reordered = [sources[n] or n for n in sources] != names + [n for n, s in sources.items() if s is None]
    recorded_key = table.metadata().configuration.get(PROP_KEY)
    # where the key's values were before: after a committed rewrite, by identity from the record
    key_sources = column_sources(have, have.column_names, schema) if rewritten and have is not None else sources
    key_renamed = recorded_key is not None and list(schema.primary_key) != json.loads(recorded_key) and \
        [key_sources.get(k) for k in schema.primary_key] == json.loads(recorded_key)
    if moved or dropped or reordered:
        _restructure(table, uri, storage_options, schema, storage, sources, moved, dropped, hooks)
        hooks.reached("sink_rewritten")  # crash tests: the rewrite committed, its schema not recorded yet
    elif not actual.equals(delta_arrow(storage), check_metadata=False):
        return _grow(table, uri, storage_options, schema, storage, actual, hooks)
    elif have == schema:
        return False
    _record(table, storage_options, schema, storage, hooks, key_renamed)
    return True


def remap(rows: pa.Table, storage: pa.Schema, sources: dict[str, str | None]) -> pa.Table:
    """``rows`` of a table (or a staged file) as ``storage``: each column, or each field of a
    changelog's images, taken from its source column (None: null), cast (widened); the
    changelog's other columns by name.

    Args:
        rows: the rows, in a table's storage layout before the change.
        storage: the storage schema after it.
        sources: the new column names and where their values are (:func:`column_sources`).
    """
    changelog = "op" in storage.names and "after" in storage.names
    columns = []
    for f in storage:
        if changelog and f.name in IMAGES:
            columns.append(_remap_struct(rows.column(f.name).combine_chunks(), f.type, sources))
        elif changelog:
            columns.append(_cast(rows.column(f.name).combine_chunks(), f.type) if f.name in rows.column_names
                           else pa.nulls(rows.num_rows, f.type))
        else:
            source = sources.get(f.name)
            columns.append(_cast(rows.column(source).combine_chunks(), f.type) if source in rows.column_names
                           else pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=storage)


def _remap_struct(array: pa.Array, target: pa.DataType, sources: dict[str, str | None]) -> pa.Array:
    have = {f.name: i for i, f in enumerate(array.type)}
    children = []
    for f in target:
        source = sources.get(f.name)
        children.append(_cast(pc.struct_field(array, [have[source]]), f.type) if source in have
                        else pa.nulls(len(array), f.type))
    return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())


def _cast(array: pa.Array, to: pa.DataType) -> pa.Array:
    if array.type == to:
        return array
    if pa.types.is_struct(to):
        return _remap_struct(array, to, {f.name: f.name for f in to})
    return pc.cast(array, to)


def _restructure(table: DeltaTable, uri: str, storage_options: dict[str, str], schema: TableSchema,
                 storage: pa.Schema, sources: dict[str, str | None], moved: dict[str, str],
                 dropped: set[str], hooks: Hooks) -> None:
    """Rewrite every row into ``storage`` (one overwrite commit carrying the schema's app
    transaction): dropped columns leave, renamed ones move, added ones are null."""
    what = "; ".join([f"renamed {s} to {n}" for n, s in moved.items()] +
                     [f"dropped {d}" for d in sorted(dropped)]) or "the new column order"
    append_only = table.metadata().configuration.get(_APPEND_ONLY) == "true"
    # name the schema first: a restart after the rewrite's commit and before its record reads it
    # back (current_schema), rather than the recorded one the table no longer has
    properties = {PROP_PENDING: json.dumps(schema_to_dict(schema))}
    if append_only:
        properties[_APPEND_ONLY] = "false"
    _committing(table, storage_options, "naming the schema of a rewrite", hooks,
                lambda t: t.alter.set_table_properties(properties, raise_if_not_exists=False))

    def overwrite(t: DeltaTable) -> None:
        rows = read_table(uri, storage_options)  # the version ``t`` has, or a later one: the commit checks
        log.warning("%s: rewriting the table (%d rows) for %s: Delta tables without column mapping drop, "
                    "rename and place columns by a rewrite", uri, rows.num_rows, what)
        write_deltalake(t, remap(rows, storage, sources), mode="overwrite", schema_mode="overwrite",
                        predicate=WHOLE_TABLE, commit_properties=CommitProperties(
                            app_transactions=[Transaction(APP_SCHEMA, schema_token(schema))]))

    _committing(table, storage_options, "a rewrite", hooks, overwrite)
    if append_only:
        _committing(table, storage_options, "restoring delta.appendOnly", hooks,
                    lambda t: t.alter.set_table_properties({_APPEND_ONLY: "true"}))


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
             widened: list[str], hooks: Hooks) -> None:
    """Rewrite every row with the wider types (one overwrite commit)."""
    append_only = table.metadata().configuration.get(_APPEND_ONLY) == "true"
    if append_only:
        _committing(table, storage_options, "lifting delta.appendOnly", hooks,
                    lambda t: t.alter.set_table_properties({_APPEND_ONLY: "false"}))

    def overwrite(t: DeltaTable) -> None:
        rows = conform(read_table(uri, storage_options), storage)  # the version ``t`` has, or a later one
        log.warning("%s: rewriting the table (%d rows) to widen %s: delta-rs has no Delta type widening",
                    uri, rows.num_rows, ", ".join(widened))
        write_deltalake(t, rows, mode="overwrite", schema_mode="overwrite", predicate=WHOLE_TABLE)

    _committing(table, storage_options, "a rewrite", hooks, overwrite)
    if append_only:
        _committing(table, storage_options, "restoring delta.appendOnly", hooks,
                    lambda t: t.alter.set_table_properties({_APPEND_ONLY: "true"}))
