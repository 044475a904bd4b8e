"""Snapshot chunks read with ``COPY (SELECT ...) TO STDOUT (FORMAT binary)`` into Arrow (executor).

The ADBC PostgreSQL driver (``adbc-driver-postgresql``, Apache Arrow's, libpq inside) runs a
SELECT as a binary COPY and decodes the values into Arrow in C: no text is produced by the server
or parsed by the worker for the columns whose binary form it decodes exactly into the job's Arrow
type (integers, floats, booleans, strings, json, bytea, date, time, timestamps, and
one-dimensional arrays of integers, floats, booleans and strings). Every other column is
selected as ``col::text`` in the same COPY and converted by :func:`types.to_arrow`, as the stream
converts it (pgoutput's text), so its value is the same through the snapshot and the stream by
construction. benchmarks/pg_chunk_read.py measured this path against ``COPY ... (FORMAT csv)``
parsed by Arrow's CSV reader (docs/performance/index.md).

What the binary decode needs beyond a cast to the job's type: a ``date`` or ``timestamp`` outside
years 1 to 9999 (``infinity``, BC, past 9999; the driver wraps the infinities around int64) is
null, as the text path makes it (Python has no such date); ``time`` comes as time64 and becomes
the job's duration; json comes as Arrow's json extension over strings.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlog.postgres.server import IdleSessions, PgSettings
from binlog.postgres.types import quote_ident, to_arrow
from cdc.model.errors import SourceUnreachable
from cdc.model.schema import Column, TableSchema

# Types whose binary COPY form the driver decodes into exactly the job's Arrow value.
_SCALARS = {"int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar", "name", "bytea",
            "json", "jsonb", "date", "time", "timestamp", "timestamptz"}
_ELEMENTS = {"int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar"}
# The others are selected as their output function's text, which ``::text`` is except for the types
# with a cast function of their own (pg_cast): ``inet::text`` shows the netmask that inet's output
# omits ('::1/128' for '::1').
_OUTPUT_FUNCTIONS = {"inet": "inet_out", "cidr": "cidr_out", "char": "charout"}

_MIN_US = (dt.datetime(1, 1, 1) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
_MAX_US = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
_MIN_DAY = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
_MAX_DAY = (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days


def decoded_in_binary(column: Column) -> bool:
    """True when the driver decodes this column's binary values into the job's Arrow values: the
    built-in types of :data:`_SCALARS` and arrays of :data:`_ELEMENTS` (a domain's values arrive
    as its base type's). Not enums: the driver reads the catalog's types when it connects, so an
    enum created later arrives as opaque bytes on a kept session."""
    if pa.types.is_list(column.arrow):
        return column.data_type.lstrip("_") in _ELEMENTS
    return column.data_type in _SCALARS


def select_item(column: Column) -> str:
    """The column in the chunk SELECT: as it is when decoded in binary, else as the text of its
    output function."""
    name = quote_ident(column.name)
    if decoded_in_binary(column):
        return name
    if column.data_type in _OUTPUT_FUNCTIONS:
        return f"pg_catalog.{_OUTPUT_FUNCTIONS[column.data_type]}({name})::text"
    return f"{name}::text"


def select_list(schema: TableSchema) -> str:
    """The chunk SELECT's columns (:func:`select_item`)."""
    return ", ".join(select_item(c) for c in schema.columns)


def _storage(array: pa.Array) -> pa.Array:
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def _in_years_1_to_9999(values: pa.Array, low: int, high: int) -> pa.Array:
    """``values`` with those outside ``[low, high]`` (as integers) made null."""
    raw = values.view(pa.int64() if pa.types.is_timestamp(values.type) else pa.int32())
    keep = pc.and_(pc.greater_equal(raw, low), pc.less_equal(raw, high))
    if pc.all(pc.fill_null(keep, True)).as_py():
        return values
    return pc.if_else(keep, values, pa.scalar(None, values.type))


def to_job_type(array: pa.Array, column: Column) -> pa.Array:
    """One column as the driver decoded it -> the job's Arrow type (texts through :func:`to_arrow`)."""
    array = _storage(array)
    t = column.arrow
    if not decoded_in_binary(column):
        return to_arrow(array.cast(pa.string()), column)
    if pa.types.is_timestamp(t):
        return _in_years_1_to_9999(array.cast(t), _MIN_US, _MAX_US)
    if pa.types.is_date(t):
        return _in_years_1_to_9999(array, _MIN_DAY, _MAX_DAY)
    if pa.types.is_duration(t):
        return array.view(pa.int64()).view(t)
    return array if array.type == t else array.cast(t)


def to_job_table(table: pa.Table, schema: TableSchema) -> pa.Table:
    """The driver's result of :func:`select_list` -> a table of ``schema.arrow_schema()``."""
    arrays = [to_job_type(table.column(i).combine_chunks(), c) for i, c in enumerate(schema.columns)]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema())


def conninfo(settings: PgSettings) -> str:
    """libpq's connection string for ``settings``, with the session settings every spark-cdc session
    has (it holds the password: never log it)."""
    def quote(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{k}={quote(v)}" for k, v in settings.conninfo_params().items())


def _close_adbc(conn: Any) -> None:
    import adbc_driver_postgresql.dbapi as dbapi  # type: ignore[import-untyped]

    with contextlib.suppress(dbapi.Error):
        conn.close()


def _answers(conn: Any) -> bool:
    import adbc_driver_postgresql.dbapi as dbapi

    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
    except dbapi.Error:
        return False
    return True


# One idle driver session per source, per process, kept between chunk reads as server.borrowed
# keeps psycopg's (a new session forks a server backend, authenticates and reads pg_type).
_SESSIONS: IdleSessions[Any] = IdleSessions(_close_adbc)


def borrowed_adbc(settings: PgSettings) -> contextlib.AbstractContextManager[Any]:
    """An autocommit ADBC session for one chunk read, kept for the next one in this process
    (:class:`~binlog.postgres.server.IdleSessions`).

    Raises:
        SourceUnreachable: the driver could not connect (psycopg's session, made first with the
            same settings, reports a wrong password or TLS setting by name).
    """
    dsn = conninfo(settings)

    def connect() -> Any:
        import adbc_driver_postgresql.dbapi as dbapi

        try:
            return dbapi.connect(dsn, autocommit=True)
        except dbapi.Error as exc:
            where = f"{settings.host}:{settings.port}"
            text = str(exc).replace(settings.password, "***") if settings.password else str(exc)
            raise SourceUnreachable(f"the snapshot's chunk reader (the ADBC PostgreSQL driver) cannot connect to "
                                    f"PostgreSQL at {where}: {text.strip()}", address=where) from None

    return _SESSIONS.borrowed(dsn, connect, _answers)


def fetch_table(conn: Any, query: str) -> pa.Table:
    """All rows of ``query`` (a SELECT; the driver reads it as a binary COPY) as the driver's Arrow."""
    with conn.cursor() as cur:
        cur.execute(query)
        table: pa.Table = cur.fetch_arrow_table()
    return table
