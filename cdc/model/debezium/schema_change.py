"""Schema change events in Debezium's form: what its MySQL connector writes to the schema change
topic (named ``<topic.prefix>``) for each DDL on a captured table.

The key is ``{"databaseName": ...}``; the value carries the connector's ``source`` block of the
statement, ``ts_ms``, ``databaseName``, ``schemaName`` (null for MySQL; for PostgreSQL the table's
schema, with the database in ``databaseName``), the ``ddl`` text (for PostgreSQL, which logs no DDL,
a labelled description of the Relation message: docs/concepts/schema-evolution.md) and
``tableChanges``: the table's whole structure after the statement, so a consumer needs no DDL
parser. With ``schemas_enable`` both carry their Kafka Connect schema, as JsonConverter writes
them. The events are built from a :class:`~cdc.model.schema.TableSchema`; what it does not know
(auto-increment, generated columns, comments, the table's own default charset) is written as
Debezium writes unknown values (false, null; the charset of the table's first string column).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from cdc.model.debezium.connect import POSTGRESQL, source_fields, source_schema
from cdc.model.debezium.values import jackson_escapes
from cdc.model.schema import Column, TableSchema

# java.sql.Types of MySQL's type names, as Debezium's MySQL/MariaDB connectors report them in
# ``jdbcType`` (TINYINT as SMALLINT, the TEXT types as VARCHAR, the BLOB types as BLOB)
_JDBC = {"bit": -7, "tinyint": 5, "bool": 5, "boolean": 5, "smallint": 5, "mediumint": 4, "int": 4,
         "integer": 4, "year": 4, "bigint": -5, "float": 6, "double": 8, "real": 8, "decimal": 3,
         "numeric": 3, "char": 1, "enum": 1, "set": 1, "varchar": 12, "tinytext": 12, "text": 12,
         "mediumtext": 12, "longtext": 12, "json": 1111, "date": 91, "time": 92, "datetime": 93,
         "timestamp": 2014, "binary": -2, "varbinary": -3, "tinyblob": 2004, "blob": 2004,
         "mediumblob": 2004, "longblob": 2004}
_OTHER = 1111
_CHARACTER = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_LENGTH = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_QUOTED = re.compile(r"'(?:[^']|'')*'")


def _opt(connect_type: str, field: str) -> dict[str, Any]:
    return {"type": connect_type, "optional": True, "field": field}


def _req(connect_type: str, field: str) -> dict[str, Any]:
    return {"type": connect_type, "optional": False, "field": field}


def _struct(name: str, fields: list[dict[str, Any]], *, optional: bool, field: str | None = None) -> dict[str, Any]:
    """A Connect struct schema, keys in the order JsonConverter writes them."""
    out: dict[str, Any] = {"type": "struct", "fields": fields, "optional": optional, "name": name, "version": 1}
    return out if field is None else {**out, "field": field}


def _strings(field: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "optional": False}, "optional": True, "field": field}


_COLUMN_SCHEMA = _struct("io.debezium.connector.schema.Column", [
    _req("string", "name"), _req("int32", "jdbcType"), _opt("int32", "nativeType"), _req("string", "typeName"),
    _opt("string", "typeExpression"), _opt("string", "charsetName"), _opt("int32", "length"), _opt("int32", "scale"),
    _req("int32", "position"), _opt("boolean", "optional"), _opt("boolean", "autoIncremented"),
    _opt("boolean", "generated"), _opt("string", "comment"), _opt("string", "defaultValueExpression"),
    _strings("enumValues")], optional=False)
_TABLE_SCHEMA = _struct("io.debezium.connector.schema.Table", [
    _opt("string", "defaultCharsetName"), _strings("primaryKeyColumnNames"),
    {"type": "array", "items": _COLUMN_SCHEMA, "optional": False, "field": "columns"},
    _opt("string", "comment")], optional=True, field="table")
_CHANGE_SCHEMA = _struct("io.debezium.connector.schema.Change",
                         [_req("string", "type"), _req("string", "id"), _TABLE_SCHEMA], optional=False)


def key_schema(connector: str) -> dict[str, Any]:
    """The schema change event's key schema (``io.debezium.connector.<connector>.SchemaChangeKey``)."""
    return _struct(f"io.debezium.connector.{connector}.SchemaChangeKey", [_req("string", "databaseName")],
                   optional=False)


def value_schema(connector: str) -> dict[str, Any]:
    """The schema change event's value schema (``...SchemaChangeValue``)."""
    return _struct(f"io.debezium.connector.{connector}.SchemaChangeValue", [
        source_schema(connector), _req("int64", "ts_ms"), _opt("string", "databaseName"),
        _opt("string", "schemaName"), _opt("string", "ddl"),
        {"type": "array", "items": _CHANGE_SCHEMA, "optional": False, "field": "tableChanges"}], optional=False)


def column_change(column: Column, position: int, table_charset: str | None = None) -> dict[str, Any]:
    """One column of ``tableChanges[].table.columns``, as Debezium's DDL parser describes it: the
    declared length and scale (``int(11)``: 11; ``decimal(5,2)``: 5 and 2; ``datetime(3)``: 3), an
    ENUM's length 1 and a SET's the length of all its members joined (2n - 1), the members as quoted
    in the DDL, a string column's charset (the table's when it declares none), the default as text."""
    kind = column.data_type.lower()
    declared = column.column_type.lower()
    sized = _LENGTH.search(declared)
    length = int(sized.group(1)) if sized else None
    scale = int(sized.group(2)) if sized and sized.group(2) else None
    members = _QUOTED.findall(column.column_type) if kind in ("enum", "set") else None
    if members is not None:
        length = 1 if kind == "enum" else max(0, 2 * len(members) - 1)
    type_name = " ".join([kind, *(w for w in ("unsigned", "zerofill") if w in declared.split())]).upper()
    default = column.default
    if default is not None and default[:2].lower() == "b'":
        default = default[2:-1]  # BIT: the digits
    return {
        "name": column.name, "jdbcType": _JDBC.get(kind, _OTHER), "nativeType": None,
        "typeName": type_name, "typeExpression": type_name,
        "charsetName": column.charset or (table_charset if kind in _CHARACTER else None),
        "length": length, "scale": scale, "position": position, "optional": column.nullable,
        "autoIncremented": False, "generated": False, "comment": None, "defaultValueExpression": default,
        "enumValues": members,
    }


def table_change(schema: TableSchema, change_type: str) -> dict[str, Any]:
    """One entry of ``tableChanges``: the table's structure after the statement."""
    t = schema.table_id
    charsets = [c.charset for c in schema.columns if c.charset]
    charset = charsets[0] if charsets else None  # the table's own is not known: its first string column's
    return {"type": change_type, "id": f'"{t.db}"."{t.table}"',
            "table": {"defaultCharsetName": charset,
                      "primaryKeyColumnNames": list(schema.primary_key),
                      "columns": [column_change(c, i + 1, charset) for i, c in enumerate(schema.columns)],
                      "comment": None}}


def source_payload(connector: str, source: Mapping[str, Any], database: str) -> dict[str, Any]:
    """A change row's ``source`` block (:mod:`cdc.model.envelope`) as the connector's Debezium
    ``source`` payload: its fields in Debezium's order, ``ts_us``/``ts_ns`` from ``ts_ms``, and for
    PostgreSQL the database in ``db`` and the schema in ``schema``."""
    ts = source.get("ts_ms")
    derived: dict[str, Any] = {"ts_us": None if ts is None else ts * 1000,
                               "ts_ns": None if ts is None else ts * 1_000_000}
    if connector == POSTGRESQL:
        derived |= {"db": database, "schema": source.get("db")}
    return {name: derived[name] if name in derived else source.get(name) for name, _, _ in source_fields(connector)}


def schema_change_message(connector: str, schema: TableSchema, ddl: str, source: Mapping[str, Any],
                          ts_ms: int, *, change_type: str = "ALTER",
                          schemas_enable: bool = True) -> tuple[bytes, bytes]:
    """The key and value of the schema change event of ``ddl``, which left the table as ``schema``.

    Args:
        connector: the Debezium connector whose names the event uses (``mysql``).
        schema: the table after the statement.
        ddl: the statement's text.
        source: the statement's ``source`` block (the connector's fields; ``cdc.model.envelope``).
        ts_ms: when the event was made.
        change_type: ``CREATE``, ``ALTER`` or ``DROP``.
        schemas_enable: wrap both in ``{"schema": ..., "payload": ...}`` as JsonConverter does.
    """
    db, schema_name = schema.table_id.db, None
    if connector == "postgresql":  # a table id is (schema, table); the database is apart
        db, schema_name = schema.database or db, schema.table_id.db
    key: dict[str, Any] = {"databaseName": db}
    value: dict[str, Any] = {"source": source_payload(connector, source, db), "ts_ms": ts_ms, "databaseName": db,
                             "schemaName": schema_name, "ddl": ddl, "tableChanges": [table_change(schema, change_type)]}
    if schemas_enable:
        key = {"schema": key_schema(connector), "payload": key}
        value = {"schema": value_schema(connector), "payload": value}
    return jackson_escapes(orjson.dumps(key)), jackson_escapes(orjson.dumps(value))
