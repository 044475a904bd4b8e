"""Read a key range of a table as Arrow record batches: the chunk SELECT of the snapshot.

:func:`fetch_arrow` runs ``SELECT <every column> FROM <table> WHERE <range>`` as one statement
on a fresh autocommit connection (one InnoDB consistent read, no locks) and yields
``pyarrow.RecordBatch`` es whose schema is exactly ``schema.arrow_schema()``. The fetch layer owns
the select list, because exact values need type-specific select expressions (see
:mod:`binlog.mysql.arrow_columns`); callers pass only the range predicate, e.g.
``fetch_arrow(settings, schema, *split.where_clause())``.

Backends (:mod:`binlog.mysql.fetch_backends`), fastest first; ``backend="auto"`` takes the first one
that is installed and reads every column of the table, and all give identical values:

* ``connectorx``: the binary protocol straight into Arrow, in Rust (``pip install connectorx``).
* ``mysqlclient``: the C client with conversions off; Arrow parses the text values (``pip
  install mysqlclient``, which builds against Debian's ``libmariadb-dev`` and ``pkg-config``).
* ``pymysql``: pure Python with pymysql's value conversions (always installed).

Parameters are rendered into the SQL text on the client (connectorx takes no parameters), as
literals that mean the same under every ``sql_mode`` and connection character set: strings
and bytes as hex literals, numbers and temporal values in plain digits.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
from collections.abc import Generator, Sequence
from decimal import Decimal
from typing import Any, Literal, get_args

import pyarrow as pa

from binlog.mysql.arrow_columns import ColumnRead, column_reads, select_list
from binlog.mysql.connection import Endpoint
from binlog.mysql.fetch_backends import (
    CONNECTORX_NO_CLIENT_CERT,
    ConnectorXBackend,
    FetchBackend,
    MySQLClientBackend,
    PyMySQLBackend,
)
from binlog.mysql.types import quoted_table
from cdc.model.config import TlsSettings
from cdc.model.errors import ConfigError
from cdc.model.schema import Column, TableSchema

log = logging.getLogger(__name__)

BackendName = Literal["auto", "connectorx", "mysqlclient", "pymysql"]
BACKENDS: tuple[FetchBackend, ...] = (ConnectorXBackend(), MySQLClientBackend(), PyMySQLBackend())
DEFAULT_BATCH_ROWS = 65536
_OPTION = "source.fetch_backend"


def fetch_arrow(
    settings: Endpoint,
    schema: TableSchema,
    where: str = "TRUE",
    params: Sequence[Any] = (),
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    backend: BackendName = "auto",
) -> Generator[pa.RecordBatch, None, None]:
    """Yield the rows of ``schema``'s table that match ``where``, as record batches.

    Runs on executors, once per chunk; opens (and closes) its own connection. Batches hold
    between 1 and ``batch_rows`` rows and all have exactly ``schema.arrow_schema()``; an empty
    result yields no batch. Rows come in the server's scan order (no ORDER BY). Closing the
    generator early closes the connection.

    Args:
        settings: where and as whom to connect.
        schema: the table; every column is read, in column order.
        where: the range predicate in pymysql's ``%s`` style (``%%`` for a literal ``%``), e.g.
            from ``SnapshotSplit.where_clause()``.
        params: one value per ``%s``: None, bool, int, float, Decimal, str, bytes, date,
            datetime, time or timedelta.
        batch_rows: the most rows one batch holds. pymysql and mysqlclient hold one batch in
            memory; connectorx reads ahead and may hold the whole result of ``where``.
        backend: ``auto`` or the name of one backend.

    Raises:
        ConfigError: the named backend is not installed or cannot read a column of the table,
            or ``batch_rows`` is not positive.
        TypeError, ValueError: a parameter cannot be written as a SQL literal.
        AuthenticationFailed, SourceUnreachable, MissingPrivilege, TableNotFound: while reading.
    """
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be at least 1, got {batch_rows}", batch_rows=batch_rows)
    reads = column_reads(schema)
    impl = choose_backend(schema, backend, settings.tls)
    sql = select_sql(schema, reads, render_sql(where, params))
    log.debug("reading %s with %s", schema.table_id, impl.name)
    return _batches(impl, settings, schema, sql, reads, batch_rows)


def _batches(
    impl: FetchBackend, settings: Endpoint, schema: TableSchema, sql: str,
    reads: tuple[ColumnRead, ...], batch_rows: int,
) -> Generator[pa.RecordBatch, None, None]:
    target = schema.arrow_schema()
    raw_batches = impl.read(settings, schema.table_id, sql, reads, batch_rows)
    with contextlib.closing(raw_batches):  # closing this generator closes the connection now
        for raw in raw_batches:
            arrays = [r.finish(a) for r, a in zip(reads, raw, strict=True)]
            yield pa.RecordBatch.from_arrays(arrays, schema=target)


def select_sql(schema: TableSchema, reads: tuple[ColumnRead, ...], where_sql: str) -> str:
    """``SELECT <read expressions> FROM <table> WHERE <where_sql>`` (``where_sql`` rendered)."""
    return f"SELECT {select_list(reads)} FROM {quoted_table(schema.table_id)} WHERE {where_sql}"


def available_backends() -> list[str]:
    """Names of the installed backends, fastest first."""
    return [b.name for b in BACKENDS if b.available()]


def choose_backend(schema: TableSchema, backend: BackendName = "auto",
                   tls: TlsSettings | None = None) -> FetchBackend:
    """The backend that reads ``schema``'s table: the named one, or the fastest able one.

    Args:
        schema: the table.
        backend: ``auto`` or a backend's name.
        tls: ``source.ssl_*`` (a backend that cannot connect so is skipped by ``auto``).

    Raises:
        ConfigError: unknown name; the named backend is not installed, cannot read a column, or
            cannot connect with the TLS settings.
    """
    tls = tls or TlsSettings()
    if backend == "auto":
        for impl in BACKENDS:
            if impl.available() and impl.supports_tls(tls) and not _unsupported(impl, schema):
                return impl
        raise AssertionError("pymysql reads every column type")  # pragma: no cover
    impl = _backend_named(backend)
    if not impl.available():
        raise ConfigError(
            f"{_OPTION}: backend {backend!r} is not installed ({impl.install_hint}); "
            f"installed: {', '.join(available_backends())}", backend=backend,
        )
    check_backend_tls(backend, tls)
    unsupported = _unsupported(impl, schema)
    if unsupported:
        names = ", ".join(f"{c.name} ({c.column_type})" for c in unsupported)
        raise ConfigError(
            f"{_OPTION}: backend {backend!r} cannot read column(s) {names} of "
            f"{schema.table_id}; use 'auto' to fall back per table", backend=backend,
            table=str(schema.table_id),
        )
    return impl


def check_backend_tls(backend: str, tls: TlsSettings) -> None:
    """Refuse a named backend that cannot connect as ``source.ssl_*`` asks (driver or executor).

    Raises:
        ConfigError: it cannot (the message names ``source.fetch_backend`` and the TLS key).
    """
    if backend == "auto":
        return
    if backend == ConnectorXBackend.name and not ConnectorXBackend().supports_tls(tls):
        raise ConfigError(CONNECTORX_NO_CLIENT_CERT, key=_OPTION, backend=backend)


def _backend_named(name: str) -> FetchBackend:
    for impl in BACKENDS:
        if impl.name == name:
            return impl
    choices = ", ".join(get_args(BackendName))
    raise ConfigError(f"{_OPTION}: unknown backend {name!r}; choose one of {choices}", backend=name)


def _unsupported(impl: FetchBackend, schema: TableSchema) -> list[Column]:
    return [c for c in schema.columns if not impl.supports(c)]


def render_sql(sql: str, params: Sequence[Any]) -> str:
    """``sql % literals``: pymysql's ``%s`` substitution with :func:`sql_literal` values.

    Raises:
        TypeError, ValueError: a parameter has no SQL literal, or the count does not match.
    """
    return sql % tuple(sql_literal(p) for p in params)


def sql_literal(value: Any) -> str:
    """A SQL literal for ``value`` that cannot be misread whatever the sql_mode or charset.

    Strings become ``_utf8mb4 X'<hex>'`` (no quote or backslash can end them early), bytes
    ``X'<hex>'``; aware datetimes are converted to UTC (the session time zone).

    Raises:
        TypeError: the type has no literal form here.
        ValueError: a float or Decimal that is NaN or infinite.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float | Decimal):
        return _number(value)
    if isinstance(value, str):
        return "_utf8mb4 X'" + value.encode("utf-8").hex() + "'"
    if isinstance(value, bytes | bytearray | memoryview):
        return "X'" + bytes(value).hex() + "'"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return f"'{value.isoformat(sep=' ', timespec='microseconds')}'"
    if isinstance(value, dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, dt.time):
        return f"'{value.replace(tzinfo=None).isoformat(timespec='microseconds')}'"
    if isinstance(value, dt.timedelta):
        return f"'{_time_text(value)}'"
    raise TypeError(f"no SQL literal for a {type(value).__name__} parameter: {value!r}")


def _number(value: float | Decimal) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"no SQL literal for the float {value!r}")
        return repr(value)
    if not value.is_finite():
        raise ValueError(f"no SQL literal for the Decimal {value!r}")
    return format(value, "f")


def _time_text(value: dt.timedelta) -> str:
    micros = abs(value // dt.timedelta(microseconds=1))
    seconds, micro = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    sign = "-" if value < dt.timedelta(0) else ""
    return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{micro:06d}"
