"""How to reach a MySQL-compatible server: a small picklable value, safe to ship to executors.

The password never appears in ``repr``/``str`` (so it cannot reach a log line or a Spark plan
string). Connections are opened where they are used: on the driver for planning, inside
``read()`` on executors.

TLS (``source.ssl_mode``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``; docs/operating/security.md) maps onto
pymysql as :func:`pymysql_tls` says; the binlog connections (python-mysql-replication) get the
same keyword arguments, because that library hands its ``connection_settings`` to pymysql.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc.model.config import TlsSettings
from cdc.model.errors import AuthenticationFailed, ConfigError, SourceUnreachable

# pymysql / server error codes we translate into errors that name the fix.
_ACCESS_DENIED = 1045
_CANNOT_CONNECT = (2003, 2005, 2006, 2013)
_SSL_CONNECTION_ERROR = 2026
# Driver messages that mean "TLS failed" (matched lower-case; never the host name alone).
_NO_TLS_MARKERS = ("ssl is required but the server doesn't support it", "requires secure connection but server")
_TLS_MARKERS = ("[ssl", "ssl:", "sslerror", "tlserror", "ssl routines", "ssl connection error", "tls handshake",
                "wrong version number")
_TLS_CONTEXTS: dict[TlsSettings, ssl.SSLContext] = {}
_TLS_CONTEXTS_LOCK = threading.Lock()


class Connection(pymysql.connections.Connection):
    """pymysql's connection, sharing one default TLS context per process.

    In its default "preferred TLS" mode pymysql builds a fresh TLS context for every connection,
    and loading the system CA store takes about 50 ms: most of the cost of a short connection
    (each snapshot chunk and binlog slice opens some). The context is built once and shared.
    """

    _preferred_tls: ssl.SSLContext | None = None
    _tls_lock = threading.Lock()

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp != {}:  # explicit TLS options: let pymysql build the context they describe
            return super()._create_ssl_ctx(sslp)  # type: ignore[misc]
        with Connection._tls_lock:
            if Connection._preferred_tls is None:
                Connection._preferred_tls = super()._create_ssl_ctx(sslp)  # type: ignore[misc]
            return Connection._preferred_tls


@dataclass(frozen=True)
class Endpoint:
    """Host, port and credentials of one server.

    Attributes:
        host: host name or IP address.
        port: TCP port.
        user: user name.
        password: the password (already resolved from the environment or a file).
        connect_timeout: seconds to wait for the TCP connection and handshake.
        tls: ``source.ssl_*`` (default: pymysql's preferred TLS, unverified).
    """

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout: float = 10.0
    tls: TlsSettings = field(default_factory=TlsSettings)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def tls_kwargs(self) -> dict[str, Any]:
        """pymysql's TLS keyword arguments for ``tls`` (see :func:`pymysql_tls`)."""
        return pymysql_tls(self.tls)

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:
        """Open an autocommit pymysql connection (utf8mb4, session time zone UTC, TLS per ``tls``).

        Raises:
            SourceUnreachable: nothing answers at host:port.
            AuthenticationFailed: the server refused the user or password.
            ConfigError: the TLS handshake failed (the message names the ``source.ssl_*`` key).
        """
        init = kwargs.pop("init_command", "SET time_zone = '+00:00'")
        try:
            return Connection(
                # bytes: pymysql would encode a str password as latin-1
                host=self.host, port=self.port, user=self.user, password=self.password.encode(),
                database=database, autocommit=True, charset="utf8mb4",
                connect_timeout=self.connect_timeout, init_command=init, **self.tls_kwargs(), **kwargs,
            )
        except pymysql.err.OperationalError as exc:
            raise connect_error(self, exc) from None


def connect_error(endpoint: Endpoint, exc: pymysql.err.OperationalError) -> Exception:
    """The CdcError that names the fix for a failed pymysql connect (``exc`` itself if none does).

    The message never holds the password: pymysql's messages do not carry it.
    """
    code = exc.args[0] if exc.args else None
    where = {"host": endpoint.host, "port": endpoint.port}
    tls_problem = tls_error(endpoint.tls, str(exc.args[1]) if len(exc.args) > 1 else str(exc))
    if tls_problem is not None and code in (*_CANNOT_CONNECT, _SSL_CONNECTION_ERROR):
        return ConfigError(f"TLS to MySQL at {endpoint.address} failed: {tls_problem}", key=tls_problem.split(":")[0],
                           **where)
    if code == _ACCESS_DENIED:
        hint = ""
        if endpoint.tls.mode == "disable":
            hint = (" If the user must connect over TLS (REQUIRE SSL/X509), source.ssl_mode 'disable' may be the "
                    "cause: set source.ssl_mode to verify-full (with source.ssl_ca) or require")
        return AuthenticationFailed(
            f"{endpoint.address} refused user {endpoint.user!r}: check source.username and "
            f"source.password (the password is read from the environment or a file).{hint}",
            user=endpoint.user, **where,
        )
    if code in _CANNOT_CONNECT:
        return SourceUnreachable(
            f"cannot reach MySQL at {endpoint.address}: {_reason(exc)}. Check source.hostname "
            "and source.port, and that the server accepts TCP connections from here", **where,
        )
    return exc


def tls_error(tls: TlsSettings, text: str) -> str | None:
    """``"source.<key>: what is wrong"`` when ``text`` is a TLS failure, else None (any driver)."""
    lowered = text.lower()
    if "certificate verify failed" in lowered or "certificate_verify_failed" in lowered:
        if "mismatch" in lowered or "hostname" in lowered:
            return ("source.hostname: the server's certificate does not name this host (ssl_mode verify-full "
                    "checks it): connect by a name the certificate lists, or use ssl_mode verify-ca")
        return (f"source.ssl_ca: the server's certificate is not signed by {tls.ca or 'a trusted CA'}: give the "
                "CA that signed it")
    if any(marker in lowered for marker in _NO_TLS_MARKERS):
        return (f"source.ssl_mode: {tls.mode!r} needs TLS, but the server does not offer it: enable TLS on the "
                "server, or set ssl_mode to prefer or disable")
    if any(marker in lowered for marker in _TLS_MARKERS):
        return (f"source.ssl_mode: the TLS handshake failed ({text.strip()}): check source.ssl_mode, ssl_ca, "
                "ssl_cert and ssl_key")
    return None


def pymysql_tls(tls: TlsSettings) -> dict[str, Any]:
    """pymysql's keyword arguments for ``source.ssl_*`` (python-mysql-replication passes them on).

    * ``disable``: ``ssl_disabled=True``.
    * ``prefer`` without a client certificate: nothing; pymysql (1.1+) then uses TLS when the
      server offers it, unverified, and falls back to plain TCP otherwise (libpq's ``prefer``).
    * anything else: ``ssl=`` an :class:`ssl.SSLContext`, which makes pymysql require TLS; it
      verifies the chain for ``verify-ca`` (and ``require`` with ``ssl_ca``, as libpq does) and
      the host name as well for ``verify-full``, and presents ``ssl_cert``. With a client
      certificate ``prefer`` becomes ``require``: pymysql cannot fall back while holding one.

    Raises:
        ConfigError: a certificate or key file cannot be loaded (the message names the key).
    """
    if tls.mode == "disable":
        return {"ssl_disabled": True}
    if tls.mode == "prefer" and tls.cert is None:
        return {}
    return {"ssl": tls_context(tls)}


def tls_context(tls: TlsSettings) -> ssl.SSLContext:
    """The TLS context for ``tls``, built once per process and shared (contexts are thread-safe).

    Raises:
        ConfigError: a certificate or key file cannot be loaded (the message names the key).
    """
    with _TLS_CONTEXTS_LOCK:
        ctx = _TLS_CONTEXTS.get(tls)
        if ctx is None:
            ctx = _TLS_CONTEXTS[tls] = _new_context(tls)
        return ctx


def _new_context(tls: TlsSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.verifies:
        try:
            ctx.load_verify_locations(cafile=tls.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"source.ssl_ca: cannot load {tls.ca}: {exc}", key="source.ssl_ca") from None
        ctx.check_hostname = tls.mode == "verify-full"
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert is not None:
        try:
            ctx.load_cert_chain(tls.cert, keyfile=tls.key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"source.ssl_cert: cannot load {tls.cert} with source.ssl_key {tls.key}: {exc}",
                              key="source.ssl_cert") from None
    return ctx


def _reason(exc: BaseException) -> str:
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return text.split(" (")[0] if "Can't connect" in text else text
