"""The test harness itself: the server is configured for CDC and the CDC user is least-privilege."""

from __future__ import annotations

import contextlib

import pymysql
import pytest

from cdc.app.sandbox.mysql import Sandbox


def _global(conn: pymysql.connections.Connection, name: str) -> str:
    with conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        return str(cur.fetchone()[0])


def test_server_is_configured_for_cdc(mysql_server: Sandbox) -> None:
    with contextlib.closing(mysql_server.cdc.connect()) as conn:
        assert _global(conn, "log_bin") == "1"
        assert _global(conn, "binlog_format") == "ROW"
        assert _global(conn, "binlog_row_image") == "FULL"
        assert _global(conn, "binlog_row_metadata") == "FULL"
        assert int(_global(conn, "server_id")) > 0
        if mysql_server.flavor == "mysql":
            assert _global(conn, "gtid_mode") == "ON"
        else:  # MariaDB always writes GTID events; the domain/server ids make them unique
            assert _global(conn, "gtid_domain_id") == "0"


def test_cdc_user_has_only_the_pipeline_privileges(mysql_server: Sandbox) -> None:
    with contextlib.closing(mysql_server.cdc.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        grants = " ".join(str(r[0]) for r in cur.fetchall()).upper()
    assert "SELECT" in grants and "REPLICATION SLAVE" in grants
    assert "REPLICATION CLIENT" in grants or "BINLOG MONITOR" in grants
    for forbidden in ("RELOAD", "LOCK TABLES", "ALL PRIVILEGES", "SUPER", "INSERT"):
        assert forbidden not in grants, forbidden


def test_cdc_user_cannot_lock_or_flush(mysql_server: Sandbox, database: str, admin: pymysql.connections.Connection) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with contextlib.closing(mysql_server.cdc.connect(database)) as conn, conn.cursor() as cur:
        with pytest.raises(pymysql.err.OperationalError):
            cur.execute("FLUSH TABLES WITH READ LOCK")
        with pytest.raises(pymysql.err.OperationalError):
            cur.execute("LOCK TABLES t READ")


def test_each_test_gets_its_own_empty_database(database: str, admin: pymysql.connections.Connection) -> None:
    with admin.cursor() as cur:
        cur.execute("SELECT DATABASE()")
        assert cur.fetchone()[0] == database
        cur.execute("SHOW TABLES")
        assert cur.fetchall() == ()
