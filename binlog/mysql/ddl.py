"""DDL from the binlog's query events, parsed with sqlglot into what changes for a captured table.

MySQL and MariaDB write every DDL statement as a query event, with the session's default database.
:func:`parse_ddl` reads one statement and returns a :class:`TableDdl` per captured table it
touches:

* ``ALTER TABLE``: ``ADD [COLUMN]`` (with ``FIRST`` / ``AFTER``), ``DROP [COLUMN]``,
  ``MODIFY``, ``CHANGE``, ``RENAME COLUMN``, ``ADD``/``DROP PRIMARY KEY``, ``RENAME TO``; index,
  default and table-option changes leave the columns as they were;
* ``CREATE TABLE`` (column definitions), ``DROP TABLE``, ``RENAME TABLE``, ``TRUNCATE``.

A statement sqlglot does not cover (it falls back to a bare command, or an ALTER action it does not
model) raises :class:`UnsupportedDdl` naming the statement, but only when it names a captured
table: DDL of other tables never stops the job. Column types are MySQL's own words (``int
unsigned``, ``decimal(10,2)``); their Arrow types come from :func:`binlog.mysql.types.arrow_type`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from binlog.mysql.types import EPOCH_DEFAULT, lower_keywords, mysql_column, mysql_table
from cdc.model.errors import UnsupportedDdl
from cdc.model.schema import Column, TableId, TableSchema

DdlKind = Literal["alter", "create", "drop", "rename", "truncate"]
_DDL_START = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(alter|create|drop|rename|truncate)\b", re.I | re.S)
_TABLE_OBJECT = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:create|drop)\s+(?:or\s+replace\s+)?"
                           r"(?:temporary\s+)?(database|schema|index|view|trigger|procedure|function|"
                           r"event|user|role|server|sequence)\b", re.I | re.S)
_TEMPORARY = re.compile(r"^\s*(?:create|drop)\s+(?:or\s+replace\s+)?temporary\b", re.I)
_CREATE_TABLE = re.compile(r"^\s*(?:/\*.*?\*/\s*)*create\s+table\s+(?:if\s+not\s+exists\s+)?"
                           r"((?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)", re.I | re.S)
_RENAME_TABLE = re.compile(r"^\s*rename\s+tables?\s+(.*)$", re.I | re.S)
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_IDENT_RE = re.compile(_IDENT)
_NAME = re.compile(rf"({_IDENT})(?:\s*\.\s*({_IDENT}))?")
_STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_TEMPORAL = {"datetime", "timestamp", "time"}


@dataclass(frozen=True)
class TableDdl:
    """What one statement does to one captured table.

    Attributes:
        table: the table.
        kind: ``alter``, ``create``, ``drop``, ``rename`` (the table got another name) or
            ``truncate``.
        schema: its columns after the statement (``alter``, ``create``, and a rename into a
            captured name), else None (also for a ``create`` that sqlglot cannot read).
        statement: the SQL text, as logged.
        renames: the columns an ``alter`` renamed (``RENAME COLUMN``, ``CHANGE old new``), as
            ``(old, new)`` in statement order (``schema_change.behavior: evolve`` moves their data).
    """

    table: TableId
    kind: DdlKind
    schema: TableSchema | None
    statement: str
    renames: tuple[tuple[str, str], ...] = ()


def is_ddl(sql: str) -> bool:
    """True for a statement that may change a table's definition (cheap: no parsing)."""
    return bool(_DDL_START.match(sql)) and not _TABLE_OBJECT.match(sql) and not _TEMPORARY.match(sql)


def may_name(sql: str, table_names: Collection[str]) -> bool:
    """False when ``sql`` names none of ``table_names`` (lower case), so it needs no parse.

    Every statement that changes a table names it, quoted or not (``DROP DATABASE`` is not
    followed), so a statement none of whose identifiers is a captured table's name, ignoring
    case, changes none of them. A server's binlog holds the DDL of every database; sqlglot takes
    about half a millisecond a statement, which a walk over thousands of other tables' DDL pays.
    """
    return any(_unquote(m.group(0)).lower() in table_names for m in _IDENT_RE.finditer(sql))


def parse_ddl(db: str, sql: str, captured: Callable[[TableId], bool],
              schema_of: Callable[[TableId], TableSchema | None]) -> list[TableDdl]:
    """The captured tables ``sql`` changes, and how.

    Args:
        db: the query event's default database (for unqualified names).
        sql: the statement.
        captured: whether a table is captured.
        schema_of: a table's schema just before the statement (None: unknown).

    Raises:
        UnsupportedDdl: the statement names a captured table but cannot be followed.
    """
    if not is_ddl(sql):
        return []
    rename = _RENAME_TABLE.match(sql)
    if rename:
        return _rename_tables(db, sql, rename.group(1), captured, schema_of)
    try:
        tree = sqlglot.parse_one(sql, read="mysql")
    except SqlglotError as exc:
        create = _CREATE_TABLE.match(sql)
        if create:  # a CREATE TABLE it cannot read: the table's columns come from the server instead
            table = _name_id(db, create.group(1))
            return [TableDdl(table, "create", None, sql)] if captured(table) else []
        return _unsupported(db, sql, captured, f"sqlglot cannot parse it ({str(exc).splitlines()[0]})")
    if isinstance(tree, exp.Alter) and tree.args.get("kind", "").upper() == "TABLE":
        return _alter(db, sql, tree, captured, schema_of)
    if isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() == "TABLE":
        return _create(db, sql, tree, captured, schema_of)
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind", "")).upper() == "TABLE":
        tables = [_table_id(db, t) for t in tree.args.get("tables") or []]
        return [TableDdl(t, "drop", None, sql) for t in tables if captured(t)]
    if isinstance(tree, exp.TruncateTable):
        tables = [_table_id(db, t) for t in tree.expressions]
        return [TableDdl(t, "truncate", None, sql) for t in tables if captured(t)]
    return _unsupported(db, sql, captured, "sqlglot does not model this statement")


def _unsupported(db: str, sql: str, captured: Callable[[TableId], bool], why: str) -> list[TableDdl]:
    """Refuse a statement naming a captured table; ignore it otherwise."""
    names = {m.group(0) for m in _NAME.finditer(sql)}
    for name in names:
        parts = [_unquote(p) for p in re.split(r"\s*\.\s*", name, maxsplit=1)]
        table = TableId(*parts) if len(parts) == 2 else TableId(db, parts[0])
        if captured(table):
            raise UnsupportedDdl(
                f"the binlog holds DDL on captured table {table} that spark-cdc cannot follow ({why}): "
                f"{sql.strip()!r}. Set source.schema_change.behavior to 'exception' to stop cleanly at "
                "such statements, or take a new snapshot from after it (startup_mode: initial, new "
                "checkpoint)", table=str(table), statement=sql)
    return []


def _rename_tables(db: str, sql: str, pairs: str, captured: Callable[[TableId], bool],
                   schema_of: Callable[[TableId], TableSchema | None]) -> list[TableDdl]:
    out: list[TableDdl] = []
    for pair in _split_top(pairs):
        m = re.match(rf"^\s*({_IDENT}(?:\s*\.\s*{_IDENT})?)\s+to\s+({_IDENT}(?:\s*\.\s*{_IDENT})?)\s*$", pair,
                     re.I | re.S)
        if not m:
            return _unsupported(db, sql, captured, "a RENAME TABLE pair it cannot read")
        old, new = _name_id(db, m.group(1)), _name_id(db, m.group(2))
        if captured(old):
            out.append(TableDdl(old, "rename", None, sql))
        if captured(new):
            before = schema_of(old)
            if before is None:
                _unsupported(db, sql, captured, f"{new} takes the definition of {old}, whose schema is unknown")
            else:
                out.append(TableDdl(new, "create", replace(before, table_id=new), sql))
    return out


def _alter(db: str, sql: str, tree: exp.Alter, captured: Callable[[TableId], bool],
           schema_of: Callable[[TableId], TableSchema | None]) -> list[TableDdl]:
    table = _table_id(db, tree.this)
    if not captured(table):
        return []
    schema = schema_of(table)
    if schema is None:
        return []  # no version to change yet: the reader types the next rows from the catalog
    renamed_to: TableId | None = None
    renames: list[tuple[str, str]] = []
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.AlterRename):
            renamed_to = _table_id(db, action.this)
            continue
        schema = _apply(schema, action, sql)
        renames += _column_renames(action)
    if renamed_to is not None:
        out = [TableDdl(table, "rename", None, sql)]
        return out + ([TableDdl(renamed_to, "create", replace(schema, table_id=renamed_to), sql)]
                      if captured(renamed_to) else [])
    return [TableDdl(table, "alter", schema, sql, tuple(renames))]


def _column_renames(action: exp.Expression) -> list[tuple[str, str]]:
    """``[(old, new)]`` when ``action`` renames a column (``RENAME COLUMN``, ``CHANGE old new``)."""
    if isinstance(action, exp.RenameColumn):
        return [(action.this.name, action.args["to"].name)]
    if isinstance(action, exp.ModifyColumn) and action.args.get("rename_from") is not None:
        old, new = action.args["rename_from"].name, action.this.name
        return [(old, new)] if old.lower() != new.lower() else []
    return []


def _apply(schema: TableSchema, action: exp.Expression, sql: str) -> TableSchema:
    """``schema`` after one ALTER TABLE action.

    Raises:
        UnsupportedDdl: an action this module does not model.
    """
    if isinstance(action, exp.ColumnDef):
        if _has(schema, action.name):
            if action.args.get("exists"):
                return schema  # ADD COLUMN IF NOT EXISTS of a column that exists
            raise _bad(schema, sql, f"it adds column {action.name}, which the table already has")
        column, primary = _column(action)
        schema = _insert(schema, column, action.args.get("position"))
        return replace(schema, primary_key=(column.name,)) if primary else schema
    if isinstance(action, exp.ModifyColumn):
        old = action.args.get("rename_from")
        definition = action.this
        column, primary = _column(definition)
        name = old.name if old is not None else column.name
        if not _has(schema, name):
            raise _bad(schema, sql, f"it changes column {name}, which the table does not have")
        without = _drop(schema, name, keep_key=True)
        position = definition.args.get("position") or action.args.get("position")
        if position is None:  # stays where it was
            index = [c.name.lower() for c in schema.columns].index(name.lower())
            kept = list(without.columns)
            kept.insert(index, column)
            out = replace(without, columns=tuple(kept))
        else:
            out = _insert(without, column, position)
        key = tuple(column.name if k.lower() == name.lower() else k for k in schema.primary_key)
        return replace(out, primary_key=(column.name,) if primary else key)
    if isinstance(action, exp.RenameColumn):
        old, new = action.this.name, action.args["to"].name
        if not _has(schema, old):
            raise _bad(schema, sql, f"it renames column {old}, which the table does not have")
        renamed = tuple(replace(c, name=new) if c.name.lower() == old.lower() else c for c in schema.columns)
        key = tuple(new if k.lower() == old.lower() else k for k in schema.primary_key)
        return replace(schema, columns=renamed, primary_key=key)
    if isinstance(action, exp.Drop) and str(action.args.get("kind", "")).upper() == "COLUMN":
        for col in action.args.get("tables") or []:
            if action.args.get("exists") and not _has(schema, col.name):
                continue
            if not _has(schema, col.name):
                raise _bad(schema, sql, f"it drops column {col.name}, which the table does not have")
            schema = _drop(schema, col.name, keep_key=False)
        return schema
    if isinstance(action, exp.DropPrimaryKey):
        return replace(schema, primary_key=())
    if isinstance(action, exp.AddConstraint):
        for c in action.expressions:
            if isinstance(c, exp.PrimaryKey):
                schema = _key_not_null(replace(schema, primary_key=tuple(_unquote(e.name) for e in c.expressions)))
        return schema
    if isinstance(action, (exp.AlterColumn, exp.Drop)):  # defaults, indexes, constraints
        return schema
    raise _bad(schema, sql, f"sqlglot gives it an action it does not model ({type(action).__name__})")


def _create(db: str, sql: str, tree: exp.Create, captured: Callable[[TableId], bool],
            schema_of: Callable[[TableId], TableSchema | None]) -> list[TableDdl]:
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    table = _table_id(db, target)
    if not captured(table):
        return []
    if tree.args.get("exists") and schema_of(table) is not None:
        return []  # CREATE TABLE IF NOT EXISTS of a table that exists
    if not isinstance(tree.this, exp.Schema) or tree.expression is not None:
        _unsupported(db, sql, captured, "CREATE TABLE ... LIKE / AS SELECT is not followed yet")
    columns: list[Column] = []
    key: tuple[str, ...] = ()
    for part in tree.this.expressions:
        if isinstance(part, exp.ColumnDef):
            column, primary = _column(part)
            columns.append(column)
            key = (column.name,) if primary else key
        elif isinstance(part, exp.PrimaryKey):
            key = tuple(_unquote(e.name) for e in part.expressions)
    return [TableDdl(table, "create", _key_not_null(mysql_table(table, tuple(columns), key)), sql)]


def _column(definition: exp.ColumnDef) -> tuple[Column, bool]:
    """A column from its definition, and whether it declares itself the primary key."""
    kind = definition.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise ValueError(f"column {definition.name} has no type")
    nullable, primary, charset, collation, default = True, False, None, None, None
    for c in definition.args.get("constraints") or []:
        k = c.args.get("kind")
        if isinstance(k, exp.NotNullColumnConstraint):
            nullable = bool(k.args.get("allow_null"))
        elif isinstance(k, exp.PrimaryKeyColumnConstraint):
            primary, nullable = True, False
        elif isinstance(k, exp.CharacterSetColumnConstraint):
            charset = k.this.name.lower()
        elif isinstance(k, exp.CollateColumnConstraint):
            collation = k.this.name.lower()
        elif isinstance(k, exp.DefaultColumnConstraint):
            default = _default_text(k.this)
    column_type = lower_keywords(kind.sql("mysql"))
    if kind.this == exp.DataType.Type.BOOLEAN:
        column_type = "tinyint(1)"
    params = [p.name for p in kind.expressions]
    if kind.this not in (exp.DataType.Type.ENUM, exp.DataType.Type.SET):
        column_type = column_type.replace(", ", ",")
    data_type = re.split(r"[\s(]", column_type, maxsplit=1)[0]
    precision = scale = dtp = None
    if data_type in ("decimal", "numeric"):
        data_type = "decimal"
        precision = int(params[0]) if params else 10
        scale = int(params[1]) if len(params) > 1 else 0
    elif data_type in _TEMPORAL:
        dtp = int(params[0]) if params else 0
    if data_type not in _STRING_TYPES:
        charset = collation = None
    return mysql_column(definition.name, data_type, column_type, nullable, precision=precision, scale=scale,
                        datetime_precision=dtp, charset=charset, collation=collation, default=default), primary


def _default_text(value: exp.Expression) -> str | None:
    """A ``DEFAULT`` clause's value as :func:`binlog.mysql.types.default_literal` gives it from the
    catalog: a literal's text, ``b'..'``, ``1``/``0`` for TRUE/FALSE; None for NULL and expressions."""
    if isinstance(value, exp.Literal):
        return value.name
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal) and not value.this.is_string:
        return "-" + value.this.name
    if isinstance(value, exp.BitString):
        return f"b'{value.name}'"
    if isinstance(value, exp.Boolean):
        return "1" if value.this else "0"
    if isinstance(value, (exp.CurrentTimestamp, exp.CurrentDatetime)) or (
            isinstance(value, exp.Anonymous) and value.name.lower() in ("now", "localtime", "localtimestamp")):
        return EPOCH_DEFAULT  # as Debezium's default value converter has CURRENT_TIMESTAMP
    return None


def _key_not_null(schema: TableSchema) -> TableSchema:
    """The primary-key columns made NOT NULL, as the server makes them (a table-level PRIMARY KEY
    over columns declared without NOT NULL)."""
    key = {k.lower() for k in schema.primary_key}
    return replace(schema, columns=tuple(replace(c, nullable=False) if c.name.lower() in key else c
                                         for c in schema.columns))


def _insert(schema: TableSchema, column: Column, position: exp.Expression | None) -> TableSchema:
    columns = list(schema.columns)
    if position is None:
        columns.append(column)
    elif str(position.args.get("position", "")).lower() == "first":
        columns.insert(0, column)
    else:
        after = position.this.name.lower()
        index = [c.name.lower() for c in columns].index(after) + 1
        columns.insert(index, column)
    return replace(schema, columns=tuple(columns))


def _drop(schema: TableSchema, name: str, keep_key: bool) -> TableSchema:
    columns = tuple(c for c in schema.columns if c.name.lower() != name.lower())
    key = schema.primary_key if keep_key else tuple(k for k in schema.primary_key if k.lower() != name.lower())
    return replace(schema, columns=columns, primary_key=key)


def _has(schema: TableSchema, name: str) -> bool:
    return any(c.name.lower() == name.lower() for c in schema.columns)


def _bad(schema: TableSchema, sql: str, why: str) -> UnsupportedDdl:
    return UnsupportedDdl(
        f"cannot follow DDL on captured table {schema.table_id}: {why}: {sql.strip()!r}. The schema "
        "history no longer matches the table; take a new snapshot from after it (new checkpoint)",
        table=str(schema.table_id), statement=sql)


def _table_id(db: str, table: exp.Expression) -> TableId:
    if not isinstance(table, exp.Table):
        raise ValueError(f"not a table: {table.sql('mysql')}")
    return TableId(table.db or db, table.name)


def _name_id(db: str, text: str) -> TableId:
    parts = [_unquote(p) for p in re.findall(_IDENT, text)]
    return TableId(parts[0], parts[1]) if len(parts) == 2 else TableId(db, parts[0])


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") and name.endswith("`") else name


def _split_top(text: str) -> list[str]:
    """``a TO b, c TO d`` into its pairs (commas inside backticks kept)."""
    parts: list[str] = []
    current: list[str] = []
    depth = False
    for ch in text:
        if ch == "`":
            depth = not depth
        if ch == "," and not depth:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]
