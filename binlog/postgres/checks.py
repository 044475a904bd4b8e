"""Every prerequisite of PostgreSQL CDC at once, with the statement that fixes each.

The job's start-up checks (:mod:`binlog.postgres.server`) stop at the first problem and create
the publication and the slot; ``python -m cdc validate`` lists them all and creates nothing:
``wal_level = logical``, a free replication slot (``max_replication_slots``), the REPLICATION
role attribute, USAGE and SELECT on each table, and, when the publication does not exist yet,
what creating it takes (CREATE on the database and owning the tables, else the statement for
the tables' owner).

Runs on the driver, as the CDC role; reads only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from binlog.dialect import SourceFinding, SupportsSourceReport
from binlog.postgres.types import quote_ident, sql_table
from cdc.model.schema import TableId


class PostgresSourceReport(SupportsSourceReport):
    """The report half of the Postgres dialect (a mixin of
    :class:`~binlog.postgres.dialect.PostgresDialect`, whose config holds the slot and the
    publication names)."""

    config: Any

    def source_report(self, conn: Any, tables: Sequence[TableId]) -> list[SourceFinding]:
        c = self.config
        return [wal_level_finding(conn), slots_finding(conn, c.slot), role_finding(conn),
                *table_findings(conn, tables),
                publication_finding(conn, c.publication_name, c.database, tables)]


def _user(conn: Any) -> str:
    return str(conn.execute("SELECT current_user").fetchone()[0])


def wal_level_finding(conn: Any) -> SourceFinding:
    (level,) = conn.execute("SHOW wal_level").fetchone()
    ok = level == "logical"
    return SourceFinding("wal_level", ok, str(level),
                         "" if ok else "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")


def slots_finding(conn: Any, slot: str) -> SourceFinding:
    """A slot for the job: its own exists, or one of ``max_replication_slots`` is free."""
    (limit,) = conn.execute("SHOW max_replication_slots").fetchone()
    used, mine = conn.execute("SELECT count(*), count(*) FILTER (WHERE slot_name = %s) FROM pg_replication_slots",
                              (slot,)).fetchone()
    ok = bool(mine) or int(used) < int(limit)
    found = f"{used} of {limit} used" + (f", including {slot!r}" if mine else "")
    return SourceFinding("max_replication_slots", ok, found,
                         "" if ok else f"ALTER SYSTEM SET max_replication_slots = {int(used) + 1}; then restart "
                                       "PostgreSQL (or drop an unused slot: SELECT pg_drop_replication_slot('...');)")


def role_finding(conn: Any) -> SourceFinding:
    user, replication, superuser = conn.execute(
        "SELECT current_user, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    ok = bool(replication or superuser)
    return SourceFinding("REPLICATION role attribute", ok, "granted" if ok else "missing",
                         "" if ok else f"ALTER ROLE {quote_ident(user)} REPLICATION;")


def table_findings(conn: Any, tables: Sequence[TableId]) -> list[SourceFinding]:
    """USAGE on each table's schema and SELECT on the table."""
    user = quote_ident(_user(conn))
    out = []
    for t in tables:
        row = conn.execute(
            "SELECT has_schema_privilege(n.oid, 'USAGE'), has_table_privilege(c.oid, 'SELECT') FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
            (t.db, t.table)).fetchone()
        usage, select = row if row is not None else (False, False)
        if not usage:
            out.append(SourceFinding(f"USAGE on schema {t.db}", False, "missing",
                                     f"GRANT USAGE ON SCHEMA {quote_ident(t.db)} TO {user};"))
        out.append(SourceFinding(f"SELECT on {t}", bool(select), "granted" if select else "missing",
                                 "" if select else f"GRANT SELECT ON {sql_table(t)} TO {user};"))
    return out


def publication_finding(conn: Any, name: str, database: str, tables: Sequence[TableId]) -> SourceFinding:
    """The publication exists, or the role may create it: CREATE on the database, and owner of
    every table (PostgreSQL's rule for ``CREATE PUBLICATION ... FOR TABLE``)."""
    item = f"publication {name!r}"
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone():
        return SourceFinding(item, True, "exists")
    listed = ", ".join(sql_table(t) for t in tables)
    not_owned = [t for t in tables if not conn.execute(
        "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s", (t.db, t.table)).fetchone()[0]]
    if not_owned:
        return SourceFinding(item, False, f"absent, and the role does not own {', '.join(map(str, not_owned))}",
                             f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE {listed}; (as the tables' owner "
                             "or a superuser)")
    (create,) = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()
    if create:
        return SourceFinding(item, True, "absent; the job creates it")
    return SourceFinding(f"CREATE on database {database} (for {item})", False, "missing",
                         f"GRANT CREATE ON DATABASE {quote_ident(database)} TO {quote_ident(_user(conn))};")
