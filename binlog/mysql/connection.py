"""How to reach a MySQL-compatible server: a small picklable value, safe to ship to executors.

The password never appears in ``repr``/``str`` (so it cannot reach a log line or a Spark plan
string). Connections are opened where they are used: on the driver for planning, inside
``read()`` on executors.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc.model.errors import AuthenticationFailed, SourceUnreachable

# pymysql / server error codes we translate into errors that name the fix.
_ACCESS_DENIED = 1045
_CANNOT_CONNECT = (2003, 2005, 2006, 2013)


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
    """

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout: float = 10.0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:
        """Open an autocommit pymysql connection (utf8mb4, session time zone UTC).

        Raises:
            SourceUnreachable: nothing answers at host:port.
            AuthenticationFailed: the server refused the user or password.
        """
        init = kwargs.pop("init_command", "SET time_zone = '+00:00'")
        try:
            return Connection(
                # bytes: pymysql would encode a str password as latin-1
                host=self.host, port=self.port, user=self.user, password=self.password.encode(),
                database=database, autocommit=True, charset="utf8mb4",
                connect_timeout=self.connect_timeout, init_command=init, **kwargs,
            )
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code == _ACCESS_DENIED:
                raise AuthenticationFailed(
                    f"{self.address} refused user {self.user!r}: check source.username and "
                    "source.password (the password is read from the environment or a file)",
                    host=self.host, port=self.port, user=self.user,
                ) from None
            if code in _CANNOT_CONNECT:
                raise SourceUnreachable(
                    f"cannot reach MySQL at {self.address}: {_reason(exc)}. Check source.hostname "
                    "and source.port, and that the server accepts TCP connections from here",
                    host=self.host, port=self.port,
                ) from None
            raise


def _reason(exc: BaseException) -> str:
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return text.split(" (")[0] if "Can't connect" in text else text
