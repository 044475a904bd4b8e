"""Relation messages as schema versions: how the Postgres stream follows DDL (executor).

PostgreSQL logs no DDL, but logical decoding describes every change with the table as it was at
that change (a historic catalog snapshot), and pgoutput sends that description, a Relation
message (column names, type oids, typmods, key flags), before the first change of a relation in
each decoding session and again after the table's definition changed. So the changes themselves
say which definition they were written under; the job's schema history
(:mod:`cdc.model.history`, shared with MySQL) numbers those definitions.

**Where a version starts.** A Relation message has no stable position: each peek is a new
decoding session that sends one before the first change of every relation, wherever its decoding
began, and the DDL's own position is not in the log. What is stable is the change: a change
decodes under the same definition in every session. So a new version starts at the **first
change written under the new definition**, keyed ``(commit LSN, change LSN)``. A replayed batch,
a second reader of the same slice, or a restart at an older offset decode the same change first
under it, find the version already at that key and write the same file again (idempotent). The
change LSN is not unique (one multi-insert record holds several rows), but every row of one
record is of one relation under one definition, so the key still separates versions.

**What counts as a change of definition.** Column names and types (the type's name and its
``format_type`` text, e.g. ``character varying(10)`` to ``(20)``, ``integer`` to ``bigint``,
``numeric(10,2)`` to ``(12,2)``). Not: nullability and defaults (not in the message), enum labels
(the type, not the table, changes), key flags (they follow the replica identity; the primary key
is kept while its columns exist). The message names columns, it does not identify them: a
``RENAME COLUMN`` is a drop of the old name and an add of the new one, which under ``lenient``
gives what a rename gives (the new column added, the old one kept and null from then on).

**Renames under ``evolve``** are inferred from the column order (:func:`infer_renames`): the
message lists the columns in ``attnum`` order, and ``ADD COLUMN`` always takes a number above
every existing one, so a new name that comes before a column of the old definition cannot be an
added column: it is the renamed column that was in its place. A new name after the last such
column cannot be told from a drop and an add, and is taken as one (a warning says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from binlog.postgres.pgoutput import Relation
from binlog.postgres.positions import format_lsn
from binlog.postgres.types import CONNECTOR, default_literal, postgres_column
from cdc.model.envelope import source_block
from cdc.model.errors import SchemaChanged
from cdc.model.history import EVOLVING, Behavior, SchemaChange, SchemaHistory, SchemaVersion
from cdc.model.schema import Column, TableId, TableSchema

log = logging.getLogger(__name__)

# Each Relation column's type as the catalog names it (domains by their base type, as
# types.load_table_schema reads a table's columns).
_TYPES_SQL = """
SELECT t.typname, format_type(x.oid, x.typmod), t.typcategory, et.typname, et.typcategory,
       (SELECT string_agg('''' || replace(e.enumlabel, '''', '''''') || '''', ',' ORDER BY e.enumsortorder)
        FROM pg_enum e WHERE e.enumtypid = COALESCE(et.oid, t.oid))
FROM unnest(%s::oid[], %s::int4[]) WITH ORDINALITY AS x(oid, typmod, ord)
JOIN pg_type t0 ON t0.oid = x.oid
JOIN pg_type t ON t.oid = CASE WHEN t0.typtype = 'd' THEN t0.typbasetype ELSE t0.oid END
LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
ORDER BY x.ord
"""

# The columns' defaults, as types.load_table_schema reads them
_DEFAULTS_SQL = """
SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a
JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
"""

Key = tuple[int, int]  # (commit LSN, change LSN): where a change sits, as a history key


def signature(column: Column) -> tuple[Any, ...]:
    """What a Relation message can say about a column (enum labels left out: see module doc)."""
    full = "enum" if column.column_type.startswith("enum(") else column.column_type
    return (column.name, column.data_type, full, column.arrow)


def relation_schema(rel: Relation, types: list[tuple[Any, ...]], base: TableSchema,
                    defaults: dict[str, str | None] | None = None) -> TableSchema:
    """The table as ``rel`` describes it, on the facts of ``base`` (the version in force):
    columns whose name and type did not change stay ``base``'s (nullability, collation, default);
    other columns are nullable (the message does not say), with their default from ``defaults``
    (the catalog's, read when the message came, as Debezium refreshes it); ``base``'s key while its
    columns exist, else the message's key flags (replica identity DEFAULT or INDEX). ``base``
    itself when nothing changed."""
    old = {c.name: c for c in base.columns}
    columns = []
    for name, typmod, (typname, full, category, elem, elem_category, labels) in zip(
            rel.columns, rel.typmods or (-1,) * len(rel.columns), types, strict=True):
        prior = old.get(name)
        column = postgres_column(name, typname, full, True, typmod=typmod, category=category, elem=elem,
                                 elem_category=elem_category, collation=prior.collation if prior else None,
                                 enum_labels=labels, default=(defaults or {}).get(name))
        columns.append(prior if prior is not None and signature(prior) == signature(column) else column)
    key = base.primary_key
    if not set(key) <= set(rel.columns):  # a key column dropped: the key the message flags, if any
        key = tuple(n for n, k in zip(rel.columns, rel.key, strict=True) if k) if rel.replica_identity in "di" else ()
    schema = replace(base, columns=tuple(columns), primary_key=key, replica_identity=rel.replica_identity)
    return base if schema == base else schema


def infer_renames(old: TableSchema, new: TableSchema) -> tuple[tuple[str, str], ...]:
    """The columns ``new`` renamed from ``old``, inferred from the column order (see the module
    docstring): between two columns that kept their names, the old names that left and the new
    names that came are renames, in order, when there are as many of each."""
    names = {c.name for c in new.columns}
    before = {c.name for c in old.columns}
    kept = [c.name for c in new.columns if c.name in before]
    if [c.name for c in old.columns if c.name in names] != kept:
        return ()  # the surviving columns changed order: not a definition the log can produce
    out: list[tuple[str, str]] = []
    gone: list[str] = []
    came: list[str] = []
    old_iter = iter(old.columns)
    for name in kept:
        for c in old_iter:
            if c.name == name:
                break
            gone.append(c.name)
        came = []
        # the new names just before ``name`` in new (after the previous kept column)
        at = [c.name for c in new.columns].index(name)
        j = at - 1
        while j >= 0 and new.columns[j].name not in before:
            came.insert(0, new.columns[j].name)
            j -= 1
        if came and len(came) == len(gone):
            out += list(zip(gone, came, strict=True))
        gone = []
    return tuple(out)


def describe(old: TableSchema, new: TableSchema, renames: tuple[tuple[str, str], ...] = ()) -> str:
    """The synthesized, labelled ``ddl`` of a version (PostgreSQL logs no DDL text), e.g.
    ``relation message: added column note text; dropped column old; changed column qty integer
    to bigint``."""
    before = {c.name: c for c in old.columns}
    after = {c.name: c for c in new.columns}
    parts = [f"renamed column {a} to {b}" for a, b in renames]
    before = {**{n: c for n, c in before.items() if n not in dict(renames)},
              **{b: before[a] for a, b in renames}}
    parts += [f"dropped column {n}" for n in before if n not in after]
    parts += [f"added column {n} {c.column_type}" for n, c in after.items() if n not in before]
    parts += [f"changed column {n} {before[n].column_type} to {c.column_type}" for n, c in after.items()
              if n in before and signature(before[n])[1:] != signature(c)[1:]]
    if old.primary_key != new.primary_key:
        parts.append(f"primary key ({', '.join(old.primary_key)}) to ({', '.join(new.primary_key)})")
    return "relation message (PostgreSQL logs no DDL text): " + ("; ".join(parts) or "column order changed")


class RelationVersions:
    """The schema version of each Relation message's changes, recorded in the history when new
    (executor; one per log reader).

    Args:
        history: the job's schema history (its store is the state directory).
        connection: the reader's connection (type names by oid, once per distinct message).
        name: the source name (``source.name`` of the schema change events).
    """

    def __init__(self, history: SchemaHistory, connection: Callable[[], Any], name: str) -> None:
        self.history = history
        self.connection = connection
        self.name = name
        self._types: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[Any, ...]]] = {}

    @property
    def behavior(self) -> Behavior:
        return self.history.behavior

    def start(self, schema: TableSchema) -> None:
        """Version 0 of a table without a history: the job's schema (a first start)."""
        self.history.start(schema)

    def version(self, rel: Relation, table: TableId, first: Key, last: Key) -> SchemaVersion:
        """The version the changes under ``rel`` (the first at ``first``, the last at ``last``)
        were written under; recorded at ``first`` when ``rel`` shows a new definition.

        Raises:
            SchemaChanged: a new definition under ``schema_change.behavior: exception``; or a
                history that disagrees with the log (another run's state directory).
        """
        base = self.history.at(table, first)
        if base is None:
            raise ValueError(f"{table} has no schema history (its version 0 is started first)")
        schema = relation_schema(rel, self._type_rows(rel), base.schema, self._defaults(rel, base.schema))
        if schema is base.schema:
            version = base
        else:
            where = _where(first)
            renames = infer_renames(base.schema, schema) if self.behavior in EVOLVING else ()
            ddl = describe(base.schema, schema, renames)
            if self.behavior == "exception":
                raise SchemaChanged(
                    f"captured table {table} changed: its first change under the new definition is at "
                    f"{where}; {ddl}. source.schema_change.behavior "
                    "is 'exception', so the job stops here; set it to 'lenient' to follow the change, or "
                    "take a new snapshot from after it (new checkpoint)", table=str(table),
                    position=format_lsn(first[1]), ddl=ddl)
            version = self.history.record(table, first, format_lsn(first[1]), ddl, schema, renames)
            if self.behavior in EVOLVING and "dropped column" in ddl and "added column" in ddl:
                log.warning("%s: %s: under schema_change.behavior %s this is a drop and an add; a column "
                            "renamed at the end of the table cannot be told from that (the Relation "
                            "message has names, not column identities)", table, ddl, self.behavior)
            log.info("%s: schema version %d from %s: %s", table, version.version, where, ddl)
        self.check(table, version, last)
        return version

    def check(self, table: TableId, version: SchemaVersion, at: Key) -> None:
        """Refuse a change at ``at`` under ``version`` when the history starts a later version at
        or before it (the history was written from another run of the log).

        Raises:
            SchemaChanged: naming both versions.
        """
        following = [v for v in self.history.versions(table) if version.key < v.key <= at]
        if following:
            later = following[0]
            raise SchemaChanged(
                f"the schema history of {table} has version {later.version} from {later.position} "
                f"({later.ddl!r}), but the log holds a change after it, at {_where(at)}, under the "
                f"definition of version {version.version}: the state directory belongs to another run "
                "of the log. Start again with a new checkpoint", table=str(table), position=later.position)

    def schema_change(self, table: TableId, version: SchemaVersion, ts_ms: int, xid: int) -> SchemaChange | None:
        """The event a sink publishes for ``version`` (None for version 0): its source block is
        the first change's under it (``lsn``, ``sequence``, ``txId``, ``ts_ms``)."""
        if version.version == 0 or version.ddl is None:
            return None
        commit, lsn = version.key[0], version.key[1]
        source = source_block(CONNECTOR, self.name, table, ts_ms, "false",
                              {"schema": table.db, "txId": xid, "lsn": lsn, "sequence": f'["{commit}","{lsn}"]',
                               "commit_lsn": commit})
        return SchemaChange(version.version, version.ddl, source, version.schema)

    def _defaults(self, rel: Relation, base: TableSchema) -> dict[str, str | None]:
        """The catalog's defaults of the columns ``base`` lacks (new ones): none asked when it has them all."""
        if all(name in base.column_names for name in rel.columns):
            return {}
        rows = self.connection().execute(_DEFAULTS_SQL, (rel.oid,)).fetchall()
        return {name: default_literal(expr) for name, expr in rows}

    def _type_rows(self, rel: Relation) -> list[tuple[Any, ...]]:
        typmods = rel.typmods or (-1,) * len(rel.columns)
        cache = (rel.type_oids, typmods)
        if cache not in self._types:
            rows = self.connection().execute(_TYPES_SQL, (list(rel.type_oids), list(typmods))).fetchall()
            if len(rows) != len(rel.columns):
                raise SchemaChanged(f"{rel.namespace}.{rel.name}: a type of its Relation message is no longer in "
                                    f"the catalog (type oids {list(rel.type_oids)})",
                                    table=f"{rel.namespace}.{rel.name}")
            self._types[cache] = [tuple(r) for r in rows]
        return self._types[cache]


def _where(key: Key) -> str:
    return f"LSN {format_lsn(key[1])} (commit {format_lsn(key[0])})"
