"""Schema history: each captured table's schema at every log position, and what the sinks see.

A dialect that reads DDL from its log (MySQL: the binlog's query events) records one
:class:`SchemaVersion` per change of a table: version 0 is the schema the job started with, and
version ``n`` takes effect at the log position right after the DDL that made it. A reader decodes
a row with the version in force at the row's position (:meth:`SchemaHistory.at`), so a restart
at an older offset decodes with the schema of that time, not with today's catalog.

Versions are keyed by log position, not by when they were seen: a replayed batch, or two readers
of one cut slice, find the same DDL at the same position and record the same version, so writing
a version is idempotent (the state directory keeps them: :class:`HistoryStore`).

The sinks do not see the source's versions directly but their *sink schema* under the configured
behaviour (``source.schema_change.behavior``, docs/concepts/schema-evolution.md), which only grows:

* ``lenient``: the union of every version so far: added and renamed-to columns are appended
  (nullable), dropped and renamed-from columns stay (null from then on), widened types widen;
* ``ignore``: version 0, always: new columns are left out, dropped ones are null;
* ``evolve``: the version's own columns, exactly: dropped columns leave, renamed ones carry their
  data under the new name. Each column carries its identity across renames
  (:attr:`cdc.model.schema.Column.origin`, ``<name>@<version that added it>``), from the renames
  each version records, so a sink can tell a rename from a drop and an add. A type change that is
  not a widening stops the job (:class:`SchemaChanged`, naming the DDL);
* ``try_evolve``: as ``evolve``, but such a type change keeps the column's old type, with a
  warning: narrower values are cast, values that do not cast are null.

:func:`project_rows` turns rows typed by a source version into rows of the sink schema.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from cdc.model.errors import SchemaChanged
from cdc.model.schema import Column, TableId, TableSchema, schema_from_dict, schema_to_dict

Behavior = Literal["evolve", "try_evolve", "lenient", "ignore", "exception"]
EVOLVING: frozenset[str] = frozenset({"evolve", "try_evolve"})  # sink schemas with column lineage
SortKey = tuple[int, ...]  # a log position as a comparable tuple (MySQL: file number, byte)
BEGINNING: SortKey = (-1,)

# keys of the Arrow schema metadata that carries the sink schema with a table's change rows
SCHEMA_METADATA = b"spark_cdc.schema"
VERSION_METADATA = b"spark_cdc.schema_version"
CHANGE_METADATA = b"spark_cdc.schema_change"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchemaVersion:
    """A table's schema from a log position on.

    Attributes:
        version: 0 for the schema the job started with, then 1, 2, ... per DDL.
        key: where it takes effect (:data:`BEGINNING` for version 0).
        position: the same position in the dialect's words (``mysql-bin.000003:1234``).
        ddl: the statement that made it (None for version 0).
        schema: the table's columns and key from then on.
        renames: the columns the DDL renamed, ``(old name, new name)`` in statement order (MySQL:
            ``RENAME COLUMN``, ``CHANGE old new``; Postgres: inferred from the column order, see
            ``binlog/postgres/relations.py``). ``evolve`` moves their data to the new name.
    """

    version: int
    key: SortKey
    position: str
    ddl: str | None
    schema: TableSchema
    renames: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"version": self.version, "key": list(self.key), "position": self.position, "ddl": self.ddl,
               "schema": schema_to_dict(self.schema)}
        if self.renames:
            out["renames"] = [list(r) for r in self.renames]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaVersion:
        return cls(int(d["version"]), tuple(d["key"]), d["position"], d.get("ddl"), schema_from_dict(d["schema"]),
                   tuple((str(a), str(b)) for a, b in d.get("renames") or ()))


class HistoryStore(Protocol):
    """Where versions persist (the job's state directory: ``cdc.spark.state.StateStore``)."""

    def schema_versions(self, table: TableId) -> list[dict[str, Any]]:
        """Every stored version of ``table`` (any order)."""
        ...

    def write_schema_version(self, table: TableId, version: int, data: dict[str, Any]) -> None:
        """Store a version (idempotent: the same version always has the same content)."""
        ...


class SchemaHistory:
    """The versions of some tables, ordered by position; optionally backed by a store.

    Args:
        store: where versions are read from and written to (None: this reader's memory only).
        behavior: how the sinks follow (see the module docstring).
    """

    def __init__(self, store: HistoryStore | None = None, behavior: Behavior = "lenient") -> None:
        self.store = store
        self.behavior = behavior
        self._versions: dict[TableId, list[SchemaVersion]] = {}
        self._sink: dict[tuple[TableId, int], TableSchema] = {}

    def versions(self, table: TableId) -> list[SchemaVersion]:
        """The table's versions in position order (loaded from the store on first use)."""
        if table not in self._versions:
            loaded = [SchemaVersion.from_dict(d) for d in self.store.schema_versions(table)] if self.store else []
            self._versions[table] = sorted(loaded, key=lambda v: v.version)
        return self._versions[table]

    def known(self, table: TableId) -> bool:
        return bool(self.versions(table))

    def at(self, table: TableId, key: SortKey) -> SchemaVersion | None:
        """The version in force at ``key`` (a row there was written under it); None if unknown."""
        versions = self.versions(table)
        i = bisect.bisect_right([v.key for v in versions], key)
        return versions[i - 1] if i else None

    def start(self, schema: TableSchema) -> SchemaVersion:
        """Record ``schema`` as version 0 unless the table has a history already; its version 0."""
        versions = self.versions(schema.table_id)
        if not versions:
            self._add(SchemaVersion(0, BEGINNING, "start", None, schema))
        return versions[0]

    def joined(self, schema: TableSchema, key: SortKey, position: str) -> SchemaVersion | None:
        """Record ``schema``, a table's definition in the catalog as it joins the job's offsets,
        as a new version at ``key`` (the log's position now) when its latest version differs.

        Only for a table that no committed or planned offset names: no reader followed its log,
        so a DDL made since its history was written (by a driver killed before the table joined a
        batch, or before the table was dropped and created again) is known only from the catalog.
        Its chunks, read after ``key``, and its stream find the new version and are tagged with
        it, so the sinks evolve as for a DDL read from the log. Renames cannot be told from a drop
        and an add here.

        Returns:
            The version recorded (or the one a second call finds at ``key``); None when the table
            has no history (:meth:`start` makes version 0) or its latest version is ``schema``.

        Raises:
            SchemaChanged: under ``exception`` (the job stops before any row of the definition);
                or the history has a version after ``key`` (another run's state directory).
        """
        versions = self.versions(schema.table_id)
        if not versions or versions[-1].schema == schema:
            return None
        latest = versions[-1]
        ddl = (f"definition read from the catalog when the table joined the running job: columns "
               f"{', '.join(schema.column_names)} (version {latest.version} from {latest.position} had "
               f"{', '.join(latest.schema.column_names)}; the DDL between them was not read from the log)")
        if self.behavior == "exception":
            raise SchemaChanged(
                f"captured table {schema.table_id} changed while no batch of the job read it: {ddl}. "
                "source.schema_change.behavior is 'exception', so the job stops here; set it to 'lenient' "
                "to follow the change, or take a new snapshot (new checkpoint)",
                table=str(schema.table_id), position=position, ddl=ddl)
        version = self.record(schema.table_id, key, position, ddl, schema)
        log.info("%s: schema version %d from %s: %s", schema.table_id, version.version, position, ddl)
        return version

    def record(self, table: TableId, key: SortKey, position: str, ddl: str,
               schema: TableSchema, renames: Iterable[tuple[str, str]] = ()) -> SchemaVersion:
        """Record the schema a DDL at ``key`` made (or return the version already recorded there).

        ``renames`` are the columns the DDL renamed, ``(old, new)`` (see :class:`SchemaVersion`).

        Raises:
            ValueError: the table has no version before ``key`` to change.
        """
        base = self.at(table, key)
        if base is None:
            raise ValueError(f"{table} has no schema before {position}")
        if base.key == key:
            return base  # seen before: a replay, or another reader of the same slice
        later = [v for v in self.versions(table) if v.key > key]
        if later:  # a DDL the history skipped: it was made from another run of the log
            self._conflict(table, position, later[0])
        return self._add(SchemaVersion(base.version + 1, key, position, ddl, schema, tuple(renames)))

    @staticmethod
    def _conflict(table: TableId, position: str, later: SchemaVersion) -> None:
        raise SchemaChanged(
            f"the schema history of {table} has version {later.version} at {later.position} "
            f"({later.ddl!r}), but the log now shows another DDL before it at {position}: the "
            "state directory belongs to another run of the log. Start again with a new checkpoint",
            table=str(table), position=position)

    def _add(self, version: SchemaVersion) -> SchemaVersion:
        table = version.schema.table_id
        versions = self.versions(table)
        versions.append(version)
        versions.sort(key=lambda v: v.version)
        if self.store is not None:
            self.store.write_schema_version(table, version.version, version.to_dict())
        return version

    def sink_schema(self, table: TableId, version: int) -> TableSchema:
        """The schema the sinks see for rows written under ``version`` (see the module docstring).

        Raises:
            SchemaChanged: ``lenient`` cannot widen a column to the new type (e.g. INT -> TEXT);
                ``evolve`` cannot apply a type change that is not a widening.
        """
        cached = self._sink.get((table, version))
        if cached is not None:
            return cached
        versions = self.versions(table)
        if self.behavior in EVOLVING:
            out = with_lineage(versions[0].schema, 0) if version == 0 else \
                merge_evolve(self.sink_schema(table, version - 1), versions[version], self.behavior == "try_evolve")
        elif version == 0 or self.behavior != "lenient":
            out = versions[0].schema
        else:
            out = merge_lenient(self.sink_schema(table, version - 1), versions[version])
        self._sink[table, version] = out
        return out


def merge_lenient(sink: TableSchema, change: SchemaVersion) -> TableSchema:
    """``sink`` after ``change`` under ``lenient``: new columns appended, none removed, types
    widened.

    Raises:
        SchemaChanged: a column's new type is not a widening of its old one.
    """
    columns = list(sink.columns)
    index = {c.name.lower(): i for i, c in enumerate(columns)}
    for col in change.schema.columns:
        i = index.get(col.name.lower())
        if i is None:
            index[col.name.lower()] = len(columns)
            columns.append(replace(col, nullable=True))
            continue
        old = columns[i]
        wide = wider_type(old.arrow, col.arrow)
        if wide is None:
            raise SchemaChanged(
                f"{sink.table_id}: {change.ddl!r} at {change.position} changes column {old.name} from "
                f"{old.column_type} ({old.arrow}) to {col.column_type} ({col.arrow}), which is not a "
                "widening; schema_change.behavior lenient only widens types. Set source.schema_change."
                "behavior to 'ignore' or 'exception', or take a new snapshot into a new sink path",
                table=str(sink.table_id), position=change.position, ddl=change.ddl or "")
        columns[i] = replace(col, nullable=True, arrow=wide)  # narrowed in the source: stays wide
    return TableSchema(sink.table_id, tuple(columns), sink.primary_key, sink.connector, sink.database,
                       change.schema.replica_identity)


def with_lineage(schema: TableSchema, version: int) -> TableSchema:
    """``schema`` with each column's :attr:`~cdc.model.schema.Column.origin` set to
    ``<name>@<version>`` where it has none."""
    return replace(schema, columns=tuple(c if c.origin else replace(c, origin=f"{c.name}@{version}")
                                         for c in schema.columns))


def merge_evolve(sink: TableSchema, change: SchemaVersion, tolerate: bool = False) -> TableSchema:
    """The sink schema of ``change`` under ``evolve``: its own columns and key, each with its
    lineage (a renamed column keeps the origin of its old name, a column of an unchanged name
    keeps its own, any other is new at ``change.version``).

    Args:
        sink: the sink schema of the version before.
        change: the new version.
        tolerate: ``try_evolve``: a type change that is not a widening keeps the old type (a
            warning names the DDL) instead of stopping the job.

    Raises:
        SchemaChanged: (``evolve``) a column's new type is not a widening of its old one.
    """
    before = {c.name.lower(): c for c in sink.columns}
    renamed = {new.lower(): old.lower() for old, new in _composed(change.renames)}
    gone = set(renamed.values()) - set(renamed)  # renamed away: the name no longer means the column
    columns = []
    for col in change.schema.columns:
        name = col.name.lower()
        old = before.get(renamed[name]) if name in renamed else None if name in gone else before.get(name)
        if old is None:
            columns.append(replace(col, origin=f"{col.name}@{change.version}"))
            continue
        columns.append(_evolved_column(sink, change, old, replace(col, origin=old.origin), tolerate))
    return TableSchema(sink.table_id, tuple(columns), change.schema.primary_key, sink.connector, sink.database,
                       change.schema.replica_identity)


def _composed(renames: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Renames of one DDL composed (``a -> b`` then ``b -> c`` is ``a -> c``)."""
    out: dict[str, str] = {}  # final name -> first name
    for old, new in renames:
        out[new] = out.pop(old, old)
    return [(old, new) for new, old in out.items() if old.lower() != new.lower()]


def _evolved_column(sink: TableSchema, change: SchemaVersion, old: Column, new: Column, tolerate: bool) -> Column:
    """``new`` (of ``change``) following ``old`` (of the sink schema before), type checked."""
    if old.arrow == new.arrow or wider_type(old.arrow, new.arrow) == new.arrow:
        return new
    what = (f"{sink.table_id}: {change.ddl!r} at {change.position} changes column {new.name} from "
            f"{old.column_type} ({old.arrow}) to {new.column_type} ({new.arrow}), which is not a widening")
    if not tolerate:
        raise SchemaChanged(
            f"{what}: the sinks cannot apply it exactly, and source.schema_change.behavior is 'evolve'. "
            "Set it to 'try_evolve' to keep the old type (narrower values cast, others null), or take "
            "a new snapshot into a new sink path", table=str(sink.table_id), position=change.position,
            ddl=change.ddl or "")
    log.warning("%s; schema_change.behavior try_evolve keeps its type %s (values cast, null where they "
                "do not fit)", what, old.arrow)
    return replace(old, name=new.name, nullable=True)


_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def wider_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type that holds every value of ``a`` and of ``b`` without loss, when one of them is it."""
    if a == b:
        return a
    for x, y in ((a, b), (b, a)):
        if x in _INTS and y in _INTS:
            return _INTS[max(_INTS.index(x), _INTS.index(y))]
        if x == pa.float32() and y == pa.float64():
            return y
        if x in _INTS and pa.types.is_decimal(y) and y.precision - y.scale >= len(str(2 ** (x.bit_width - 1))):
            return y
        if pa.types.is_decimal(x) and pa.types.is_decimal(y) and y.scale >= x.scale \
                and y.precision - y.scale >= x.precision - x.scale:
            return y
    return None


def project_rows(rows: pa.Table, sink: TableSchema, image_columns: Iterable[str] = ("before", "after")) -> pa.Table:
    """Change rows whose images are typed by a source version, as images of ``sink``: columns the
    version lacks are null, columns ``sink`` lacks are left out, the others cast (widened; under
    ``try_evolve``, a column whose type the sinks kept: null where a value does not cast)."""
    out = rows
    target = sink.arrow_schema()
    tolerant = {c.name for c in sink.columns if c.origin}  # evolve's casts only fail under try_evolve
    for name in image_columns:
        i = out.schema.get_field_index(name)
        if out.schema.field(i).type == pa.struct(list(target)):
            continue  # already the sink's images (evolve without a kept type)
        column = out.column(i).combine_chunks()
        out = out.set_column(i, pa.field(name, pa.struct(list(target)), nullable=True),
                             _project_struct(column, target, tolerant))
    return out


def _project_struct(column: pa.Array, target: pa.Schema, tolerant: set[str] | frozenset[str] = frozenset()) -> pa.Array:
    have = {f.name: j for j, f in enumerate(column.type)}
    children = []
    for f in target:
        j = have.get(f.name)
        if j is None:
            children.append(pa.nulls(len(column), f.type))
        else:
            child = pc.struct_field(column, [j])
            try:
                children.append(child if child.type == f.type else
                                try_cast(child, f.type) if f.name in tolerant else pc.cast(child, f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaChanged(
                    f"column {f.name}: a value of type {child.type} does not fit the sinks' type {f.type} "
                    f"({exc}); with schema_change.behavior 'ignore' the sinks keep the first type. Use "
                    "'lenient' (new sink path) to widen it", column=f.name) from None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=column.is_null())


def try_cast(values: pa.Array, to: pa.DataType) -> pa.Array:
    """``values`` cast to ``to``, null where a value does not cast (``try_evolve``'s kept types).

    Whole arrays are cast; only an array holding a value that does not cast is halved, so the
    Python work is per bad value (times log n), not per row.
    """
    try:
        return pc.cast(values, to)
    except pa.ArrowNotImplementedError:
        return pa.nulls(len(values), to)  # no cast between the types at all
    except pa.ArrowInvalid:
        if len(values) <= 1:
            return pa.nulls(len(values), to)
    half = len(values) // 2
    return pa.concat_arrays([try_cast(values.slice(0, half), to), try_cast(values.slice(half), to)])


def with_schema(rows: pa.Table, sink: TableSchema, version: int,
                change: SchemaChange | None = None) -> pa.Table:
    """``rows`` tagged with the sink schema they have and the source version they were written
    under (Arrow schema metadata, which survives filters and slices), and with the DDL that made
    that version (for sinks that publish schema changes)."""
    meta = dict(rows.schema.metadata or {})
    meta[SCHEMA_METADATA] = json.dumps(schema_to_dict(sink)).encode()
    meta[VERSION_METADATA] = str(version).encode()
    if change is not None:
        meta[CHANGE_METADATA] = json.dumps(change.to_dict()).encode()
    return rows.replace_schema_metadata(meta)


@dataclass(frozen=True)
class SchemaChange:
    """The DDL that made a schema version, as a sink publishes it.

    Attributes:
        version: the version it made.
        ddl: the statement.
        source: the statement's Debezium ``source`` block (built by the dialect).
        schema: the source table after it (not the sink schema).
    """

    version: int
    ddl: str
    source: dict[str, Any]
    schema: TableSchema

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "ddl": self.ddl, "source": self.source,
                "schema": schema_to_dict(self.schema)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaChange:
        return cls(int(d["version"]), str(d["ddl"]), dict(d["source"]), schema_from_dict(d["schema"]))


def tagged_change(rows: pa.Table | pa.Schema) -> SchemaChange | None:
    """The DDL :func:`with_schema` put on ``rows``; None for rows of version 0 or untagged."""
    meta = (rows if isinstance(rows, pa.Schema) else rows.schema).metadata or {}
    return SchemaChange.from_dict(json.loads(meta[CHANGE_METADATA])) if CHANGE_METADATA in meta else None


def tagged_schema(rows: pa.Table | pa.Schema) -> tuple[TableSchema, int] | None:
    """The sink schema and version :func:`with_schema` put on ``rows``; None when untagged."""
    meta = (rows if isinstance(rows, pa.Schema) else rows.schema).metadata or {}
    if SCHEMA_METADATA not in meta:
        return None
    return schema_from_dict(json.loads(meta[SCHEMA_METADATA])), int(meta.get(VERSION_METADATA, b"0"))


def renamed(schema: TableSchema, old: str, new: Column) -> TableSchema:
    """``schema`` with column ``old`` replaced by ``new`` in place (a rename or CHANGE)."""
    columns = tuple(new if c.name.lower() == old.lower() else c for c in schema.columns)
    key = tuple(new.name if k.lower() == old.lower() else k for k in schema.primary_key)
    return replace(schema, columns=columns, primary_key=key)
