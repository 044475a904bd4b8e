"""Every prerequisite of MySQL/MariaDB CDC at once, with the statement that fixes each.

:func:`~binlog.mysql.server.check_server` stops a job at the first problem; ``python -m cdc
validate`` wants the whole list: the CDC user's grants (REPLICATION SLAVE, REPLICATION CLIENT,
SELECT on each table), the binlog settings (``log_bin``, ``binlog_format=ROW``,
``binlog_row_image=FULL``, ``binlog_row_metadata=FULL``) and how long binlogs are kept
(``binlog_expire_logs_seconds``, or MariaDB's ``expire_logs_days``), GTIDs (what a restart on a
promoted replica resumes by, docs/operating/failover.md), and on a replica ``log_slave_updates``
(without it the replica's binlog lacks every replicated change).

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
    _scalar,
    _server_variables,
    flavor,
)
from cdc.model.schema import TableId

MIN_RETENTION_S = 3 * 86400  # shorter, and a job stopped over a weekend cannot resume
ADVISED_RETENTION_S = 7 * 86400
_ER_TABLEACCESS_DENIED = 1142
_ER_SPECIFIC_ACCESS_DENIED = 1227

# (variable, value CDC needs, whether SET GLOBAL can change it)
_SETTINGS = (("log_bin", "ON", False), ("binlog_format", "ROW", True), ("binlog_row_image", "FULL", True),
             ("binlog_row_metadata", "FULL", True))


class MySqlSourceReport(SupportsSourceReport):
    """The report half of the MySQL dialect (a mixin of :class:`~binlog.mysql.dialect.MySqlDialect`)."""

    mysql: Any  # the dialect's MySqlSourceConfig

    def source_report(self, conn: Any, tables: Sequence[TableId]) -> list[SourceFinding]:
        offset = self.mysql.startup_offset if self.mysql.startup_mode == "specific-offset" else None
        needs_gtid = offset is not None and offset.gtid is not None
        return [*grant_findings(conn, tables), *setting_findings(conn), retention_finding(conn),
                gtid_finding(conn, needs_gtid), replica_finding(conn)]


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


def gtid_finding(conn: Any, required: bool) -> SourceFinding:
    """Whether the server records GTIDs, which offsets carry so that a restart on a promoted replica
    resumes where file/pos differ (``run --failover``). MariaDB always does; MySQL with
    ``gtid_mode=ON``. Missing only when the job starts from a GTID set (``startup_offset.gtid``);
    otherwise the finding says what is given up."""
    item = "GTIDs"
    if flavor(conn) == "mariadb":
        pos = _scalar(conn, "SELECT @@GLOBAL.gtid_binlog_pos")
        return SourceFinding(item, True, f"recorded (gtid_binlog_pos = {pos or '(none yet)'})")
    mode = str(_scalar(conn, "SELECT @@GLOBAL.gtid_mode") or "OFF").upper()
    if mode == "ON":
        return SourceFinding(item, True, "recorded (gtid_mode = ON)")
    if not required:
        return SourceFinding(item, True, f"gtid_mode = {mode}: offsets hold file/pos only, so a restart "
                             "on a promoted replica cannot resume (set gtid_mode = ON for that)")
    return SourceFinding(item, False, f"gtid_mode = {mode}, but source.startup_offset.gtid needs GTIDs",
                         "in my.cnf [mysqld]: gtid_mode = ON and enforce_gtid_consistency = ON, then restart "
                         "(online: SET GLOBAL enforce_gtid_consistency = ON; then step gtid_mode through "
                         "OFF_PERMISSIVE, ON_PERMISSIVE, ON)")


def replica_finding(conn: Any) -> SourceFinding:
    """On a replica, ``log_slave_updates`` (MySQL 8.0.26+: ``log_replica_updates``) must be ON: the
    replicated transactions are then in its own binlog, which is what the job reads.

    Whether the server is a replica: ``SHOW REPLICA STATUS`` when the user may run it (MariaDB
    wants SLAVE MONITOR, which the CDC user need not hold), else MariaDB's ``gtid_slave_pos`` (set
    once the server applied a replicated transaction)."""
    item = "replica binlog"
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_slave_updates', 'log_replica_updates')")
        values = {str(k).lower(): str(v).upper() for k, v in cur.fetchall()}
    name = "log_replica_updates" if "log_replica_updates" in values else "log_slave_updates"
    if values.get(name) in ("ON", "1"):
        return SourceFinding(item, True, f"{name} = ON")
    replica = _is_replica(conn)
    if replica is None:
        return SourceFinding(item, True, f"{name} = {values.get(name, 'OFF')}; if this server is a replica it "
                             f"needs {name} = ON (SHOW REPLICA STATUS is not allowed to this user)")
    if not replica:
        return SourceFinding(item, True, "not a replica")
    return SourceFinding(item, False, f"a replica with {name} = {values.get(name, 'OFF')}: its binlog lacks "
                         "the replicated changes", f"in my.cnf [mysqld]: {name} = ON, then restart the replica")


def _is_replica(conn: Any) -> bool | None:
    """Whether the server replicates from another (None: cannot tell)."""
    for statement in ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS"):
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return cur.fetchone() is not None
        except pymysql.err.ProgrammingError:  # not known to this version: try the older name
            continue
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == _ER_SPECIFIC_ACCESS_DENIED:
                break
            raise
    if flavor(conn) == "mariadb":
        return bool(_scalar(conn, "SELECT @@GLOBAL.gtid_slave_pos"))
    return None
