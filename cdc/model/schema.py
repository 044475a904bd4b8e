"""Table identity, column metadata and the MySQL -> Arrow type mapping.

The column metadata comes from ``information_schema`` (readable with plain SELECT), so the
snapshot reader and the binlog reader type their values from one description of the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cdc.model.errors import TableNotFound

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
NUMERIC_TYPES = INTEGER_TYPES | {"decimal", "numeric", "float", "double", "real"}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit",
                "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                "multipolygon", "geometrycollection"}
TEMPORAL_TYPES = {"date", "datetime", "timestamp", "time", "year"}

# Spark's DecimalType holds at most 38 digits; wider MySQL DECIMALs travel as strings.
MAX_ARROW_DECIMAL_PRECISION = 38


@dataclass(frozen=True, order=True)
class TableId:
    """A table, named ``db.table`` the way the config and the Debezium ``source`` block name it."""

    db: str
    table: str

    @classmethod
    def parse(cls, name: str) -> TableId:
        db, sep, table = name.partition(".")
        if not sep or not db or not table:
            raise ValueError(f"table name {name!r} must look like 'database.table'")
        return cls(db, table)

    def quoted(self) -> str:
        """The name quoted for SQL: `db`.`table`."""
        return f"{quote_ident(self.db)}.{quote_ident(self.table)}"

    def __str__(self) -> str:
        return f"{self.db}.{self.table}"


def quote_ident(name: str) -> str:
    """Quote an identifier with backticks (doubling any backtick inside)."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Column:
    """One column as information_schema describes it."""

    name: str
    data_type: str  # lower-case DATA_TYPE: int, varchar, decimal, ...
    column_type: str  # full COLUMN_TYPE: "int(10) unsigned", "enum('a','b')", ...
    nullable: bool
    precision: int | None = None
    scale: int | None = None
    datetime_precision: int | None = None
    charset: str | None = None
    collation: str | None = None

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type

    @property
    def is_integer(self) -> bool:
        return self.data_type in INTEGER_TYPES

    @property
    def is_numeric(self) -> bool:
        """Integer or fixed-point: the key types Flink CDC may split evenly."""
        return self.data_type in INTEGER_TYPES or self.data_type in ("decimal", "numeric")

    @property
    def is_collated_string(self) -> bool:
        """A character type whose ordering follows a collation, not code points."""
        return self.collation is not None and self.data_type in STRING_TYPES

    def arrow_type(self) -> pa.DataType:
        return arrow_type(self)


@dataclass(frozen=True)
class TableSchema:
    """Columns in ordinal order, and the primary-key column names in key order."""

    table_id: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name.lower() == name.lower():
                return c
        raise KeyError(f"{self.table_id} has no column {name!r}")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type(), nullable=True) for c in self.columns])


def arrow_type(col: Column) -> pa.DataType:
    """The Arrow type a column's values travel as (the Spark type follows from it)."""
    t = col.data_type
    if t == "tinyint":
        return pa.int16()  # Debezium's INT16; holds the unsigned range 0..255 too
    if t == "smallint":
        return pa.int32() if col.unsigned else pa.int16()
    if t == "mediumint":
        return pa.int32()
    if t in ("int", "integer"):
        return pa.int64() if col.unsigned else pa.int32()
    if t == "bigint":
        return pa.decimal128(20, 0) if col.unsigned else pa.int64()
    if t == "float":
        return pa.float32()
    if t in ("double", "real"):
        return pa.float64()
    if t in ("decimal", "numeric"):
        precision, scale = col.precision or 10, col.scale or 0
        if precision > MAX_ARROW_DECIMAL_PRECISION:
            return pa.string()
        return pa.decimal128(precision, scale)
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
       DATETIME_PRECISION, CHARACTER_SET_NAME, COLLATION_NAME
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
        Column(
            name=r[0], data_type=str(r[1]).lower(), column_type=lower_keywords(str(r[2])),
            nullable=r[3] == "YES", precision=_int(r[4]), scale=_int(r[5]),
            datetime_precision=_int(r[6]), charset=r[7], collation=r[8],
        )
        for r in rows
    )
    return TableSchema(table_id=table_id, columns=columns, primary_key=pk)


_QUOTED_PART = re.compile(r"('(?:[^']|'')*')")


def lower_keywords(column_type: str) -> str:
    """``COLUMN_TYPE`` with its keywords lower-cased and its quoted literals (ENUM and SET
    members) kept as defined: ``SET('Apple','b') -> set('Apple','b')``."""
    parts = _QUOTED_PART.split(column_type)
    return "".join(p if i % 2 else p.lower() for i, p in enumerate(parts))


def _int(v: Any) -> int | None:
    return None if v is None else int(v)
