"""Schema change events in Debezium's form: what its MySQL connector writes to the schema change
topic (named ``<topic.prefix>``) for each DDL on a captured table.

The key is ``{"databaseName": ...}``; the value carries the connector's ``source`` block of the
statement, ``ts_ms``, ``databaseName``, ``schemaName`` (null for MySQL; for PostgreSQL the table's
schema, with the database in ``databaseName``), the ``ddl`` text (for PostgreSQL, which logs no DDL,
a labelled description of the Relation message: docs/concepts/schema-evolution.md) and
``tableChanges``: the table's whole structure after the statement, so a consumer needs no DDL
parser. With ``schemas_enable`` both carry their Kafka Connect schema, as JsonConverter writes
them. The events are built from a :class:`~cdc.model.schema.TableSchema`; what it does not know
(auto-increment, defaults, comments) is written as Debezium writes unknown values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from cdc.model.debezium.connect import source_schema
from cdc.model.schema import Column, TableSchema

# java.sql.Types of MySQL's type names, as the MySQL connector reports them in ``jdbcType``
_JDBC = {"bit": -7, "tinyint": -6, "bool": -6, "boolean": -6, "smallint": 5, "mediumint": 4, "int": 4,
         "integer": 4, "year": 4, "bigint": -5, "float": 6, "double": 8, "real": 8, "decimal": 3,
         "numeric": 3, "char": 1, "enum": 1, "set": 1, "varchar": 12, "tinytext": -1, "text": -1,
         "mediumtext": -1, "longtext": -1, "json": 1111, "date": 91, "time": 92, "datetime": 93,
         "timestamp": 2014, "binary": -2, "varbinary": -3, "tinyblob": -4, "blob": -4,
         "mediumblob": -4, "longblob": -4}
_OTHER = 1111
_LENGTH = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_QUOTED = re.compile(r"'((?:[^']|'')*)'")


def _opt(connect_type: str, field: str) -> dict[str, Any]:
    return {"type": connect_type, "optional": True, "field": field}


def _req(connect_type: str, field: str) -> dict[str, Any]:
    return {"type": connect_type, "optional": False, "field": field}


_COLUMN_SCHEMA = {
    "type": "struct", "optional": False, "name": "io.debezium.connector.schema.Column", "version": 1,
    "fields": [_req("string", "name"), _req("int32", "jdbcType"), _opt("int32", "nativeType"),
               _req("string", "typeName"), _opt("string", "typeExpression"), _opt("string", "charsetName"),
               _opt("int32", "length"), _opt("int32", "scale"), _req("int32", "position"),
               _opt("boolean", "optional"), _opt("boolean", "autoIncremented"), _opt("boolean", "generated"),
               _opt("string", "comment"), _opt("string", "defaultValueExpression"),
               {"type": "array", "items": {"type": "string", "optional": False}, "optional": True,
                "field": "enumValues"}],
}
_TABLE_SCHEMA = {
    "type": "struct", "optional": True, "name": "io.debezium.connector.schema.Table", "version": 1,
    "field": "table",
    "fields": [_opt("string", "defaultCharsetName"),
               {"type": "array", "items": {"type": "string", "optional": False}, "optional": True,
                "field": "primaryKeyColumnNames"},
               {"type": "array", "items": _COLUMN_SCHEMA, "optional": False, "field": "columns"},
               _opt("string", "comment")],
}
_CHANGE_SCHEMA = {
    "type": "struct", "optional": False, "name": "io.debezium.connector.schema.Change", "version": 1,
    "fields": [_req("string", "type"), _req("string", "id"), _TABLE_SCHEMA],
}


def key_schema(connector: str) -> dict[str, Any]:
    return {"type": "struct", "optional": False, "name": f"io.debezium.connector.{connector}.SchemaChangeKey",
            "version": 1, "fields": [_req("string", "databaseName")]}


def value_schema(connector: str) -> dict[str, Any]:
    return {"type": "struct", "optional": False, "name": f"io.debezium.connector.{connector}.SchemaChangeValue",
            "version": 1,
            "fields": [source_schema(connector), _req("int64", "ts_ms"),
                       _opt("string", "databaseName"), _opt("string", "schemaName"), _opt("string", "ddl"),
                       {"type": "array", "items": _CHANGE_SCHEMA, "optional": False, "field": "tableChanges"}]}


def column_change(column: Column, position: int) -> dict[str, Any]:
    """One column of ``tableChanges[].table.columns``."""
    sized = _LENGTH.search(column.column_type)
    length = column.precision if column.precision is not None else (int(sized.group(1)) if sized else None)
    kind = column.data_type.lower()
    return {
        "name": column.name, "jdbcType": _JDBC.get(kind, _OTHER), "nativeType": None,
        "typeName": kind.upper(), "typeExpression": kind.upper(), "charsetName": column.charset,
        "length": length, "scale": column.scale, "position": position, "optional": column.nullable,
        "autoIncremented": False, "generated": False, "comment": None, "defaultValueExpression": None,
        "enumValues": [m.replace("''", "'") for m in _QUOTED.findall(column.column_type)]
        if kind in ("enum", "set") else None,
    }


def table_change(schema: TableSchema, change_type: str) -> dict[str, Any]:
    """One entry of ``tableChanges``: the table's structure after the statement."""
    t = schema.table_id
    charsets = [c.charset for c in schema.columns if c.charset]
    return {"type": change_type, "id": f'"{t.db}"."{t.table}"',
            "table": {"defaultCharsetName": charsets[0] if charsets else None,
                      "primaryKeyColumnNames": list(schema.primary_key),
                      "columns": [column_change(c, i + 1) for i, c in enumerate(schema.columns)],
                      "comment": None}}


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
    value: dict[str, Any] = {"source": dict(source), "ts_ms": ts_ms, "databaseName": db, "schemaName": schema_name,
                             "ddl": ddl, "tableChanges": [table_change(schema, change_type)]}
    if schemas_enable:
        key = {"schema": key_schema(connector), "payload": key}
        value = {"schema": value_schema(connector), "payload": value}
    return orjson.dumps(key), orjson.dumps(value)
