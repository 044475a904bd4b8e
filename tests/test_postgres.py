"""The Postgres dialect against a real PostgreSQL: every type identical through the snapshot
(COPY) and the stream (pgoutput), replica identity DEFAULT and FULL, unchanged TOAST values,
truncate, the slot's release, and the start-up errors with the fix they name."""

from __future__ import annotations

import contextlib
import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from postgres_server import pg_dialect

from binlog.postgres.dialect import PostgresDialect
from binlog.postgres.pgoutput import UNCHANGED, Begin, Commit, Relation, RowChange, decode
from binlog.postgres.positions import LsnOffset
from binlog.postgres.server import SlotInUse, borrowed, copy_out, slot_info
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.errors import (
    AuthenticationFailed,
    BinlogNotConfigured,
    ConfigError,
    MissingPrivilege,
    NoChunkKey,
    SourceUnreachable,
)
from cdc.model.schema import TableId
from chunking.chunks import SnapshotSplit

UTC = dt.timezone.utc

TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE types (
  id int PRIMARY KEY, i2 smallint, i8 bigint, num numeric(12,3), num_free numeric, r real, d double precision,
  b boolean, t text, vc varchar(10), ch char(4), by bytea, dt date, tm time, ttz timetz, ts timestamp(6),
  tstz timestamptz, iv interval, u uuid, j json, jb jsonb, ia int[], ta text[], e mood, ip inet, net cidr, m money
)"""

TYPE_ROWS = [
    "(1, -32768, 9223372036854775807, -123456789.125, 'NaN', 1.5, 'NaN', true, 'hé \"q\" ,x', 'abc', 'ab', "
    "'\\x00ff10', '2024-02-29', '23:59:59.999999', '12:34:56.5+02', '2024-01-02 03:04:05.678901', "
    "'2024-01-02 03:04:05.5+05:30', '1 year 2 mons 3 days 04:05:06.5', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
    "'{\"a\": [1, 2]}', '{\"b\": null}', '{1,NULL,3}', '{\"x y\",NULL,\"q\\\"z\",\"\"}', 'happy', '192.168.0.1/24', "
    "'10.0.0.0/8', '-1234.5')",
    "(2, NULL, NULL, NULL, '1.0000000000000000000000000000000000000000001', '-Infinity', 1e300, false, '', NULL, NULL, "
    "'', '0001-01-01', '00:00:00', NULL, 'infinity', NULL, '-1 day', NULL, NULL, NULL, '{}', '{}', NULL, '::1', NULL, 0)",
    "(3, " + ", ".join(["NULL"] * 26) + ")",
]


def _nan(row: Any) -> Any:
    return {k: "NaN" if isinstance(v, float) and v != v else v for k, v in row.items()}


def _offset(d: PostgresDialect) -> LsnOffset:
    with contextlib.closing(d.connect()) as conn:
        return d.current_offset(conn)


def _start(d: PostgresDialect) -> None:
    with contextlib.closing(d.connect()) as conn:
        d.check_source(conn)


def _schema(d: PostgresDialect, table: str) -> Any:
    with contextlib.closing(d.connect()) as conn:
        return d.table_schema(conn, TableId("public", table))


def _whole(schema: Any) -> SnapshotSplit:
    return SnapshotSplit(schema.table_id, 0, schema.primary_key[0], None, None)


@pytest.fixture
def dialect(postgres_server: PostgresSandbox, pg_database: str) -> PostgresDialect:
    return pg_dialect(postgres_server, pg_database)


def _snapshot_and_stream(d: PostgresDialect, pg_admin: Any, table: str, rows: list[str]
                         ) -> tuple[dict[Any, dict[str, Any]], list[dict[str, Any]], list[Any]]:
    """``rows`` inserted into ``table`` after the stream's start: the snapshot's rows by id (one
    chunk read of the whole table), the stream's change rows, and its events."""
    _start(d)
    start = _offset(d)
    pg_admin.execute(f"INSERT INTO {table} VALUES " + ", ".join(rows))
    end = _offset(d)
    schema = _schema(d, table)
    _, snap = d.read_chunk(schema, _whole(schema))
    with d.log_reader(0, [schema]) as reader:
        streamed = [r for b in reader.change_rows(start, end) for r in b.rows.to_pylist()]
        events = list(reader.changes(start, end))
    return {r["id"]: r for r in snap.to_pylist()}, streamed, events


def test_every_type_is_the_same_through_the_snapshot_and_the_stream(dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute(TYPES_DDL)
    by_id, streamed, events = _snapshot_and_stream(dialect, pg_admin, "types", TYPE_ROWS)
    assert len(streamed) == 3 and all(r["op"] == "c" for r in streamed)
    for r in streamed:
        assert _nan(r["after"]) == _nan(by_id[r["after"]["id"]]), r["after"]["id"]
    assert [_nan(e.after) for e in events] == [_nan(r["after"]) for r in streamed]
    one = by_id[1]
    assert one["i8"] == 2**63 - 1 and one["num"] == Decimal("-123456789.125") and one["num_free"] == "NaN"
    assert one["r"] == 1.5 and one["d"] != one["d"] and one["b"] is True and one["t"] == 'hé "q" ,x'
    assert one["ch"] == "ab  " and one["by"] == b"\x00\xff\x10" and one["dt"] == dt.date(2024, 2, 29)
    assert one["tm"] == dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999)
    assert one["ttz"] == "10:34:56.5Z"
    assert one["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678901)
    assert one["tstz"] == dt.datetime(2024, 1, 1, 21, 34, 5, 500000, tzinfo=UTC)
    assert one["iv"] == "P1Y2M3DT4H5M6.5S" and one["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert one["j"] == '{"a": [1, 2]}' and one["jb"] == '{"b": null}'
    assert one["ia"] == [1, None, 3] and one["ta"] == ["x y", None, 'q"z', ""]
    assert one["e"] == "happy" and one["ip"] == "192.168.0.1/24" and one["net"] == "10.0.0.0/8"
    assert one["m"] == Decimal("-1234.50")
    two = by_id[2]
    assert two["t"] == "" and two["by"] == b"" and two["ts"] is None and two["r"] == float("-inf")
    assert two["num_free"] == "1.0000000000000000000000000000000000000000001" and two["ia"] == [] and two["m"] == 0
    assert all(v is None for k, v in by_id[3].items() if k != "id")
    types = {c.name: c.arrow for c in _schema(dialect, "types").columns}
    assert types["num"] == pa.decimal128(12, 3) and types["tstz"] == pa.timestamp("us", tz="UTC")
    assert types["ia"] == pa.list_(pa.int32()) and types["tm"] == pa.duration("us") and types["m"] == pa.decimal128(19, 2)


EDGE_DDL = """
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE hue AS ENUM ('red', 'green');
CREATE TABLE edges (
  id int PRIMARY KEY, o oid, dm posint, n40 numeric(40,2), nm name, c1 "char", ts3 timestamp(3), x xml,
  fa real[], ba bool[], ha hue[], ua uuid[], tsa timestamp[], ipa inet[], dt date, tm time, ts timestamp,
  tstz timestamptz, mac macaddr
)"""

EDGE_ROWS = [
    "(1, 4294967295, 7, 1.25, 'nm', 'x', '2024-01-02 03:04:05.1', '<a>x</a>', '{1.5,NaN,-Infinity}', '{t,f,NULL}', "
    "'{green,red}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '{\"2024-01-01 00:00:00\",infinity}', '{::1,10.0.0.1/8}', "
    "'0044-03-15 BC', '24:00:00', '10000-01-01 00:00:00', '9999-12-31 23:59:59.999999+00', '08:00:2b:01:02:03')",
    "(2, 0, NULL, -0.01, '', NULL, '-infinity', NULL, '{}', '{}', '{}', '{}', '{}', '{}', 'infinity', "
    "'00:00:00.000001', '4713-01-01 00:00:00 BC', '-infinity', NULL)",
    "(3, " + ", ".join(["NULL"] * 18) + ")",
]


def test_chunk_reads_of_edge_values_and_types_created_later_equal_the_stream(dialect: PostgresDialect,
                                                                             pg_admin: Any) -> None:
    """The binary COPY's values equal the stream's text ones at the edges (years outside 1-9999
    and infinities null, ``24:00:00``, NaN in arrays, oids past 2^31, ``inet``'s own text form),
    also for a domain and an enum created after the executor's chunk session was opened."""
    pg_admin.execute("CREATE TABLE first (id int PRIMARY KEY)")
    pg_admin.execute("INSERT INTO first VALUES (1)")
    assert dialect.read_chunk(_schema(dialect, "first"), _whole(_schema(dialect, "first")))[1].num_rows == 1
    pg_admin.execute(EDGE_DDL)
    by_id, changes, _ = _snapshot_and_stream(dialect, pg_admin, "edges", EDGE_ROWS)
    streamed = {r["after"]["id"]: r["after"] for r in changes}
    assert sorted(streamed) == sorted(by_id) == [1, 2, 3]
    for key, row in by_id.items():
        assert _nan_deep(row) == _nan_deep(streamed[key]), key
    one, two = by_id[1], by_id[2]
    assert one["o"] == 4294967295 and one["dm"] == 7 and one["ha"] == ["green", "red"] and one["c1"] == "x"
    assert one["ipa"] == ["::1", "10.0.0.1/8"] and one["tsa"] == [dt.datetime(2024, 1, 1), None]
    assert one["dt"] is None and one["ts"] is None and one["tm"] == dt.timedelta(days=1)
    assert one["tstz"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert two["dt"] is None and two["ts"] is None and two["tstz"] is None and two["ts3"] is None
    assert two["tm"] == dt.timedelta(microseconds=1) and two["n40"] == "-0.01"


def _nan_deep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _nan_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_deep(v) for v in value]
    return "NaN" if isinstance(value, float) and value != value else value


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_replica_identity_decides_the_before_image(identity: str, dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
    pg_admin.execute(f"ALTER TABLE t REPLICA IDENTITY {identity}")
    pg_admin.execute("INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 2)")
    _start(dialect)
    start = _offset(dialect)
    pg_admin.execute("UPDATE t SET v = 'x' WHERE id = 1")
    pg_admin.execute("UPDATE t SET id = 3 WHERE id = 2")
    pg_admin.execute("DELETE FROM t WHERE id = 1")
    end = _offset(dialect)
    with dialect.log_reader(0, [_schema(dialect, "t")]) as reader:
        events = [(e.op, e.before, e.after) for e in reader.changes(start, end)]
    full = identity == "FULL"
    assert events == [
        ("u", {"id": 1, "v": "a" if full else None, "n": 1 if full else None}, {"id": 1, "v": "x", "n": 1}),
        ("u", {"id": 2, "v": "b" if full else None, "n": 2 if full else None}, {"id": 3, "v": "b", "n": 2}),
        ("d", {"id": 1, "v": "x" if full else None, "n": 1 if full else None}, None),
    ]


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_an_unchanged_toast_value_is_never_null(identity: str, dialect: PostgresDialect, pg_admin: Any) -> None:
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(300_000))  # incompressible enough to be TOASTed
    pg_admin.execute("CREATE TABLE doc (id int PRIMARY KEY, body text, n int)")
    pg_admin.execute("ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL")
    pg_admin.execute(f"ALTER TABLE doc REPLICA IDENTITY {identity}")
    pg_admin.execute("INSERT INTO doc VALUES (1, %s, 0)", (big,))
    _start(dialect)
    start = _offset(dialect)
    pg_admin.execute("UPDATE doc SET n = 1 WHERE id = 1")  # body unchanged: pgoutput sends 'u'
    end = _offset(dialect)
    schema = _schema(dialect, "doc")
    with contextlib.closing(dialect.connect()) as conn:
        raw = conn.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', "
                           "'1', 'publication_names', 'spark_cdc')", (dialect.postgres.slot,)).fetchall()
    updates = [m for (data,) in raw for m in [decode(data)] if isinstance(m, RowChange) and m.op == "u"]
    assert updates and updates[0].new is not None and updates[0].new[1] is UNCHANGED, "the 'u' path is exercised"
    with dialect.log_reader(0, [schema]) as reader:
        rows = [r for b in reader.change_rows(start, end) for r in b.rows.to_pylist()]
    assert [(r["op"], r["after"]["n"], r["after"]["body"] == big) for r in rows] == [("u", 1, True)]


def test_truncate_is_skipped_and_later_changes_flow(dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg_admin.execute("INSERT INTO t VALUES (1, 'a')")
    _start(dialect)
    start = _offset(dialect)
    pg_admin.execute("TRUNCATE t")
    pg_admin.execute("INSERT INTO t VALUES (2, 'b')")
    end = _offset(dialect)
    with dialect.log_reader(0, [_schema(dialect, "t")]) as reader:
        assert [(e.op, e.after) for e in reader.changes(start, end)] == [("c", {"id": 2, "v": "b"})]


def test_pgoutput_messages_decode(dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    _start(dialect)
    pg_admin.execute("INSERT INTO t VALUES (1, NULL)")
    with contextlib.closing(dialect.connect()) as conn:
        raw = conn.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', "
                           "'1', 'publication_names', 'spark_cdc')", (dialect.postgres.slot,)).fetchall()
    msgs = [decode(d) for (d,) in raw]
    assert [type(m) for m in msgs] == [Begin, Relation, RowChange, Commit]
    rel, change, commit = msgs[1], msgs[2], msgs[3]
    assert isinstance(rel, Relation) and (rel.namespace, rel.name, rel.columns, rel.key) == ("public", "t", ("id", "v"), (True, False))
    assert isinstance(change, RowChange) and change.new == ("1", None)
    assert isinstance(commit, Commit) and commit.end_lsn > commit.commit_lsn


def test_the_slot_advances_only_when_released(dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY)")
    _start(dialect)
    with contextlib.closing(dialect.connect()) as conn:
        before = slot_info(conn, dialect.postgres.slot)
        pg_admin.execute("INSERT INTO t VALUES (1)")
        end = dialect.current_offset(conn)
        with dialect.log_reader(0, [_schema(dialect, "t")]) as reader:
            assert len(list(reader.changes(before.confirmed, end))) == 1  # type: ignore[union-attr]
        assert slot_info(conn, dialect.postgres.slot) == before, "reading does not consume"
        dialect.release(conn, end)
        dialect.release(conn, before.confirmed)  # type: ignore[union-attr]  # never backwards
        after = slot_info(conn, dialect.postgres.slot)
    assert after is not None and after.confirmed == end


# ---------------------------------------------------------------- start-up errors


def _check(d: PostgresDialect) -> None:
    with contextlib.closing(d.connect()) as conn:
        d.check_source(conn)


def test_wal_level_not_logical_names_alter_system() -> None:
    from cdc.app.sandbox.postgres import start_postgres

    box = start_postgres(settings={"wal_level": "replica"})  # a server not configured for CDC
    try:
        database = box.create_database()
        box.admin.connect(database).execute("CREATE TABLE t (id int PRIMARY KEY)")
        with pytest.raises(BinlogNotConfigured, match=r"ALTER SYSTEM SET wal_level = logical"):
            _check(pg_dialect(box, database))
    finally:
        box.stop()


def test_missing_replication_and_select_name_the_grants(postgres_server: PostgresSandbox, pg_database: str,
                                                      pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_admin.execute("CREATE ROLE weak LOGIN PASSWORD 'weak'")
    pg_admin.execute("CREATE ROLE noselect LOGIN REPLICATION PASSWORD 'ns'")
    try:
        base = postgres_server.cdc
        weak = pg_dialect(postgres_server, pg_database, username="weak", password="weak")
        with pytest.raises(MissingPrivilege, match=r'ALTER ROLE "weak" REPLICATION;'):
            _check(weak)
        pg_admin.execute("REVOKE SELECT ON t FROM PUBLIC")
        ns = pg_dialect(postgres_server, pg_database, username="noselect", password="ns")
        with pytest.raises(MissingPrivilege, match=r'GRANT SELECT ON "public"."t" TO "noselect";'):
            _check(ns)
        assert base.user == "cdc"
    finally:
        pg_admin.execute("DROP OWNED BY weak, noselect")
        pg_admin.execute("DROP ROLE weak")
        pg_admin.execute("DROP ROLE noselect")


def test_a_slot_held_by_a_walsender_is_refused(dialect: PostgresDialect, pg_admin: Any,
                                              postgres_server: PostgresSandbox) -> None:
    import subprocess

    from cdc.app.sandbox.postgres import binaries

    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY)")
    _start(dialect)
    a = postgres_server.admin
    recv = binaries() / "pg_recvlogical"
    proc = subprocess.Popen([str(recv), "-h", a.host, "-p", str(a.port), "-U", a.user, "-d", dialect.postgres.database,
                             "-S", dialect.postgres.slot, "--start", "-f", "/dev/null", "-o", "proto_version=1",
                             "-o", "publication_names=spark_cdc", "-s", "1"],
                            env={"PGPASSWORD": a.password, "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with contextlib.closing(dialect.connect()) as conn:
            for _ in range(600):  # until the walsender holds the slot (pg_recvlogical connects)
                info = slot_info(conn, dialect.postgres.slot)
                if info is not None and info.active_pid is not None:
                    break
                conn.execute("SELECT pg_sleep(0.05)")
        # refused at once, not after source.slot_wait_s (the CDC role cannot see the walsender's
        # backend_type in pg_stat_activity: the check asks pg_stat_get_wal_senders())
        with pytest.raises(SlotInUse, match=r"active for another consumer, pid \d+, a walsender "
                                            r"\(a streaming replication client: pg_recvlogical.*pg_terminate_backend"):
            _check(dialect)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_publication_missing_a_table_names_alter_publication(postgres_server: PostgresSandbox, pg_database: str,
                                                               pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE a (id int PRIMARY KEY)")
    pg_admin.execute("CREATE TABLE b (id int PRIMARY KEY)")
    pg_admin.execute("CREATE PUBLICATION only_a FOR TABLE a")
    d = pg_dialect(postgres_server, pg_database, publication_name="only_a")
    with pytest.raises(MissingPrivilege, match=r'ALTER PUBLICATION "only_a" ADD TABLE "public"."b";'):
        _check(d)
    with pytest.raises(MissingPrivilege, match=r'CREATE PUBLICATION "nope" FOR TABLE "public"."a", "public"."b";'):
        _check(pg_dialect(postgres_server, pg_database, publication_name="nope"))


def test_a_table_without_key_needs_a_chunk_key_column(dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE nokey (a int, b text)")
    with pytest.raises(NoChunkKey, match=r'chunk_key_columns: \{"public.nokey": "<column>"\}'):
        dialect.chunk_key(_schema(dialect, "nokey"))
    keyed = pg_dialect_with(dialect, {"public.nokey": "a"})
    assert keyed.chunk_key(_schema(keyed, "nokey")).name == "a"


def pg_dialect_with(d: PostgresDialect, chunk_keys: dict[str, str]) -> PostgresDialect:
    return PostgresDialect(d.postgres.model_copy(update={"chunk_key_columns": chunk_keys}))


def test_wrong_password_and_unreachable_host(postgres_server: PostgresSandbox, pg_database: str) -> None:
    with pytest.raises(AuthenticationFailed, match=r"refused role 'cdc'.*source.password"):
        pg_dialect(postgres_server, pg_database, password="wrong").connect()
    from cdc.app.sandbox.mysql import free_port

    with pytest.raises(SourceUnreachable, match=r"(?s)cannot reach PostgreSQL at 127.0.0.1:\d+.*source.hostname"):
        pg_dialect(postgres_server, pg_database, port=free_port()).connect()
    with pytest.raises(ConfigError, match=r"source.database: 'nope' does not exist"):
        pg_dialect(postgres_server, "nope").connect()


def test_chunk_reads_reuse_one_session_and_replace_a_dead_one(dialect: PostgresDialect, pg_admin: Any) -> None:
    """An executor reads chunk after chunk on one server session (a new session forks a backend
    and authenticates: 20 ms a chunk); a session the server ended is replaced, not an error, and
    one that saw an error or left a transaction open is not kept."""
    pg_admin.execute("CREATE TABLE c (id int PRIMARY KEY, v text)")
    pg_admin.execute("INSERT INTO c SELECT g, 'v' || g FROM generate_series(1, 100) g")
    schema = _schema(dialect, "c")
    halves = [SnapshotSplit(schema.table_id, 0, "id", None, 50), SnapshotSplit(schema.table_id, 1, "id", 50, None)]

    def backend() -> int:
        with borrowed(dialect.settings) as conn:
            return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

    first = backend()
    assert [dialect.read_chunk(schema, split)[1].num_rows for split in halves] == [49, 51]
    assert backend() == first, "each chunk read opened a session of its own"

    pg_admin.execute("SELECT pg_terminate_backend(%s)", (first,))  # a DBA, or a server restart
    assert sum(dialect.read_chunk(schema, split)[1].num_rows for split in halves) == 100
    second = backend()
    assert second != first

    with pytest.raises(ZeroDivisionError), borrowed(dialect.settings):
        raise ZeroDivisionError  # the work failed, on the executor's side
    third = backend()
    assert third != second, "a session that saw an error was kept"
    with borrowed(dialect.settings) as conn:
        conn.autocommit = False
        conn.execute("SELECT 1")  # a transaction left open
    assert backend() != third


def test_copy_out_reads_every_byte_and_leaves_the_session_idle(dialect: PostgresDialect) -> None:
    """A chunk's COPY read through libpq (:func:`copy_out`) gives the bytes psycopg's own COPY
    iteration gives, long rows included; a COPY the server ends with an error, before or after
    its first rows, raises psycopg's error class and leaves the session idle and usable."""
    query = ("COPY (SELECT g, repeat(md5(g::text), CASE WHEN g % 1000 = 0 THEN 40000 ELSE 1 END), "
             "CASE WHEN g % 7 = 0 THEN NULL ELSE 'a,\"b\"\n' || g END FROM generate_series(1, 30000) g) "
             "TO STDOUT WITH (FORMAT csv)")
    with borrowed(dialect.settings) as conn:
        expected = bytearray()
        with conn.cursor() as cur, cur.copy(query) as copy:
            for data in copy:
                expected += data
        got = copy_out(conn, query)
        assert len(got) > 38_000_000 and got == bytes(expected)

        late = "COPY (SELECT CASE WHEN g < 20000 THEN g ELSE 1 / (g - g) END FROM generate_series(1, 30000) g) TO STDOUT"
        for statement, error in ((late, psycopg.errors.DivisionByZero),
                                 ("COPY (SELECT x FROM nope) TO STDOUT", psycopg.errors.UndefinedTable)):
            with pytest.raises(error):
                copy_out(conn, statement)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert conn.execute("SELECT 42").fetchone() == (42,)
