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


def test_slow_tests_start_longest_first_in_snake_order_at_the_head_of_each_workers_share() -> None:
    from conftest import deal_slow_first

    seconds = {"s1": 10.0, "s2": 400.0, "s3": 50.0, "s4": 300.0, "s5": 20.0}
    slow, fast = ["s1", "s2", "s3", "s4", "s5", "s6"], [f"f{i}" for i in range(8)]
    order = deal_slow_first(slow, fast, 2, seconds)
    assert sorted(order) == sorted(slow + fast)
    # xdist's work stealing gives worker 0 the first len // 2 = 7, worker 1 the rest
    zero, one = order[:7], order[7:]
    # s6 has no time and counts as the median (50 s, after s3): s2 s4 s3 s6 s5 s1, dealt 0 1 1 0 0 1
    assert zero == ["s2", "s6", "s5", "f0", "f1", "f2", "f3"]
    assert one == ["s4", "s3", "s1", "f4", "f5", "f6", "f7"]
    assert deal_slow_first(slow, fast, 3, {})[:2] == ["s1", "s6"]  # no times: collection order, snake
