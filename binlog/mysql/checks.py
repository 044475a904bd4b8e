"""Every prerequisite of MySQL/MariaDB CDC at once, with the statement that fixes each.

:func:`~binlog.mysql.server.check_server` stops a job at the first problem; ``python -m cdc
validate`` wants the whole list: the CDC user's grants (REPLICATION SLAVE, REPLICATION CLIENT,
SELECT on each table), the binlog settings (``log_bin``, ``binlog_format=ROW``,
``binlog_row_image=FULL``, ``binlog_row_metadata=FULL``) and how long binlogs are kept
(``binlog_expire_logs_seconds``, or MariaDB's ``expire_logs_days``).

Runs on the driver, as the CDC user; reads only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pymysql

from binlog.dialect import SourceFinding, SupportsSourceReport
from binlog.mysql.server import (
    _IMPLIED_BY,
    REPLICATION_CLIENT,
    REPLICATION_SLAVE,
    _current_account,
    _global_privileges,
    _server_variables,
)
from cdc.model.schema import TableId

MIN_RETENTION_S = 3 * 86400  # shorter, and a job stopped over a weekend cannot resume
ADVISED_RETENTION_S = 7 * 86400
_ER_TABLEACCESS_DENIED = 1142

# (variable, value CDC needs, whether SET GLOBAL can change it)
_SETTINGS = (("log_bin", "ON", False), ("binlog_format", "ROW", True), ("binlog_row_image", "FULL", True),
             ("binlog_row_metadata", "FULL", True))


class MySqlSourceReport(SupportsSourceReport):
    """The report half of the MySQL dialect (a mixin of :class:`~binlog.mysql.dialect.MySqlDialect`)."""

    def source_report(self, conn: Any, tables: Sequence[TableId]) -> list[SourceFinding]:
        return [*grant_findings(conn, tables), *setting_findings(conn), retention_finding(conn)]


def grant_findings(conn: Any, tables: Sequence[TableId]) -> list[SourceFinding]:
    """REPLICATION SLAVE and CLIENT on ``*.*``, then SELECT on each table."""
    account = _current_account(conn)
    held = _global_privileges(conn)
    out = []
    for privilege in (REPLICATION_SLAVE, REPLICATION_CLIENT):
        ok = bool(held & _IMPLIED_BY[privilege])
        out.append(SourceFinding(privilege, ok, "granted" if ok else "missing",
                                 "" if ok else f"GRANT {privilege} ON *.* TO {account};"))
    for table in tables:
        ok = _can_select(conn, table)
        out.append(SourceFinding(f"SELECT on {table}", ok, "granted" if ok else "missing",
                                 "" if ok else f"GRANT SELECT ON `{table.db}`.`{table.table}` TO {account};"))
    return out


def _can_select(conn: Any, table: TableId) -> bool:
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM `{table.db}`.`{table.table}` LIMIT 0")
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == _ER_TABLEACCESS_DENIED:
            return False
        raise
    except pymysql.err.ProgrammingError as exc:
        if exc.args and exc.args[0] == _ER_TABLEACCESS_DENIED:
            return False
        raise
    return True


def setting_findings(conn: Any) -> list[SourceFinding]:
    """The binlog settings, each with the SET GLOBAL (and the my.cnf line that keeps it)."""
    values = _server_variables(conn)
    out = []
    for name, wanted, dynamic in _SETTINGS:
        found = values.get(name, "(not supported by this server version)")
        ok = found.upper() in ((wanted, "1") if wanted == "ON" else (wanted,))
        if ok:
            out.append(SourceFinding(name, True, found))
        elif dynamic:
            out.append(SourceFinding(name, False, found, f"SET GLOBAL {name} = '{wanted}'; and in my.cnf "
                                     f"[mysqld]: {name} = {wanted}"))
        else:
            out.append(SourceFinding(name, False, found, "in my.cnf [mysqld]: log_bin = mysql-bin and a "
                                     "server_id, then restart the server"))
    return out


def retention_finding(conn: Any) -> SourceFinding:
    """How long the server keeps binlogs: at least :data:`MIN_RETENTION_S`, or never purged."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                    "('binlog_expire_logs_seconds', 'expire_logs_days')")
        values = {str(k).lower(): str(v) for k, v in cur.fetchall()}
    seconds = int(float(values.get("binlog_expire_logs_seconds", "0") or 0))
    days = float(values.get("expire_logs_days", "0") or 0)
    kept = seconds or int(days * 86400)
    item = "binlog retention"
    if kept == 0:
        return SourceFinding(item, True, "never purged automatically (binlog_expire_logs_seconds = 0)")
    found = f"{kept}s ({kept / 86400:g} days)"
    if kept >= MIN_RETENTION_S:
        return SourceFinding(item, True, found)
    name = "binlog_expire_logs_seconds" if "binlog_expire_logs_seconds" in values else "expire_logs_days"
    value = ADVISED_RETENTION_S if name == "binlog_expire_logs_seconds" else ADVISED_RETENTION_S // 86400
    return SourceFinding(item, False, found, f"SET GLOBAL {name} = {value}; and in my.cnf [mysqld]: "
                         f"{name} = {value} (longer than the job may ever be stopped, or it cannot resume)")
