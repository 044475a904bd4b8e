"""The drivers that run one chunk SELECT and deliver its columns as Arrow arrays.

Each backend runs the already rendered SQL as one statement on a fresh autocommit connection
(one InnoDB consistent read) set up by :data:`SESSION_SETUP`, and yields, per batch of at most
``batch_rows`` rows, one array per :class:`~binlog.mysql.arrow_columns.ColumnRead` in its
``raw_type``. :mod:`binlog.mysql.fetch` picks the backend and finishes the arrays.

* :class:`ConnectorXBackend`: connectorx reads the binary protocol straight into Arrow in Rust;
  no Python object per row or value. Fastest (see benchmarks/select_readers.py).
* :class:`MySQLClientBackend`: mysqlclient's C ``_mysql`` API with conversions off: every value
  arrives as ``bytes``; Arrow parses the text column by column.
* :class:`PyMySQLBackend`: pure Python, always installed; pymysql's own value conversions.

TLS (``source.ssl_*``, docs/operating/security.md): pymysql takes :func:`~binlog.mysql.connection.pymysql_tls`;
mysqlclient ``ssl_mode`` and ``ssl``; connectorx 0.4 its URL's ``ssl-mode`` and ``ssl-ca`` (it has no
client certificate parameter, so :meth:`FetchBackend.supports_tls` is False when ``ssl_cert`` is set).

Memory: pymysql and mysqlclient hold one batch (unbuffered result sets). connectorx's stream reads
ahead without back-pressure, so it may hold the whole result: bound it with the chunk's key range.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator
from typing import Any, ClassVar
from urllib.parse import quote

import pyarrow as pa
import pymysql
import pymysql.cursors
from pymysql.constants import CLIENT

from binlog.mysql.arrow_columns import ColumnRead
from binlog.mysql.connection import Endpoint, tls_error
from binlog.mysql.types import INTEGER_TYPES, STRING_TYPES, quote_ident
from cdc.model.config import TlsSettings
from cdc.model.errors import (
    AuthenticationFailed,
    ConfigError,
    MissingPrivilege,
    SourceUnreachable,
    TableNotFound,
)
from cdc.model.schema import Column, TableId

RawBatch = list[pa.Array]

# Every reading session: autocommit (the SELECT is its own consistent read), TIMESTAMPs as UTC,
# CHAR values unpadded whatever the global sql_mode says.
SESSION_SETUP = (
    "SET autocommit = 1, time_zone = '+00:00', "
    "sql_mode = REPLACE(@@sql_mode, 'PAD_CHAR_TO_FULL_LENGTH', '')"
)
_ACCESS_DENIED = 1045
_UNREACHABLE = frozenset({2002, 2003, 2005, 2006, 2013})
_NO_PRIVILEGE = frozenset({1142, 1143})
_NO_TABLE = 1146
_SSL_ERROR = 2026
_CX_CODE = re.compile(r"ERROR (\d{4})")
_CX_UNREACHABLE = ("Could not connect", "Connection refused", "timed out waiting for connection")

# Column types connectorx 0.4 reads correctly once arrow_columns has wrapped them; others
# (spatial types, MariaDB's INET4/INET6/UUID, ...) fall back to another backend.
_CONNECTORX_TYPES = (
    INTEGER_TYPES | STRING_TYPES
    | {"decimal", "numeric", "float", "double", "real", "date", "datetime", "timestamp", "time",
       "year", "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"}
)


class FetchBackend(ABC):
    """A driver for chunk SELECTs. Subclasses set ``name`` and ``module`` and implement ``read``."""

    name: ClassVar[str]
    module: ClassVar[str]  # the import that must succeed for the backend to be available
    install_hint: ClassVar[str]

    @classmethod
    def available(cls) -> bool:
        """True when the driver package imports (installed, and its native parts load)."""
        return _importable(cls.module)

    def supports(self, column: Column) -> bool:
        """True when this backend reads ``column`` exactly."""
        return True

    def supports_tls(self, tls: TlsSettings) -> bool:
        """True when this backend can connect as ``source.ssl_*`` asks."""
        return True

    @abstractmethod
    def read(
        self, settings: Endpoint, table: TableId, sql: str,
        reads: tuple[ColumnRead, ...], batch_rows: int,
    ) -> Generator[RawBatch, None, None]:
        """Run ``sql`` and yield its rows as raw arrays, at most ``batch_rows`` rows at a time.

        Raises:
            AuthenticationFailed: the server refused the credentials.
            SourceUnreachable: the server cannot be reached or dropped the connection.
            MissingPrivilege: the user may not SELECT from the table.
            TableNotFound: the table does not exist.
        """


class PyMySQLBackend(FetchBackend):
    """pymysql with an unbuffered ``SSCursor``; Python values become Arrow per column."""

    name = "pymysql"
    module = "pymysql"
    install_hint = "pip install pymysql"

    def read(
        self, settings: Endpoint, table: TableId, sql: str,
        reads: tuple[ColumnRead, ...], batch_rows: int,
    ) -> Generator[RawBatch, None, None]:
        conn = settings.connect(init_command=SESSION_SETUP)
        try:
            with translated(settings, table):
                cur = conn.cursor(pymysql.cursors.SSCursor)
                cur.execute(sql)
                try:
                    while rows := cur.fetchmany(batch_rows):
                        yield [
                            pa.array(values, type=r.raw_type)
                            for values, r in zip(zip(*rows, strict=True), reads, strict=True)
                        ]
                finally:
                    # pymysql must read what an abandoned unbuffered result still holds
                    with contextlib.suppress(pymysql.err.Error):
                        cur.close()
        finally:
            conn.close()


class MySQLClientBackend(FetchBackend):
    """mysqlclient's ``_mysql`` with ``use_result`` and ``fetch_row(n, 0)``, conversions off."""

    name = "mysqlclient"
    module = "MySQLdb"
    install_hint = "apt-get install libmariadb-dev pkg-config && pip install mysqlclient"

    def read(
        self, settings: Endpoint, table: TableId, sql: str,
        reads: tuple[ColumnRead, ...], batch_rows: int,
    ) -> Generator[RawBatch, None, None]:
        from MySQLdb import _mysql

        with translated(settings, table):
            conn = _mysql.connect(
                host=settings.host, port=settings.port, user=settings.user,
                password=settings.password, charset="utf8mb4", init_command=SESSION_SETUP,
                connect_timeout=max(1, math.ceil(settings.connect_timeout)), **mysqlclient_tls(settings.tls),
            )
        try:
            with translated(settings, table):
                conn.query(sql.encode("utf-8"))
                result = conn.use_result()
                while rows := result.fetch_row(batch_rows, 0):
                    yield text_columns(rows, reads)
        finally:
            conn.close()


_MYSQL_SSL_MODES = {"disable": "DISABLED", "prefer": "PREFERRED", "require": "REQUIRED",
                    "verify-ca": "VERIFY_CA", "verify-full": "VERIFY_IDENTITY"}


def mysqlclient_tls(tls: TlsSettings) -> dict[str, Any]:
    """mysqlclient's ``ssl_mode`` and ``ssl`` arguments for ``source.ssl_*`` (``require`` with a CA
    verifies it, as libpq does). Built against MariaDB Connector/C, mysqlclient maps REQUIRED and
    above onto MYSQL_OPT_SSL_ENFORCE and VERIFY_* onto MYSQL_OPT_SSL_VERIFY_SERVER_CERT."""
    mode = "verify-ca" if tls.mode == "require" and tls.verifies else tls.mode
    files = {k: v for k, v in (("ca", tls.ca), ("cert", tls.cert), ("key", tls.key)) if v is not None}
    return {"ssl_mode": _MYSQL_SSL_MODES[mode], **({"ssl": files} if files and mode != "disable" else {})}


def text_columns(
    rows: tuple[tuple[bytes | None, ...], ...], reads: tuple[ColumnRead, ...]
) -> RawBatch:
    """Rows of raw text values (``bytes`` or None) as one raw array per column.

    The row tuples are flattened once; each column is a strided slice of that list (references
    only, no new Python object per value), copied into Arrow and parsed there.
    """
    ncols = len(reads)
    flat = list(itertools.chain.from_iterable(rows))
    out: RawBatch = []
    for i, r in enumerate(reads):
        raw = pa.array(flat[i::ncols], type=pa.binary())
        if r.raw_type != pa.binary():
            raw = raw.cast(pa.string())
            if r.raw_type != pa.string():
                raw = raw.cast(r.raw_type)
        out.append(raw)
    return out


class ConnectorXBackend(FetchBackend):
    """connectorx: the binary protocol read into Arrow record batches in Rust."""

    name = "connectorx"
    module = "connectorx"
    install_hint = "pip install connectorx"

    def supports(self, column: Column) -> bool:
        return column.data_type in _CONNECTORX_TYPES

    def supports_tls(self, tls: TlsSettings) -> bool:
        return tls.cert is None  # connectorx 0.4's MySQL URL has ssl-mode and ssl-ca, no client certificate

    def read(
        self, settings: Endpoint, table: TableId, sql: str,
        reads: tuple[ColumnRead, ...], batch_rows: int,
    ) -> Generator[RawBatch, None, None]:
        import connectorx

        with translated(settings, table):
            reader = connectorx.read_sql(
                connectorx_uri(settings), sql, return_type="arrow_stream",
                batch_size=batch_rows, pre_execution_query=[SESSION_SETUP],
            )
            for batch in reader:
                if batch.num_rows:
                    yield [batch.column(i).cast(r.raw_type) for i, r in enumerate(reads)]


@functools.cache
def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def connectorx_uri(settings: Endpoint) -> str:
    """The ``mysql://`` URI connectorx needs (it takes no separate password argument).

    The password is percent-encoded; the URI must never be logged. ``prefer_socket=false`` keeps
    the TCP identity (``user@127.0.0.1``) the other backends use even when the server is local.
    TLS: ``ssl-mode`` (DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY) and ``ssl-ca``.

    Raises:
        ConfigError: ``source.ssl_cert`` is set (connectorx cannot present a client certificate).
    """
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    timeout_ms = max(1, round(settings.connect_timeout * 1000))
    return (
        f"mysql://{quote(settings.user, safe='')}:{quote(settings.password, safe='')}"
        f"@{host}:{settings.port}?prefer_socket=false&tcp_connect_timeout_ms={timeout_ms}"
        f"{_connectorx_tls(settings)}"
    )


def _connectorx_tls(settings: Endpoint) -> str:
    """The URL's TLS parameters. connectorx's PREFERRED is not opportunistic (it fails against a
    server without TLS), so ``prefer`` asks for REQUIRED when the server offers TLS, else for none."""
    tls = settings.tls
    if tls.cert is not None:
        raise ConfigError(CONNECTORX_NO_CLIENT_CERT, key="source.fetch_backend")
    if tls.mode == "prefer":
        return "&ssl-mode=REQUIRED" if server_offers_tls(settings) else ""
    mode = "verify-ca" if tls.mode == "require" and tls.verifies else tls.mode
    ca = f"&ssl-ca={quote(tls.ca, safe='/')}" if tls.ca is not None and tls.verifies else ""
    return f"&ssl-mode={_MYSQL_SSL_MODES[mode]}{ca}"


@functools.lru_cache(maxsize=64)
def server_offers_tls(settings: Endpoint) -> bool:
    """True when the server offers TLS (its greeting's CLIENT_SSL flag); asked once per process.

    Raises:
        AuthenticationFailed, SourceUnreachable: as :meth:`Endpoint.connect`.
    """
    with contextlib.closing(settings.connect()) as conn:
        return bool(getattr(conn, "server_capabilities", 0) & CLIENT.SSL)


CONNECTORX_NO_CLIENT_CERT = (
    "source.fetch_backend: connectorx cannot present the client certificate source.ssl_cert asks for "
    "(its MySQL URL has no such parameter): use fetch_backend auto (it then picks another backend) or "
    "pymysql, or drop ssl_cert and ssl_key")


@contextlib.contextmanager
def translated(settings: Endpoint, table: TableId) -> Iterator[None]:
    """Turn driver errors with a known MySQL error code into CdcErrors that name the fix.

    Other errors pass through unchanged, except that a connectorx message never carries the
    password (connectorx only takes it inside the URI).

    Raises:
        AuthenticationFailed, SourceUnreachable, MissingPrivilege, TableNotFound: see
        :meth:`FetchBackend.read`.
    """
    try:
        yield
    except Exception as exc:
        code, text = _error_code(exc)
        problem = tls_error(settings.tls, text) if code in _UNREACHABLE or code == _SSL_ERROR else None
        if problem is not None:
            raise ConfigError(f"TLS to MySQL at {settings.address} failed reading {table}: {problem}",
                              key=problem.split(":")[0], table=str(table)) from None
        error = _cdc_error(settings, table, code, _scrub(text, settings.password))
        if error is not None:
            raise error from None
        if settings.password and settings.password in str(exc):
            raise RuntimeError(_scrub(str(exc), settings.password)) from None
        raise


def _scrub(text: str, password: str) -> str:
    if not password:
        return text
    return text.replace(password, "***").replace(quote(password, safe=""), "***")


def _error_code(exc: BaseException) -> tuple[int | None, str]:
    args = exc.args
    if len(args) >= 2 and isinstance(args[0], int):  # pymysql and MySQLdb: (code, message)
        return args[0], str(args[1])
    text = str(exc)  # connectorx: RuntimeError("... ERROR 1045 (28000): ...")
    match = _CX_CODE.search(text)
    if match:
        return int(match.group(1)), text
    if isinstance(exc, RuntimeError) and any(s in text for s in _CX_UNREACHABLE):
        return 2003, text
    if isinstance(exc, RuntimeError) and "TlsError" in text:
        return _SSL_ERROR, text
    return None, text


def _cdc_error(
    settings: Endpoint, table: TableId, code: int | None, text: str
) -> Exception | None:
    where = {"host": settings.host, "port": settings.port, "user": settings.user,
             "table": str(table)}
    if code == _ACCESS_DENIED:
        return AuthenticationFailed(
            f"{settings.address} refused user {settings.user!r}: check source.username and "
            "source.password", **where,
        )
    if code in _UNREACHABLE:
        return SourceUnreachable(
            f"lost or could not open the connection to MySQL at {settings.address}: {text}",
            **where,
        )
    if code in _NO_PRIVILEGE:
        return MissingPrivilege(
            f"user {settings.user!r} may not read {table} ({text}): run "
            f"GRANT SELECT ON {quote_ident(table.db)}.* TO {settings.user!r}", **where,
        )
    if code == _NO_TABLE:
        return TableNotFound(f"reading {table} failed: {text}", **where)
    return None
