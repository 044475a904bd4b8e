"""The MySQL/MariaDB bounded binlog reader against a real server.

DML runs through the ``admin`` fixture; reading runs as the least-privilege CDC user.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import pickle
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from binlog.mysql.convert import set_members, value_converter
from binlog.mysql.positions import BinlogOffset
from binlog.mysql.reader import (
    BinlogReaderOptions,
    InvalidBinlogPosition,
    MySqlBinlogReader,
    SchemaChanged,
    ServerIdRange,
    check_server,
    current_offset,
    low_watermark,
)
from binlog.mysql.types import load_table_schema, mysql_column, quoted_table
from cdc.app.sandbox.mysql import Endpoint, MariaDbSandbox, Sandbox
from cdc.model.errors import BinlogNotConfigured, BinlogPurged, ConfigError, MissingPrivilege
from cdc.model.events import ChangeEvent
from cdc.model.schema import Column, TableId

Conn = pymysql.connections.Connection
ReaderFactory = Callable[..., MySqlBinlogReader]


def run(admin: Conn, *statements: str) -> None:
    with admin.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def summary(events: list[ChangeEvent]) -> list[tuple[str, str, Any, Any]]:
    return [(e.table_id.table, e.op, e.before, e.after) for e in events]


def create_abc(admin: Conn) -> None:
    for t in ("a", "b", "c"):
        run(admin, f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(20)) DEFAULT CHARSET=utf8mb4")


# ---- reading slices -------------------------------------------------------------------------


def test_reads_exactly_the_changes_of_selected_tables(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory, database: str) -> None:
    create_abc(admin)
    start = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x'), (2, 'y'), (3, 'z')",
        "INSERT INTO c VALUES (1, 'ignored')",
        "INSERT INTO b VALUES (10, 'p')",
        "UPDATE a SET v = CONCAT(v, '!') WHERE id <= 2",
        "DELETE FROM b WHERE id = 10",
        "BEGIN", "INSERT INTO b VALUES (11, 'q')", "UPDATE c SET v = 'no'",
        "DELETE FROM a WHERE id = 3", "UPDATE b SET v = 'r' WHERE id = 11", "COMMIT")
    end = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (99, 'after end')")

    events = list(reader("a", "b").read(start, end))

    assert summary(events) == [
        ("a", "c", None, {"id": 1, "v": "x"}),
        ("a", "c", None, {"id": 2, "v": "y"}),
        ("a", "c", None, {"id": 3, "v": "z"}),
        ("b", "c", None, {"id": 10, "v": "p"}),
        ("a", "u", {"id": 1, "v": "x"}, {"id": 1, "v": "x!"}),
        ("a", "u", {"id": 2, "v": "y"}, {"id": 2, "v": "y!"}),
        ("b", "d", {"id": 10, "v": "p"}, None),
        ("b", "c", None, {"id": 11, "v": "q"}),
        ("a", "d", {"id": 3, "v": "z"}, None),
        ("b", "u", {"id": 11, "v": "q"}, {"id": 11, "v": "r"}),
    ]
    keys = [e.position.sort_key() for e in events if e.position]
    assert keys == sorted(keys) and len(set(keys)) == len(keys) == len(events)
    assert [e.position.row for e in events[:3] if e.position] == [0, 1, 2]
    assert all(e.position and e.position.in_slice(start, end) for e in events)
    assert all(e.table_id.db == database and e.source["server_id"] == 1 for e in events)
    assert abs(events[0].ts_ms / 1000 - time.time()) < 60
    # one GTID per transaction; the last three changes share the multi-statement transaction's
    gtids = [e.source["gtid"] for e in events]
    assert all(g and g.startswith("0-1-") for g in gtids)
    assert len(set(gtids[:3])) == 1 and len(set(gtids[7:])) == 1
    assert len({gtids[0], gtids[3], gtids[4], gtids[6], gtids[7]}) == 5
    assert events[0].source["query"] == "INSERT INTO a VALUES (1, 'x'), (2, 'y'), (3, 'z')"
    assert events[-1].source["query"] == "UPDATE b SET v = 'r' WHERE id = 11"


def test_adjacent_slices_add_up_to_the_whole(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    a = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x'), (2, 'y')", "UPDATE a SET v = 'w' WHERE id = 1")
    b = current_offset(cdc_conn)
    run(admin, "BEGIN", "INSERT INTO a VALUES (3, 'z')", "DELETE FROM a WHERE id = 2", "COMMIT",
        "FLUSH BINARY LOGS", "UPDATE a SET v = 'u'")
    c = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (4, 'after')")

    whole = list(reader("a").read(a, c))
    split = reader("a")
    first, second = list(split.read(a, b)), list(split.read(b, c))

    assert [(e.position, e.op, e.before, e.after) for e in first + second] == \
           [(e.position, e.op, e.before, e.after) for e in whole]
    assert len(first) == 3 and len(second) == 4
    assert second[-1].position and second[-1].position.file == c.file != a.file  # crossed a rotation
    assert split.stream_opens == 1  # the second slice continued on the first one's connection


def test_a_slice_a_little_ahead_is_reached_by_reading_forward(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    a = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x')")
    b = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (2, 'skipped')", "UPDATE b SET v = 'other table' WHERE id = 11")
    c = current_offset(cdc_conn)
    run(admin, "UPDATE a SET v = 'y' WHERE id = 1")
    d = current_offset(cdc_conn)

    r = reader("a")
    first, second = list(r.read(a, b)), list(r.read(c, d))

    assert [(e.op, e.after) for e in first] == [("c", {"id": 1, "v": "x"})]
    assert [(e.op, e.after) for e in second] == [("u", {"id": 1, "v": "y"})]  # nothing of (b, c]
    assert r.stream_opens == 1  # (b, c] was read and discarded on the same connection


def test_stops_at_end_without_waiting_and_empty_slice(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    start = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x')")
    end = current_offset(cdc_conn)
    r = reader("a")

    began = time.monotonic()
    assert [e.after for e in r.read(start, end)] == [{"id": 1, "v": "x"}]  # end is the binlog end
    assert time.monotonic() - began < 5
    assert list(r.read(end, end)) == []
    run(admin, "INSERT INTO a VALUES (2, 'y')")
    assert list(r.read(start, start)) == []
    assert [e.after for e in r.read(start, end)] == [{"id": 1, "v": "x"}]
    with pytest.raises(ValueError, match="before its start"):
        r.read(end, start)
    with pytest.raises(ValueError, match="not configured"):
        r.read(start, end, [TableId("other", "t")])


def test_an_end_the_server_has_not_written_yet_is_awaited_then_refused(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    start = current_offset(cdc_conn)
    just_after = BinlogOffset(start.file, start.pos + 1)  # inside the next transaction
    r = reader("a", end_wait_timeout=0.5)
    began = time.monotonic()
    with pytest.raises(InvalidBinlogPosition, match="did not grow to it within"):
        list(r.read(start, just_after))
    assert 0.5 <= time.monotonic() - began < 5

    writer = threading.Timer(0.3, run, (admin, "INSERT INTO a VALUES (1, 'x')"))
    writer.start()
    waiting = reader("a", end_wait_timeout=10)
    assert list(waiting.read(start, just_after)) == []  # returns once the binlog passes the end
    writer.join()
    assert waiting.stream_opens > 1


def test_breaking_off_a_slice_then_reading_again(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    start = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x'), (2, 'y')", "INSERT INTO b VALUES (1, 'x')")
    end = current_offset(cdc_conn)
    r = reader("a", "b")

    first = next(iter(r.read(start, end)))
    assert first.after == {"id": 1, "v": "x"}
    assert [e.table_id.table for e in r.read(start, end)] == ["a", "a", "b"]
    assert [e.table_id.table for e in r.read(start, end, [TableId(first.table_id.db, "b")])] == ["b"]


def test_a_continued_stream_serves_tables_the_previous_slice_skipped(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory, database: str) -> None:
    create_abc(admin)
    a = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x')", "INSERT INTO b VALUES (1, 'x')")
    b = current_offset(cdc_conn)
    run(admin, "INSERT INTO b VALUES (2, 'y')", "INSERT INTO a VALUES (2, 'y')")
    c = current_offset(cdc_conn)
    run(admin, "INSERT INTO c VALUES (1, 'later')")  # so the stream does not end at c
    r = reader("a", "b")

    assert [e.after for e in r.read(a, b, [TableId(database, "a")])] == [{"id": 1, "v": "x"}]
    assert [e.after for e in r.read(b, c, [TableId(database, "b")])] == [{"id": 2, "v": "y"}]
    assert r.stream_opens == 1


def test_a_type_change_between_slices_retypes_the_values(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    run(admin, "CREATE TABLE t (id INT PRIMARY KEY, f INT)")
    a = current_offset(cdc_conn)
    run(admin, "INSERT INTO t VALUES (1, 1)")
    b = current_offset(cdc_conn)
    run(admin, "ALTER TABLE t MODIFY f VARCHAR(10)", "INSERT INTO t VALUES (2, '1')")
    c = current_offset(cdc_conn)
    r = reader("t")

    assert [e.after for e in r.read(a, b)] == [{"id": 1, "f": 1}]
    [event] = r.read(b, c)
    assert event.after == {"id": 2, "f": "1"}  # typed by the new definition


def test_schema_change_inside_a_slice_is_refused(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    start = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x')", "ALTER TABLE a ADD COLUMN w INT",
        "INSERT INTO a VALUES (2, 'y', 3)")
    end = current_offset(cdc_conn)

    with pytest.raises(SchemaChanged, match=r"have columns \['id', 'v'\].*DDL") as info:
        list(reader("a").read(start, end))
    assert pickle.loads(pickle.dumps(info.value)).context["position"].startswith("mysql-bin.")
    after_ddl = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (3, 'z', 4)")
    [event] = reader("a").read(after_ddl, current_offset(cdc_conn))
    assert event.after == {"id": 3, "v": "z", "w": 4}


# ---- typed values ---------------------------------------------------------------------------

TYPES_DDL = """
CREATE TABLE typed (
  id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, flag TINYINT(1), si SMALLINT,
  su SMALLINT UNSIGNED, mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT,
  bu BIGINT UNSIGNED, de DECIMAL(12, 4), dw DECIMAL(65, 30), f FLOAT, d DOUBLE, dt DATE,
  dtm DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL, ts0 TIMESTAMP NULL, tm TIME(6), tm0 TIME,
  y YEAR, c CHAR(5), vc VARCHAR(50), l1 VARCHAR(10) CHARACTER SET latin1, bn BINARY(4),
  vb VARBINARY(10), bl BLOB, tx TEXT, e ENUM('x', 'y'), s SET('a', 'b', 'c'), j JSON, bt BIT(10),
  b64 BIT(64), ip INET6, uu UUID
) DEFAULT CHARSET=utf8mb4
"""
TYPED_ROW = """
INSERT INTO typed VALUES (1, -128, 255, 1, -32768, 65535, -8388608, 16777215, -2147483648,
  4294967295, -9223372036854775808, 18446744073709551615, -12345678.1234,
  -12345678901234567890123456789012345.123456789012345678901234567890, 1.1, 2.2, '2024-02-29',
  '2024-02-29 23:59:59.123456', '1000-01-01 00:00:00', '2038-01-19 03:14:07.999999',
  '1970-01-01 00:00:01', '-838:59:59.000000', '-01:02:03', 1901, 'ä€', '日本語🙂', 'café',
  x'6162', x'00ff', x'deadbeef', 'naïve', 'y', 'c,a', '{"k": [1, 2.5, "x"]}', b'1010000001',
  b'1111111111111111111111111111111111111111111111111111111111111111', '::ffff:1.2.3.4',
  '123e4567-e89b-12d3-a456-426655440000')
"""
TYPED_UPDATE = """
UPDATE typed SET flag = 0, tm = '-00:00:00.500000', y = 2155, s = '', e = 'x', ts = NULL,
  bt = b'1', j = '[]', tm0 = '12:00:01', dw = 0, de = 0.5, vc = '', bn = x'61', ip = '::1'
"""


def expected_from_select(conn: Conn, schema_conn: Conn, table: TableId) -> list[dict[str, Any]]:
    """What pymysql's SELECT returns (session time zone UTC), made comparable to our typing."""
    schema = load_table_schema(schema_conn, table)
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {quoted_table(table)} ORDER BY id")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    for row in rows:
        for col in schema.columns:
            v = row[col.name]
            if v is None:
                continue
            if col.data_type == "timestamp":
                row[col.name] = v.replace(tzinfo=dt.timezone.utc)
            elif col.data_type == "float":
                row[col.name] = _f32(v)
            elif col.data_type == "decimal" and (col.precision or 0) > 38:
                row[col.name] = format(v, "f")
    return rows


def _f32(v: float) -> float:
    return float(struct.unpack("f", struct.pack("f", v))[0])


def check_typed_round_trip(admin: Conn, cdc: Endpoint, make: ReaderFactory,
                           db: str) -> list[ChangeEvent]:
    run(admin, TYPES_DDL)
    with contextlib.closing(cdc.connect()) as conn:
        start = current_offset(conn)
        run(admin, TYPED_ROW)
        inserted = expected_from_select(conn, conn, TableId(db, "typed"))
        run(admin, TYPED_UPDATE, "SET SESSION sql_mode = ''",  # allow the invalid ENUM value ''
            "INSERT INTO typed (id, y, s, e) VALUES (2, 0, '', '')")
        updated = expected_from_select(conn, conn, TableId(db, "typed"))
        end = current_offset(conn)
    events = list(make("typed").read(start, end))
    assert [e.op for e in events] == ["c", "u", "c"]
    for e in events:
        for image in (e.before, e.after):
            if image and image["f"] is not None:
                image["f"] = _f32(image["f"])
    assert events[0].after == inserted[0]
    assert events[1].before == inserted[0]
    assert events[1].after == updated[0]
    assert events[2].after == updated[1]
    return events


def test_values_are_typed_like_a_select(admin: Conn, cdc_endpoint: Endpoint,
                                        reader: ReaderFactory, database: str) -> None:
    events = check_typed_round_trip(admin, cdc_endpoint, reader, database)
    after = events[0].after
    assert after is not None
    assert after["flag"] == 1 and after["bu"] == 2**64 - 1 and after["y"] == 1901
    assert after["ts"] == dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=dt.timezone.utc)
    assert after["tm"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert after["s"] == "a,c" and after["bt"] == b"\x02\x81" and after["bn"] == b"ab\x00\x00"
    assert after["ip"] == "::ffff:1.2.3.4"
    assert events[1].after and events[1].after["tm"] == -dt.timedelta(microseconds=500000)
    assert events[2].after and (events[2].after["y"], events[2].after["s"]) == (0, "")


def test_timestamps_are_utc_whatever_the_server_and_local_time_zone(
        india_server: Sandbox, reader: ReaderFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "EST+05")  # this process's local time: UTC-5 (POSIX notation)
    time.tzset()
    db = india_server.create_database()

    def make(*tables: str) -> MySqlBinlogReader:
        return reader(*tables, endpoint=india_server.cdc, db=db)

    try:
        with contextlib.closing(india_server.admin.connect(db)) as admin:
            check_typed_round_trip(admin, india_server.cdc, make, db)
        # written in the server's own zone: 10:00 at +05:30 is 04:30 UTC
        with contextlib.closing(india_server.admin.connect(db, init_command="SET @x = 1")) as local:
            start = current_offset(local)
            run(local, "UPDATE typed SET ts = '2020-01-01 10:00:00' WHERE id = 2")
            [event] = make("typed").read(start, current_offset(local))
        assert event.after and event.after["ts"] == dt.datetime(2020, 1, 1, 4, 30, tzinfo=dt.timezone.utc)
    finally:
        india_server.drop_database(db)
        monkeypatch.delenv("TZ")
        time.tzset()


# ---- positions and watermarks ---------------------------------------------------------------


def test_current_offset_and_low_watermark(admin: Conn, cdc_conn: Conn) -> None:
    create_abc(admin)
    before = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x')")
    after = current_offset(cdc_conn)
    with cdc_conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        assert (after.gtid,) == cur.fetchone()
    assert before.is_before(after) and before.gtid != after.gtid
    lw = low_watermark(cdc_conn)
    assert lw.file == after.file and lw.pos == after.pos
    assert check_server(cdc_conn).flavor == "mariadb"


# ---- errors ---------------------------------------------------------------------------------


def test_statement_format_is_refused() -> None:
    box = MariaDbSandbox(extra_args=["--binlog-format=STATEMENT"]).start()
    try:
        with contextlib.closing(box.cdc.connect()) as conn, \
                pytest.raises(BinlogNotConfigured, match="binlog_format is STATEMENT") as info:
            check_server(conn)
        assert "binlog_format=ROW" in str(info.value) and "restart" in str(info.value)
        assert info.value.context["variable"] == "binlog_format"
    finally:
        box.stop()


def test_binlog_off_is_refused_everywhere() -> None:
    box = MariaDbSandbox(extra_args=["--skip-log-bin"]).start()
    try:
        with contextlib.closing(box.cdc.connect()) as conn:
            for call in (check_server, current_offset, low_watermark):
                with pytest.raises(BinlogNotConfigured, match=r"binary logging is off.*log_bin="):
                    call(conn)
    finally:
        box.stop()


@contextlib.contextmanager
def global_setting(admin: Conn, variable: str, value: str) -> Iterator[None]:
    with admin.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{variable}")
        (old,) = cur.fetchone() or (None,)
        cur.execute(f"SET GLOBAL {variable} = %s", (value,))
    try:
        yield
    finally:
        with admin.cursor() as cur:
            cur.execute(f"SET GLOBAL {variable} = %s", (old,))


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("binlog_row_image", "MINIMAL", "lack columns"),
    ("binlog_row_metadata", "MINIMAL", "has no column names"),
])
def test_rows_without_full_image_or_metadata_are_refused(
        mysql_server: Sandbox, admin: Conn, cdc_conn: Conn, reader: ReaderFactory,
        database: str, variable: str, value: str, message: str) -> None:
    create_abc(admin)
    start = current_offset(cdc_conn)
    with global_setting(admin, variable, value):
        with pytest.raises(BinlogNotConfigured, match=f"{variable} is {value}.*needs FULL"):
            check_server(cdc_conn)
        with contextlib.closing(mysql_server.admin.connect(database)) as writer:  # new session
            run(writer, "INSERT INTO a VALUES (1, 'x')", "UPDATE a SET v = 'y'")
    end = current_offset(cdc_conn)
    with pytest.raises(BinlogNotConfigured, match=message):
        list(reader("a").read(start, end))


def test_missing_replication_privileges_name_the_grant(
        admin: Conn, cdc_endpoint: Endpoint, reader: ReaderFactory) -> None:
    create_abc(admin)
    run(admin, "CREATE USER IF NOT EXISTS 'noslave'@'%' IDENTIFIED BY 'pw'",
        "GRANT SELECT, REPLICATION CLIENT ON *.* TO 'noslave'@'%'",
        "CREATE USER IF NOT EXISTS 'noclient'@'%' IDENTIFIED BY 'pw'",
        "GRANT SELECT, REPLICATION SLAVE ON *.* TO 'noclient'@'%'")
    try:
        noslave = replace(cdc_endpoint, user="noslave", password="pw")
        with contextlib.closing(noslave.connect()) as conn:
            with pytest.raises(MissingPrivilege,
                               match=r"GRANT REPLICATION SLAVE ON \*\.\* TO 'noslave'@'%'"):
                check_server(conn)
            start = current_offset(conn)
        run(admin, "INSERT INTO a VALUES (1, 'x')")
        with contextlib.closing(noslave.connect()) as conn:
            end = current_offset(conn)
        # the server itself refuses the binlog dump when the up-front check is skipped
        with pytest.raises(MissingPrivilege, match="REPLICATION SLAVE"):
            list(reader("a", endpoint=noslave, check_server=False).read(start, end))
        with contextlib.closing(replace(cdc_endpoint, user="noclient", password="pw").connect()) as conn:
            with pytest.raises(MissingPrivilege,
                               match=r"GRANT REPLICATION CLIENT ON \*\.\* TO 'noclient'@'%'"):
                check_server(conn)
            with pytest.raises(MissingPrivilege, match="REPLICATION CLIENT"):
                current_offset(conn)
    finally:
        run(admin, "DROP USER IF EXISTS 'noslave'@'%'", "DROP USER IF EXISTS 'noclient'@'%'")


def test_privileges_through_a_role_or_all_privileges_count(
        mysql_server: Sandbox, admin: Conn, cdc_endpoint: Endpoint) -> None:
    run(admin, "CREATE ROLE IF NOT EXISTS cdc_role",
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO cdc_role",
        "CREATE USER IF NOT EXISTS 'viarole'@'%' IDENTIFIED BY 'pw'",
        "GRANT SELECT ON *.* TO 'viarole'@'%'", "GRANT cdc_role TO 'viarole'@'%'",
        "SET DEFAULT ROLE cdc_role FOR 'viarole'@'%'")
    try:
        with contextlib.closing(replace(cdc_endpoint, user="viarole", password="pw").connect()) as conn:
            assert check_server(conn).flavor == "mariadb"
        with contextlib.closing(mysql_server.admin.connect()) as root:  # ALL PRIVILEGES
            check_server(root)
    finally:
        run(admin, "DROP USER IF EXISTS 'viarole'@'%'", "DROP ROLE IF EXISTS cdc_role")


def test_purged_start_asks_for_a_new_snapshot(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    create_abc(admin)
    old = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x')", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    newest = current_offset(cdc_conn)
    purge_until(admin, newest.file)

    with pytest.raises(BinlogPurged) as info:
        list(reader("a").read(old, newest))
    text = str(info.value)
    assert str(old) in text and f"oldest binlog file left is {newest.file}" in text
    assert "startup_mode=initial" in text and info.value.context["oldest_file"] == newest.file


def purge_until(admin: Conn, newest: str) -> None:
    """PURGE BINARY LOGS TO ``newest``, retrying until MariaDB's binlog checkpoint allows it."""
    deadline = time.monotonic() + 10
    while True:
        run(admin, f"PURGE BINARY LOGS TO '{newest}'")
        with admin.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            if [r[0] for r in cur.fetchall()] == [newest] or time.monotonic() > deadline:
                return
        time.sleep(0.1)


# ---- server ids -----------------------------------------------------------------------------


def test_server_id_range_parsing() -> None:
    assert list(ServerIdRange.parse("5400").ids) == [5400]
    assert list(ServerIdRange.parse(" 5400-5402 ").ids) == [5400, 5401, 5402]
    assert len(ServerIdRange.parse(7)) == 1 and 5401 in ServerIdRange.parse("5400-5401")
    assert str(ServerIdRange.parse("5400-5402")) == "5400-5402"
    for bad in ("abc", "5404-5400", "0", "4294967296", "1-2-3", ""):
        with pytest.raises(ConfigError, match=r"source\.server_id") as info:
            ServerIdRange.parse(bad)
        assert pickle.loads(pickle.dumps(info.value)).context["key"] == "source.server_id"
    config = BinlogReaderOptions(Endpoint("h", 1, "u", "p"), 5400, (TableId("d", "t"),))
    assert pickle.loads(pickle.dumps(config)) == config  # shipped to executors
    with pytest.raises(ConfigError, match=r"source\.server_id"):
        BinlogReaderOptions(Endpoint("h", 1, "u", "p"), 0, (TableId("d", "t"),))


def test_server_id_range_must_not_include_the_servers_own_id(cdc_conn: Conn) -> None:
    with pytest.raises(ConfigError, match="id of the source server"):
        check_server(cdc_conn, ServerIdRange.parse("1-3"))
    assert check_server(cdc_conn, ServerIdRange.parse("5400-5404")).server_id == 1


def fill_big(admin: Conn, transactions: int = 4, rows: int = 1000) -> None:
    """Several MB of binlog: more than the socket buffers hold, so a paused reader's dump thread
    on the server stays busy (blocked writing) instead of finishing early."""
    run(admin, "CREATE TABLE big (id INT PRIMARY KEY, pad TEXT)")
    for t in range(transactions):
        run(admin, "INSERT INTO big VALUES " + ", ".join(
            f"({t * rows + i}, REPEAT('x', 4000))" for i in range(rows)))


def test_lost_connection_mid_transaction_resumes_without_loss_or_duplicates(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    start = current_offset(cdc_conn)
    fill_big(admin)
    end = current_offset(cdc_conn)
    r = reader("big")
    changes = r.read(start, end)
    first = next(changes)  # the server's dump thread is now blocked inside the first transaction
    with admin.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'")
        [(dump_thread,)] = cur.fetchall()
        cur.execute(f"KILL {dump_thread}")
    events = [first, *changes]

    assert r.reconnects == 1
    assert sorted(e.after["id"] for e in events if e.after) == list(range(4000))
    keys = [e.position.sort_key() for e in events if e.position]
    assert keys == sorted(set(keys)) and len(keys) == 4000
    assert len({e.source["gtid"] for e in events}) == 4


def test_readers_with_different_ids_run_concurrently(
        admin: Conn, cdc_conn: Conn, reader: ReaderFactory) -> None:
    start = current_offset(cdc_conn)
    fill_big(admin)
    end = current_offset(cdc_conn)
    readers = [reader("big", server_id=i) for i in ServerIdRange.parse("5490-5491").ids]
    barrier = threading.Barrier(len(readers))
    results: list[Any] = [None] * len(readers)

    def work(n: int) -> None:
        try:
            barrier.wait()
            results[n] = [sum(1 for _ in readers[n].read(start, end)) for _ in range(2)]
        except Exception as exc:  # reported below
            results[n] = exc

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(readers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [[4000, 4000]] * 2
    # with one id for both, the server drops the older connection and they resume in turn
    assert [r.reconnects for r in readers] == [0, 0]


# ---- value conversion (no server) -----------------------------------------------------------


def test_value_converters_for_special_columns() -> None:
    def col(data_type: str, column_type: str, **kw: Any) -> Column:
        return mysql_column("c", data_type, column_type, True, **kw)

    assert set_members("set('a','it''s','c')") == ("a", "it's", "c")
    to_set = value_converter(col("set", "set('a','it''s','c')"))
    assert to_set and to_set({"c", "a"}) == "a,c" and to_set({"it's"}) == "it's"
    bits = value_converter(col("bit", "bit(12)"))
    assert bits and bits("000100000001") == b"\x01\x01"
    assert value_converter(col("int", "int(11)")) is None  # already typed by the library
    assert value_converter(col("tinyint", "tinyint(1)")) is None  # an integer, not a flag: 2 stays 2
    wide = value_converter(col("decimal", "decimal(65,30)", precision=65, scale=30))
    assert wide and wide(Decimal("0E-30")) == "0.000000000000000000000000000000"
    mysql_json = value_converter(col("json", "json"))
    assert mysql_json and mysql_json({b"k": [1, b"x", None]}) == '{"k": [1, "x", null]}'
    ucs2 = value_converter(col("varchar", "varchar(5)", charset="ucs2"))
    assert ucs2 and ucs2("é".encode("utf-16-be")) == "é"


def test_set_and_enum_members_keep_their_case(admin: Conn, cdc_conn: Conn, reader: ReaderFactory,
                                              database: str) -> None:
    run(admin, "CREATE TABLE cased (id INT PRIMARY KEY, s SET('Apple','b','Kiwi'), e ENUM('Red','g'))")
    start = current_offset(cdc_conn)
    run(admin, "INSERT INTO cased VALUES (1, 'Apple,b', 'Red'), (2, 'Kiwi', 'g'), (3, '', NULL)")
    schema = load_table_schema(cdc_conn, TableId(database, "cased"))
    assert schema.column("s").column_type == "set('Apple','b','Kiwi')"
    rows = [e.after for e in reader("cased").read(start, current_offset(cdc_conn))]
    assert rows == [{"id": 1, "s": "Apple,b", "e": "Red"}, {"id": 2, "s": "Kiwi", "e": "g"},
                    {"id": 3, "s": "", "e": None}]
