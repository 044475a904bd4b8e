"""MySQL / MariaDB server facts: setting and privilege checks, positions, watermarks, server ids.

Import these from ``binlog.mysql.reader``, which re-exports them next to the bounded change reader.
Everything here runs wherever the connection is opened (the driver plans with
:func:`current_offset`; snapshot tasks call :func:`low_watermark`).

Two flavors differ in a few statements, detected from the handshake's version string:

* MySQL 8.4+ renamed ``SHOW MASTER STATUS`` to ``SHOW BINARY LOG STATUS``; we try the new
  statement first and fall back on a parse error (1064).
* MariaDB reports its GTID position in ``@@gtid_binlog_pos`` (``domain-server-seq``), MySQL in the
  ``Executed_Gtid_Set`` column (``uuid:1-n``).
* MariaDB shows REPLICATION CLIENT as ``BINLOG MONITOR`` (10.5+).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import pymysql

from binlog.mysql.positions import BinlogOffset
from cdc.model.errors import BinlogNotConfigured, BinlogPurged, ConfigError, MissingPrivilege

Flavor = Literal["mysql", "mariadb"]

ER_PARSE_ERROR = 1064
ER_SPECIFIC_ACCESS_DENIED = 1227
MAX_SERVER_ID = 2**32 - 1
SERVER_ID_KEY = "source.server_id"

_GRANT_ON_ALL = re.compile(r"^GRANT (?P<privs>.+?) ON \*\.\* TO ", re.IGNORECASE)
_ROLE_GRANT = re.compile(r"^GRANT (?P<roles>`[^`]+`(?:@`[^`]*`)?(?:\s*,\s*`[^`]+`(?:@`[^`]*`)?)*) TO ")
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")

REPLICATION_SLAVE = "REPLICATION SLAVE"
REPLICATION_CLIENT = "REPLICATION CLIENT"
# A privilege is held when SHOW GRANTS lists any of these on *.*.
_IMPLIED_BY = {
    REPLICATION_SLAVE: {"REPLICATION SLAVE", "ALL PRIVILEGES", "ALL"},
    REPLICATION_CLIENT: {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER", "ALL PRIVILEGES", "ALL"},
}
_NEEDED_FOR = {
    REPLICATION_SLAVE: "reading the binlog stream",
    REPLICATION_CLIENT: "SHOW MASTER STATUS and SHOW BINARY LOGS (MariaDB 10.5+ calls it "
    "BINLOG MONITOR)",
}

# The server settings CDC needs, in the order they are checked.
_VARIABLES = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
              "binlog_row_value_options", "binlog_transaction_compression")


@dataclass(frozen=True)
class ServerIdRange:
    """The replica server ids CDC may use (config ``source.server_id``: ``5400`` or ``5400-5404``).

    Every binlog reader that runs at the same time needs its own id: the server drops a replica
    connection when another one registers with the same id. Ids must also differ from the ids of
    the source server and of every real replica.

    Attributes:
        first: the lowest id.
        last: the highest id (== first for a single id).
    """

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last <= MAX_SERVER_ID:
            raise ConfigError(
                f"{SERVER_ID_KEY}: {self.first}-{self.last} is not a valid server id range; "
                f"ids lie in 1..{MAX_SERVER_ID} and the range must not run backwards",
                key=SERVER_ID_KEY, value=f"{self.first}-{self.last}",
            )

    @classmethod
    def parse(cls, value: str | int) -> ServerIdRange:
        """Parse ``5400``, ``"5400"`` or ``"5400-5404"``.

        Raises:
            ConfigError: the value is not a number or a ``low-high`` range of valid ids.
        """
        m = _RANGE.match(str(value))
        if not m or isinstance(value, bool):
            raise ConfigError(
                f"{SERVER_ID_KEY}: {value!r} is not a server id; write one id like '5400' or a "
                "range like '5400-5404' (one id per binlog reader that runs at the same time)",
                key=SERVER_ID_KEY, value=str(value),
            )
        first = int(m.group(1))
        return cls(first, int(m.group(2)) if m.group(2) else first)

    @property
    def ids(self) -> range:
        return range(self.first, self.last + 1)

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, server_id: object) -> bool:
        return isinstance(server_id, int) and self.first <= server_id <= self.last

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


@dataclass(frozen=True)
class ServerInfo:
    """What kind of server answers: flavor, version, and its own server id."""

    flavor: Flavor
    version: tuple[int, ...]
    server_id: int


def flavor(conn: Any) -> Flavor:
    """``mariadb`` or ``mysql``, from the handshake's version string (no query)."""
    return "mariadb" if "mariadb" in conn.get_server_info().lower() else "mysql"


def server_info(conn: Any) -> ServerInfo:
    """The server's flavor, version and ``@@server_id``."""
    text = conn.get_server_info()
    kind = flavor(conn)
    if kind == "mariadb" and text.startswith("5.5.5-"):
        text = text[len("5.5.5-"):]  # MariaDB's compatibility prefix
    version = tuple(int(x) for x in re.findall(r"\d+", text.split("-")[0])[:3])
    return ServerInfo(kind, version, int(_scalar(conn, "SELECT @@server_id")))


def check_server(conn: Any, server_ids: ServerIdRange | None = None) -> ServerInfo:
    """Check up front that the server and the user can serve CDC.

    Args:
        conn: a pymysql connection as the CDC user.
        server_ids: the configured reader ids; they must not include the server's own id.

    Raises:
        BinlogNotConfigured: binlog off, not ROW, not FULL image or metadata, partial JSON or
            compressed transactions.
        MissingPrivilege: the user lacks REPLICATION SLAVE or REPLICATION CLIENT.
        ConfigError: ``source.server_id`` includes the server's own id.
    """
    info = server_info(conn)
    _check_variables(conn, _server_variables(conn))
    held = _global_privileges(conn)
    for privilege in (REPLICATION_SLAVE, REPLICATION_CLIENT):
        if not held & _IMPLIED_BY[privilege]:
            raise missing_privilege(conn, privilege)
    if server_ids is not None and info.server_id in server_ids:
        raise ConfigError(
            f"{SERVER_ID_KEY}: {server_ids} includes {info.server_id}, the id of the source "
            f"server itself; pick ids no server or replica uses",
            key=SERVER_ID_KEY, value=str(server_ids),
        )
    return info


def current_offset(conn: Any) -> BinlogOffset:
    """The binlog position after the last written transaction, with its GTID set.

    Raises:
        BinlogNotConfigured: binary logging is off.
        MissingPrivilege: the user lacks REPLICATION CLIENT (BINLOG MONITOR).
    """
    server = server_identity(conn)
    if flavor(conn) == "mysql":
        row = _binary_log_status(conn)
        gtid = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else None
        return BinlogOffset(str(row[0]), int(row[1]), gtid, server)
    for _ in range(3):
        # Both reads of @@gtid_binlog_pos agree when no transaction was written between them,
        # so the position belongs to exactly that GTID state.
        before = _scalar(conn, "SELECT @@GLOBAL.gtid_binlog_pos")
        row = _binary_log_status(conn, "SHOW MASTER STATUS")
        if before == _scalar(conn, "SELECT @@GLOBAL.gtid_binlog_pos"):
            return BinlogOffset(str(row[0]), int(row[1]), before or None, server)
    gtid = _scalar(conn, "SELECT BINLOG_GTID_POS(%s, %s)", (row[0], row[1]))
    return BinlogOffset(str(row[0]), int(row[1]), gtid or None, server)


def server_identity(conn: Any) -> str:
    """The identity of the server whose binlog positions ``conn`` reads: MySQL's
    ``@@server_uuid``, MariaDB's ``@@server_id`` (unique within a replication topology).
    Asked each time: a connection that reconnects (``ping``) may reach another server behind
    the same address after a failover."""
    sql = "SELECT @@server_id" if flavor(conn) == "mariadb" else "SELECT @@server_uuid"
    return str(_scalar(conn, sql))


def require_gtids(conn: Any, key: str) -> None:
    """Check that the server records GTIDs (MySQL: ``gtid_mode=ON``; MariaDB always does).

    Args:
        conn: a connection to the server.
        key: the config key that asked for a GTID (named in the error).

    Raises:
        BinlogNotConfigured: MySQL with ``gtid_mode`` other than ON.
    """
    if flavor(conn) == "mariadb":
        return
    mode = str(_scalar(conn, "SELECT @@GLOBAL.gtid_mode") or "OFF").upper()
    if mode != "ON":
        raise BinlogNotConfigured(
            f"{key} needs GTIDs, but gtid_mode is {mode} on {_address(conn)}. Set gtid_mode=ON and "
            "enforce_gtid_consistency=ON under [mysqld] in my.cnf (online: step gtid_mode through "
            "OFF_PERMISSIVE and ON_PERMISSIVE with SET GLOBAL), or start from a file and position",
            variable="gtid_mode", value=mode, expected="ON", address=_address(conn))


def low_watermark(conn: Any) -> BinlogOffset:
    """The low watermark for a snapshot chunk: a position every later SELECT is consistent with.

    ``SHOW MASTER STATUS`` alone is not safe as a low watermark: a transaction is written to the
    binlog before InnoDB commits it, so the reported position can include a transaction that a
    SELECT started right afterwards does not see yet. Its change would then lie before the low
    watermark (never replayed) and be missing from the chunk (never read): lost.

    MariaDB closes the gap: inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, the status
    variables ``Binlog_snapshot_file``/``Binlog_snapshot_position`` give the binlog position that
    matches the InnoDB snapshot exactly. Every transaction at or before it is committed, hence
    visible to any SELECT that starts after this call returns. The transaction is committed
    before returning (it takes no locks). The GTID is left unset (only ``BINLOG_GTID_POS`` could
    map the position to one, by scanning the binlog file; offsets are ordered by file/pos).

    MySQL has no such status variable; there the current position is returned, the same choice
    Flink CDC makes (the window is the few microseconds between binlog write and engine commit).

    Args:
        conn: an autocommit connection that is not inside a transaction (START TRANSACTION
            would commit it).

    Raises:
        BinlogNotConfigured: binary logging is off.
        MissingPrivilege: the user lacks REPLICATION CLIENT (MySQL path).
    """
    if flavor(conn) == "mysql":
        return current_offset(conn)
    server = server_identity(conn)
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): v for k, v in cur.fetchall()}
        finally:
            cur.execute("COMMIT")
    file = status.get("binlog_snapshot_file")
    if not file:
        raise _binlog_off(conn)
    return BinlogOffset(str(file), int(status["binlog_snapshot_position"]), server=server)


def binary_logs(conn: Any) -> list[str]:
    """The binlog files the server still has, oldest first (``SHOW BINARY LOGS``).

    Raises:
        BinlogNotConfigured: binary logging is off.
        MissingPrivilege: the user lacks REPLICATION CLIENT (BINLOG MONITOR).
    """
    return list(binary_log_sizes(conn))


def binary_log_sizes(conn: Any) -> dict[str, int]:
    """Each binlog file the server still has and its size in bytes, oldest first.

    Raises:
        BinlogNotConfigured: binary logging is off.
        MissingPrivilege: the user lacks REPLICATION CLIENT (BINLOG MONITOR).
    """
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            return {str(r[0]): int(r[1]) for r in cur.fetchall()}
    except pymysql.err.OperationalError as exc:
        raise _status_error(conn, exc) from None


def ensure_available(conn: Any, offset: BinlogOffset) -> None:
    """Check that the server still has the binlog file ``offset`` lies in.

    Raises:
        BinlogPurged: the file was purged (expire_logs_days, binlog_expire_logs_seconds, PURGE).
    """
    files = binary_logs(conn)
    if offset.file not in files:
        raise purged(conn, offset, files)


def purged(conn: Any, offset: BinlogOffset, files: list[str]) -> BinlogPurged:
    """The error for a resume position whose binlog file the server no longer has."""
    oldest = files[0] if files else "(none)"
    return BinlogPurged(
        f"binlog position {offset} is gone from {_address(conn)}: the oldest binlog file left "
        f"is {oldest}. The changes in between cannot be read any more; take a new snapshot "
        "(startup_mode=initial with a fresh checkpoint directory), and keep binlogs longer "
        "(binlog_expire_logs_seconds) than the pipeline may stay down",
        offset=str(offset), oldest_file=oldest, address=_address(conn),
    )


def missing_privilege(conn: Any, privilege: str) -> MissingPrivilege:
    """The error for a user that lacks ``privilege``; it names the GRANT to run."""
    account = _current_account(conn)
    return MissingPrivilege(
        f"user {account} on {_address(conn)} lacks {privilege}, needed for "
        f"{_NEEDED_FOR[privilege]}. Run as an admin: GRANT {privilege} ON *.* TO {account};",
        privilege=privilege, account=account, address=_address(conn),
    )


def _check_variables(conn: Any, values: dict[str, str]) -> None:
    """Raise BinlogNotConfigured for the first server setting that does not allow CDC."""
    log_bin = values.get("log_bin", "OFF").upper()
    if log_bin not in ("ON", "1"):
        raise _binlog_off(conn)
    fmt = values.get("binlog_format", "").upper()
    if fmt != "ROW":
        raise _not_configured(
            conn, "binlog_format", fmt, "ROW",
            "row events are the only binlog format that carries the changed rows",
            restart="sessions keep the format they started with, so restart the applications "
                    "that write (or reconnect them)")
    image = values.get("binlog_row_image", "").upper()
    if image != "FULL":
        raise _not_configured(
            conn, "binlog_row_image", image, "FULL",
            "CDC needs complete before and after images of every changed row")
    metadata = values.get("binlog_row_metadata")
    if metadata is None or metadata.upper() != "FULL":
        # Decision: refuse rather than fall back to information_schema. Without FULL metadata,
        # mysql-replication decodes ENUM/SET values as None, reads unsigned integers as signed and
        # decodes every string as UTF-8; typing from information_schema cannot repair that.
        raise _not_configured(
            conn, "binlog_row_metadata", metadata or "(not supported by this server version)",
            "FULL", "rows events must carry column names, signedness, charsets and ENUM/SET "
            "values (MySQL 8.0.14+, MariaDB 10.5+); without them ENUM/SET values and unsigned "
            "integers cannot be decoded correctly, so the reader refuses instead of guessing")
    if "PARTIAL_JSON" in values.get("binlog_row_value_options", "").upper():
        raise _not_configured(
            conn, "binlog_row_value_options", values["binlog_row_value_options"], "''",
            "partial JSON updates log only a diff, not the after image")
    if values.get("binlog_transaction_compression", "OFF").upper() in ("ON", "1"):
        raise _not_configured(
            conn, "binlog_transaction_compression", "ON", "OFF",
            "compressed transaction payloads cannot be decoded by mysql-replication")


def _not_configured(conn: Any, variable: str, value: str, wanted: str, why: str,
                    restart: str = "restart the applications that write") -> BinlogNotConfigured:
    return BinlogNotConfigured(
        f"{variable} is {value} on {_address(conn)}, CDC needs {wanted}: {why}. Set "
        f"{variable}={wanted} under [mysqld] in my.cnf and run SET GLOBAL {variable}='{wanted}' "
        f"as an admin; {restart}",
        variable=variable, value=value, expected=wanted, address=_address(conn),
    )


def _binlog_off(conn: Any) -> BinlogNotConfigured:
    return BinlogNotConfigured(
        f"binary logging is off on {_address(conn)} (log_bin=OFF). Enable it in my.cnf under "
        "[mysqld]: log_bin=mysql-bin, server_id=<unique id>, binlog_format=ROW, "
        "binlog_row_image=FULL, binlog_row_metadata=FULL; then restart the server",
        variable="log_bin", value="OFF", expected="ON", address=_address(conn),
    )


def _server_variables(conn: Any) -> dict[str, str]:
    names = ", ".join(f"'{v}'" for v in _VARIABLES)
    with conn.cursor() as cur:
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        return {str(k).lower(): str(v) for k, v in cur.fetchall()}


def _binary_log_status(conn: Any, statement: str = "SHOW BINARY LOG STATUS") -> tuple[Any, ...]:
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(statement)
            except pymysql.err.ProgrammingError as exc:
                if exc.args[0] != ER_PARSE_ERROR:
                    raise
                cur.execute("SHOW MASTER STATUS")  # before MySQL 8.4
            row = cur.fetchone()
    except pymysql.err.OperationalError as exc:
        raise _status_error(conn, exc) from None
    if not row or not row[0]:
        raise _binlog_off(conn)
    return tuple(row)


def _status_error(conn: Any, exc: pymysql.err.OperationalError) -> Exception:
    if exc.args and exc.args[0] == ER_SPECIFIC_ACCESS_DENIED:
        return missing_privilege(conn, REPLICATION_CLIENT)
    if exc.args and exc.args[0] == 1381:  # ER_NO_BINARY_LOGGING
        return _binlog_off(conn)
    return exc


def _global_privileges(conn: Any) -> set[str]:
    """Privileges granted on ``*.*`` to the current user, directly or through granted roles."""
    held: set[str] = set()
    lines = _grant_lines(conn, "SHOW GRANTS FOR CURRENT_USER()")
    for line in lines:
        m = _GRANT_ON_ALL.match(line)
        if m:
            held |= {p.strip().upper() for p in m.group("privs").split(",")}
            continue
        roles = _ROLE_GRANT.match(line)
        for role in roles.group("roles").split(",") if roles else ():
            for role_line in _grant_lines(conn, f"SHOW GRANTS FOR {role.strip()}", quiet=True):
                if m := _GRANT_ON_ALL.match(role_line):
                    held |= {p.strip().upper() for p in m.group("privs").split(",")}
    return held


def _grant_lines(conn: Any, statement: str, quiet: bool = False) -> list[str]:
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return [str(r[0]) for r in cur.fetchall()]
    except pymysql.err.MySQLError:
        if quiet:
            return []
        raise


def _current_account(conn: Any) -> str:
    user, _, host = str(_scalar(conn, "SELECT CURRENT_USER()")).rpartition("@")
    return f"'{user}'@'{host}'"


def _scalar(conn: Any, sql: str, args: tuple[Any, ...] | None = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    return row[0] if row else None


def _address(conn: Any) -> str:
    return f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"
