"""MySQL/MariaDB column types: the catalog query, and the type each column's values travel as.

The column metadata comes from ``information_schema`` (readable with plain SELECT), so the
snapshot reader and the binlog reader type their values from one description of the table.
docs/sources/types.md lists every type and its Arrow, Delta and Debezium forms.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from cdc.model.errors import TableNotFound
from cdc.model.schema import Column, TableId, TableSchema

CONNECTOR = "mysql"  # Debezium's connector name, in every change's source block

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit",
                "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                "multipolygon", "geometrycollection"}

# Spark's DecimalType holds at most 38 digits; wider MySQL DECIMALs travel as strings.
MAX_ARROW_DECIMAL_PRECISION = 38


def quote_ident(name: str) -> str:
    """Quote an identifier with backticks (doubling any backtick inside)."""
    return "`" + name.replace("`", "``") + "`"


def quoted_table(table_id: TableId) -> str:
    """The table's name quoted for SQL: `db`.`table`."""
    return f"{quote_ident(table_id.db)}.{quote_ident(table_id.table)}"


def unsigned(column: Column) -> bool:
    """True for an UNSIGNED numeric column."""
    return "unsigned" in column.column_type


def mysql_column(name: str, data_type: str, column_type: str, nullable: bool, *,
                 precision: int | None = None, scale: int | None = None,
                 datetime_precision: int | None = None, charset: str | None = None,
                 collation: str | None = None, default: str | None = None) -> Column:
    """A column as ``information_schema.COLUMNS`` describes it, with its Arrow type."""
    return Column(name, data_type, column_type, nullable, precision, scale, datetime_precision, charset,
                  collation, arrow=arrow_type(data_type, column_type, precision, scale), default=default)


_FUNCTION = re.compile(r"^[a-z_]+\s*\(", re.I)


def default_literal(text: str | None, extra: str | None) -> str | None:
    """A column's default as the text of its value, from ``information_schema.COLUMNS``'
    ``COLUMN_DEFAULT`` and ``EXTRA``; None for no default, NULL, or an expression.

    MariaDB writes the default as SQL: a quoted string (``'2000-01-01'``, ``'it''s'``), a number,
    ``b'1'``, ``NULL``, or an expression (``current_timestamp()``, ``(1 + 1)``). MySQL 8 writes the
    value itself (SQL NULL for none) and marks expressions ``DEFAULT_GENERATED`` in ``EXTRA``.
    TIMESTAMP defaults are in the session's time zone (UTC on our connections). CURRENT_TIMESTAMP
    (and NOW(), ...) is the epoch, as Debezium's default value converter has it.
    """
    if text is None:
        return None
    if _CURRENT_TIMESTAMP.match(text):
        return EPOCH_DEFAULT
    if "DEFAULT_GENERATED" in (extra or "").upper():
        return None
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if text.upper() == "NULL" or text.startswith("(") or _FUNCTION.match(text):
        return None
    return text


# CURRENT_TIMESTAMP and its synonyms: Debezium's default value converter writes the epoch for them
_CURRENT_TIMESTAMP = re.compile(r"^(current_timestamp|now|localtime|localtimestamp)\s*(\(\s*\d*\s*\))?$", re.I)
EPOCH_DEFAULT = "1970-01-01 00:00:00"


def mysql_table(table_id: TableId, columns: tuple[Column, ...], primary_key: tuple[str, ...]) -> TableSchema:
    """A MySQL table's schema (its changes carry the MySQL connector's source block)."""
    return TableSchema(table_id, columns, primary_key, CONNECTOR)


def arrow_type(data_type: str, column_type: str, precision: int | None, scale: int | None) -> pa.DataType:
    """The Arrow type a column's values travel as (the Spark and Delta types follow from it)."""
    t = data_type
    is_unsigned = "unsigned" in column_type
    if t == "tinyint":
        return pa.int16()  # Debezium's INT16; holds the unsigned range 0..255 too
    if t == "smallint":
        return pa.int32() if is_unsigned else pa.int16()
    if t == "mediumint":
        return pa.int32()
    if t in ("int", "integer"):
        return pa.int64() if is_unsigned else pa.int32()
    if t == "bigint":
        return pa.decimal128(20, 0) if is_unsigned else pa.int64()
    if t == "float":
        return pa.float32()
    if t in ("double", "real"):
        return pa.float64()
    if t in ("decimal", "numeric"):
        p, s = precision or 10, scale or 0
        return pa.string() if p > MAX_ARROW_DECIMAL_PRECISION else pa.decimal128(p, s)
    if t == "year":
        return pa.int32()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "time":
        return pa.duration("us")
    if t in STRING_TYPES:
        return pa.string()
    if t in BINARY_TYPES:
        return pa.binary()
    return pa.string()
_COLUMNS_SQL = """
SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, NUMERIC_SCALE,
       DATETIME_PRECISION, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_DEFAULT, EXTRA
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
ORDER BY ORDINAL_POSITION
"""

_PRIMARY_KEY_SQL = """
SELECT COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY'
ORDER BY SEQ_IN_INDEX
"""


def load_table_schema(conn: Any, table_id: TableId) -> TableSchema:
    """Read a table's columns and primary key from information_schema.

    Args:
        conn: an open DB-API connection (pymysql).
        table_id: the table.

    Raises:
        TableNotFound: the table does not exist or the user cannot see it.
    """
    with conn.cursor() as cur:
        cur.execute(_COLUMNS_SQL, (table_id.db, table_id.table))
        rows = cur.fetchall()
        if not rows:
            raise TableNotFound(
                f"table {table_id} not found (or the CDC user lacks SELECT on it)", table=str(table_id)
            )
        cur.execute(_PRIMARY_KEY_SQL, (table_id.db, table_id.table))
        pk = tuple(r[0] for r in cur.fetchall())
    columns = tuple(
        mysql_column(
            r[0], str(r[1]).lower(), lower_keywords(str(r[2])), r[3] == "YES", precision=_int(r[4]),
            scale=_int(r[5]), datetime_precision=_int(r[6]), charset=r[7], collation=r[8],
            default=default_literal(r[9], r[10]),
        )
        for r in rows
    )
    return mysql_table(table_id, columns, pk)


_QUOTED_PART = re.compile(r"('(?:[^']|'')*')")


def lower_keywords(column_type: str) -> str:
    """``COLUMN_TYPE`` with its keywords lower-cased and its quoted literals (ENUM and SET
    members) kept as defined: ``SET('Apple','b') -> set('Apple','b')``."""
    parts = _QUOTED_PART.split(column_type)
    return "".join(p if i % 2 else p.lower() for i, p in enumerate(parts))


def _int(v: Any) -> int | None:
    return None if v is None else int(v)
