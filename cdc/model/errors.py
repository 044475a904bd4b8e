"""The exception hierarchy. Every error the pipeline raises on purpose derives from CdcError.

Two markers say what a caller may do about it:

* ``Terminal``: retrying cannot help (bad config, missing privilege, purged binlog). The message
  names the fix.
* ``Transient``: the same call may succeed later (connection reset, lock wait timeout).

Exceptions carry their context as fields (table, split id, offset) and stay picklable, because
Spark ships executor exceptions to the driver by pickling them.
"""

from __future__ import annotations

from typing import Any


class CdcError(Exception):
    """Root of every error this package raises on purpose."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[CdcError], message: str, context: dict[str, Any]) -> CdcError:
    return cls(message, **context)


class Terminal:
    """Marker: retrying will not help; a person must change something (the message says what)."""


class Transient:
    """Marker: the same operation may succeed if retried."""


class ConfigError(CdcError, Terminal):
    """A configuration value is invalid. The message names the key path and what is accepted."""


class SourceUnreachable(CdcError, Transient):
    """The database host cannot be reached (DNS, refused, timeout)."""


class AuthenticationFailed(CdcError, Terminal):
    """The database refused the user name or password."""


class MissingPrivilege(CdcError, Terminal):
    """The CDC user lacks a privilege the pipeline needs (the message names the GRANT to run)."""


class BinlogNotConfigured(CdcError, Terminal):
    """The server's binary log settings do not allow CDC (off, not ROW, not FULL, ...)."""


class BinlogPurged(CdcError, Terminal):
    """The binlog position to resume from no longer exists on the server."""


class NoChunkKey(CdcError, Terminal):
    """A table has no primary key and no configured chunk key column."""


class TableNotFound(CdcError, Terminal):
    """A configured or referenced table does not exist."""


class SchemaChanged(CdcError, Terminal):
    """A captured table's definition changed (DDL) and the job cannot follow: the behaviour is
    ``exception``, or the rows disagree with the schema history."""


class UnsupportedDdl(CdcError, Terminal):
    """A DDL statement touches a captured table, but the parser cannot tell what it changes."""


class InvalidBinlogPosition(CdcError, Terminal):
    """The server cannot serve the requested position (beyond the binlog end, mid-event, ...)."""
