"""PostgreSQL types: the catalog's description of a table, and text values -> Arrow.

The stream (pgoutput, protocol 1) carries values in PostgreSQL's text output form, and so does the
snapshot's binary COPY for the columns the ADBC driver does not decode (``copy_binary.py``),
produced by the same output functions under the same session settings (:data:`SESSION_SETTINGS`).
One conversion, :func:`to_arrow`, turns those texts into each column's Arrow type, so such a value
is identical through the snapshot and the stream by construction. See docs/sources/types.md for the mapping.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlog.postgres.casts import Kernel, array_kernel, kernel_for
from cdc.model.errors import TableNotFound
from cdc.model.schema import Column, TableId, TableSchema

CONNECTOR = "postgresql"

# Output-function settings of every session (snapshot, stream and driver): the texts both paths
# see depend on them.
SESSION_SETTINGS = {
    "DateStyle": "ISO, YMD",
    "TimeZone": "UTC",
    "IntervalStyle": "iso_8601",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "lc_monetary": "C",
}

_INTS = {"int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(), "oid": pa.int64()}
_FLOATS = {"float4": pa.float32(), "float8": pa.float64()}
_STRINGS = {"text", "varchar", "bpchar", "char", "name", "citext", "uuid", "json", "jsonb", "xml",
            "inet", "cidr", "macaddr", "macaddr8", "interval", "bit", "varbit", "tsvector", "point"}
# Types a chunk key may have: their Arrow values order as the server orders them (strings
# compared in the "C" collation, see keys.py).
CHUNKABLE = {"int2", "int4", "int8", "numeric", "text", "varchar", "bpchar", "name", "citext", "uuid",
             "date", "timestamp", "timestamptz", "bytea"}

_EPOCH_DATE = dt.date(1970, 1, 1)
_UTC = dt.timezone.utc


def arrow_type(typname: str, category: str, typmod: int, elem: str | None, elem_category: str | None) -> pa.DataType:
    """The Arrow type of a PostgreSQL type (by ``pg_type.typname`` and ``typcategory``)."""
    if category == "A" and elem is not None:
        return pa.list_(arrow_type(elem, elem_category or "", -1, None, None))
    if typname in _INTS:
        return _INTS[typname]
    if typname in _FLOATS:
        return _FLOATS[typname]
    if typname == "numeric":
        precision, scale = numeric_precision(typmod)
        if precision is not None and scale is not None and 0 < precision <= 38 and 0 <= scale <= precision:
            return pa.decimal128(precision, scale)
        return pa.string()  # unconstrained numeric: exact text ('NaN' included)
    if typname == "money":
        return pa.decimal128(19, 2)
    if typname == "bool":
        return pa.bool_()
    if typname == "bytea":
        return pa.binary()
    if typname == "date":
        return pa.date32()
    if typname == "time":
        return pa.duration("us")
    if typname == "timestamp":
        return pa.timestamp("us")
    if typname == "timestamptz":
        return pa.timestamp("us", tz="UTC")
    return pa.string()  # text types, uuid, json, enums, inet, interval (ISO 8601), timetz (UTC)


def numeric_precision(typmod: int) -> tuple[int | None, int | None]:
    """``numeric(p, s)``'s precision and scale from ``atttypmod`` (None, None when unconstrained)."""
    if typmod < 4:
        return None, None
    return ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF


_SCHEMA_SQL = """
SELECT a.attname, t.typname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, a.atttypmod,
       t.typcategory, et.typname, et.typcategory, co.collname,
       (SELECT string_agg('''' || replace(e.enumlabel, '''', '''''') || '''', ',' ORDER BY e.enumsortorder)
        FROM pg_enum e WHERE e.enumtypid = COALESCE(et.oid, t.oid)),
       (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum)
FROM pg_attribute a
JOIN pg_type t ON t.oid = CASE WHEN (SELECT typtype FROM pg_type WHERE oid = a.atttypid) = 'd'
                               THEN (SELECT typbasetype FROM pg_type WHERE oid = a.atttypid) ELSE a.atttypid END
LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_PK_SQL = """
SELECT a.attname FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.ord
"""


def quote_ident(name: str) -> str:
    """A double-quoted identifier."""
    return '"' + name.replace('"', '""') + '"'


def sql_table(table: TableId) -> str:
    """``"schema"."table"``."""
    return f"{quote_ident(table.db)}.{quote_ident(table.table)}"


def table_oid(conn: Any, table: TableId) -> int:
    """The table's ``pg_class`` oid (driver or executor).

    Raises:
        TableNotFound: no such table.
    """
    row = conn.execute("SELECT to_regclass(%s)::oid", (sql_table(table),)).fetchone()
    if row is None or row[0] is None:
        raise TableNotFound(f"table {table} does not exist (or the CDC role cannot see its schema)",
                            table=str(table))
    return int(row[0])


def load_table_schema(conn: Any, table: TableId, database: str) -> TableSchema:
    """A table's columns with their Arrow types, and its primary key (driver); ``database`` is
    the one ``conn`` is connected to (Debezium's ``source.db``).

    Raises:
        TableNotFound: no such table.
    """
    oid = table_oid(conn, table)
    columns = tuple(postgres_column(name, typname, full, bool(nullable), typmod=typmod, category=category,
                                    elem=elem, elem_category=elem_cat, collation=collation, enum_labels=labels,
                                    default=default_literal(default))
                    for name, typname, full, nullable, typmod, category, elem, elem_cat, collation, labels, default
                    in conn.execute(_SCHEMA_SQL, (oid,)).fetchall())
    pk = tuple(r[0] for r in conn.execute(_PK_SQL, (oid,)).fetchall())
    identity = conn.execute("SELECT relreplident FROM pg_class WHERE oid = %s", (oid,)).fetchone()
    return TableSchema(table, columns, pk, CONNECTOR, database, str(identity[0]) if identity else None)


_CAST_LITERAL = re.compile(r"^'((?:[^']|'')*)'(?:::[\w .\"\[\]()]+)?$", re.S)
_NUMBER = re.compile(r"^\(?(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\)?(?:::[\w .]+)?$")


def default_literal(expr: str | None) -> str | None:
    """A column default as the text of its value, from ``pg_get_expr`` of its ``pg_attrdef``
    (``'x'::text``, ``0``, ``'-1'::integer``, ``(-1.5)``, ``true``); None for none, NULL, or an
    expression (``nextval(...)``, ``now()``)."""
    if expr is None:
        return None
    m = _CAST_LITERAL.match(expr)
    if m is not None:
        return m.group(1).replace("''", "'")
    m = _NUMBER.match(expr)
    if m is not None:
        return m.group(1)
    if expr in ("true", "false"):
        return expr
    return None


_TEMPORAL = {"time", "timetz", "timestamp", "timestamptz"}


def postgres_column(name: str, typname: str, full: str, nullable: bool, *, typmod: int = -1, category: str = "",
                    elem: str | None = None, elem_category: str | None = None, collation: str | None = None,
                    enum_labels: str | None = None, default: str | None = None) -> Column:
    """A column as the catalog describes it (``pg_type.typname``, ``format_type``, ``atttypmod``,
    ``typcategory``; for arrays the element's typname and category), with its Arrow type.

    The Debezium format reads two facts from it: ``datetime_precision`` of time and timestamp
    types (and their arrays; 6 when unconstrained), and, for enum types and their arrays,
    ``column_type`` = ``enum('a','b')`` (``[]`` appended for arrays): the labels, SQL-quoted, in
    ``enumsortorder`` (``enum_labels``, as :data:`_SCHEMA_SQL` reads them).
    """
    base = elem if category == "A" and elem is not None else typname
    precision, scale = numeric_precision(typmod) if base == "numeric" else (None, None)
    fsp = (typmod if typmod >= 0 else 6) if base in _TEMPORAL else None
    if enum_labels is not None:
        full = f"enum({enum_labels})" + ("[]" if category == "A" else "")
    return Column(name=name, data_type=typname, column_type=full, nullable=nullable, precision=precision,
                  scale=scale, datetime_precision=fsp, collation=collation,
                  arrow=arrow_type(typname, category, typmod, elem, elem_category), default=default)


def postgres_table(table_id: TableId, columns: tuple[Column, ...], primary_key: tuple[str, ...],
                   database: str | None = None) -> TableSchema:
    """A PostgreSQL table's schema (its changes carry the PostgreSQL connector's source block)."""
    return TableSchema(table_id, columns, primary_key, CONNECTOR, database)


# --- text -> values ----------------------------------------------------------------------------

def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None  # NaN and +-Infinity have no Arrow decimal


def _money(text: str) -> Decimal | None:
    negative = text.startswith("-") or text.startswith("(")
    digits = re.sub(r"[^0-9.]", "", text)
    value = Decimal(digits) if digits else Decimal(0)
    return -value if negative else value


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None  # infinity, -infinity, BC dates and years past 9999 have no Python date


def _time(text: str) -> dt.timedelta:
    h, m, s = text.split(":")
    return dt.timedelta(hours=int(h), minutes=int(m), seconds=float(s[:2]),
                        microseconds=int((s[3:] + "000000")[:6]) if "." in s else 0)


def _timestamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None  # infinity, BC, past 9999


def _timestamptz(text: str) -> dt.datetime | None:
    value = _timestamp(text)
    return None if value is None else value.astimezone(_UTC)


_TZ = re.compile(r"^(\d\d):(\d\d):(\d\d)(\.\d+)?([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?$")


def _timetz(text: str) -> str:
    """``'12:34:56.5+02'`` -> ``'10:34:56.5Z'`` (Debezium's ZonedTime: UTC)."""
    m = _TZ.match(text)
    if not m:
        return text
    h, mi, s, frac, sign, oh, om, os_ = m.groups()
    offset = int(oh) * 3600 + int(om or 0) * 60 + int(os_ or 0)
    seconds = (int(h) * 3600 + int(mi) * 60 + int(s) - (offset if sign == "+" else -offset)) % 86400
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}{frac or ''}Z"


def _bool(text: str) -> bool:
    return text == "t"


def _bytes(text: str) -> bytes:
    return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()


def scalar_parser(column_type: pa.DataType, typname: str) -> Callable[[str], Any]:
    """The function turning one text value of ``typname`` into its Arrow type's Python value."""
    if typname == "money":
        return _money
    if typname == "timetz":
        return _timetz
    t = column_type
    if pa.types.is_integer(t):
        return int
    if pa.types.is_floating(t):
        return float
    if pa.types.is_decimal(t):
        return _decimal
    if pa.types.is_boolean(t):
        return _bool
    if pa.types.is_binary(t):
        return _bytes
    if pa.types.is_date(t):
        return _date
    if pa.types.is_duration(t):
        return _time
    if pa.types.is_timestamp(t):
        return _timestamptz if t.tz else _timestamp
    return str


def parse_array(text: str, element: Callable[[str], Any]) -> list[Any]:
    """A one-dimensional array literal (``{1,2,NULL}``, ``{"a b","c\\"d"}``) -> a list."""
    if text.startswith("["):  # explicit bounds: '[0:1]={1,2}'
        text = text[text.index("=") + 1:]
    out: list[Any] = []
    i, n = 1, len(text) - 1
    while i < n:
        if text[i] == '"':
            j, buf = i + 1, []
            while text[j] != '"':
                if text[j] == "\\":
                    j += 1
                buf.append(text[j])
                j += 1
            out.append(element("".join(buf)))
            i = j + 1
        else:
            j = i
            while j < n and text[j] != ",":
                j += 1
            raw = text[i:j]
            out.append(None if raw == "NULL" else element(raw.strip()))
            i = j
        if i < n and text[i] == ",":
            i += 1
    return out


def to_arrow(texts: pa.Array, column: Column) -> pa.Array:
    """A column's text values (Arrow strings, nulls for NULL) as its Arrow type (executor).

    By Arrow kernels (:mod:`casts`) where a type has one; the values a kernel leaves (``infinity``,
    BC dates, arrays with quoted elements...) and timetz value by value, as :func:`to_arrow_rows`
    does.
    """
    t = column.arrow
    if (pa.types.is_string(t) and column.data_type not in ("timetz", "money")) or pa.types.is_integer(t) \
            or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return to_arrow_rows(texts, column)
    if pa.types.is_list(t):
        element = replace(column, data_type=column.data_type.lstrip("_"), arrow=t.value_type)
        kernel: Kernel | None = array_kernel(lambda values: to_arrow(values, element))
    else:
        kernel = kernel_for(t, column.data_type)
    if kernel is None:
        return to_arrow_rows(texts, column)
    try:
        values, rest = kernel(texts, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # out of range for the type: value by value
        return to_arrow_rows(texts, column)
    left = rest.to_numpy(zero_copy_only=False)
    if not left.any():
        return values
    at = np.arange(len(values))  # the kernel's values, and the leftovers after them
    at[left] = len(values) + np.arange(int(left.sum()))
    return pa.concat_arrays([values, to_arrow_rows(texts.filter(rest), column)]).take(pa.array(at))


def to_arrow_rows(texts: pa.Array, column: Column) -> pa.Array:
    """:func:`to_arrow` with every type but integers, floats, strings and booleans converted
    value by value (the reference the kernels are tested against; executor).
    """
    t = column.arrow
    if pa.types.is_string(t) and column.data_type not in ("timetz", "money"):
        return texts.cast(t)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return texts.cast(t)
    if pa.types.is_boolean(t):
        return pc.equal(texts, "t")
    if pa.types.is_list(t):
        element_type = t.value_type
        element = scalar_parser(element_type, column.data_type.lstrip("_"))
        values = [None if v is None else parse_array(v, element) for v in texts.to_pylist()]
        return pa.array(values, type=t)
    parse = scalar_parser(t, column.data_type)
    return pa.array([None if v is None else parse(v) for v in texts.to_pylist()], type=t)


def key_value(text: str | None, column: Column) -> Any:
    """One key value from its text (what chunk boundaries hold)."""
    if text is None:
        return None
    return to_arrow(pa.array([text], pa.string()), column)[0].as_py()


def texts_to_table(columns: Sequence[Sequence[str | None]] | Sequence[pa.Array], schema: TableSchema) -> pa.Table:
    """Rows given column-wise as texts -> a table of ``schema.arrow_schema()``."""
    arrays = [to_arrow(c if isinstance(c, pa.Array) else pa.array(c, pa.string()), col)
              for c, col in zip(columns, schema.columns, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema())
