"""``read_event_rows`` + ``event_rows_envelope`` against ``read`` + ``change_envelope``, on a real server.

The column-wise path (numba kernels into Arrow) must give exactly the change rows the per-row path
gives, for every column type, NULLs, multi-row events, primary-key updates and tables that only the
per-row path decodes; and it must keep the reader's slice semantics (adjacent slices, end, resume
after a killed connection while rows are held in a batch).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numba
import pymysql
import pytest
import test_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_binlog_mysql import TYPED_ROW, TYPED_UPDATE, TYPES_DDL, create_abc, run

from binlog.mysql import rows_kernels
from binlog.mysql.change_rows import event_rows_envelope
from binlog.mysql.event_rows import EventRows
from binlog.mysql.positions import BinlogOffset, byte_cuts
from binlog.mysql.reader import MySqlBinlogReader, current_offset
from binlog.mysql.server import binary_log_sizes
from binlog.mysql.types import load_table_schema
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.tpcds import customer_ddl
from cdc.model.envelope import change_envelope, split_key_changes
from cdc.model.schema import TableId

Conn = pymysql.connections.Connection


def assert_same_changes(r: MySqlBinlogReader, conn: Conn, start: BinlogOffset,
                        end: BinlogOffset) -> dict[TableId, list[EventRows]]:
    """Both paths over (start, end] give identical change rows per table; the blocks by table."""
    events = list(r.read(start, end))
    blocks = list(r.read_event_rows(start, end))
    assert [(e.table_id, *e.position) for e in events if e.position] == [
        (b.table_id, b.file, b.pos, b.first_row + i) for b in blocks for i in range(b.num_rows)]
    by_table: dict[TableId, list[EventRows]] = {}
    for table in r.config.tables:
        schema = load_table_schema(conn, table)
        mine = [e for e in events if e.table_id == table]
        old = change_envelope(schema, split_key_changes(mine, schema.primary_key), name="t")
        by_table[table] = [b for b in blocks if b.table_id == table]
        new = event_rows_envelope(schema, by_table[table], name="t")
        assert new.schema == old.schema
        assert new.to_pylist() == old.to_pylist()
        assert new.equals(old)
    return by_table


def unlisted_signatures() -> dict[str, list[Any]]:
    """Per kernel that Python calls (no leading ``_``), its compiled argument types that
    ``rows_kernels.ENTRY_SIGNATURES`` does not list."""
    kernels = {name: d for name, d in vars(rows_kernels).items()
               if isinstance(d, numba.core.dispatcher.Dispatcher) and not name.startswith("_")}
    return {name: [s for s in d.signatures if s not in rows_kernels.ENTRY_SIGNATURES.get(d, ())]
            for name, d in kernels.items()}


@pytest.fixture(autouse=True)
def kernels_are_called_with_their_listed_types() -> Iterator[None]:
    """The executors' daemon loads each kernel for the types ``ENTRY_SIGNATURES`` lists, before
    it forks the workers (``rows_kernels.load``): decoding must call no kernel with other types,
    which every worker would then load or compile for itself."""
    yield
    unlisted = unlisted_signatures()
    assert not any(unlisted.values()), unlisted


def test_loading_the_kernels_compiles_every_listed_signature() -> None:
    rows_kernels.load()
    for kernel, signatures in rows_kernels.ENTRY_SIGNATURES.items():
        assert set(signatures) <= set(kernel.signatures), kernel.__name__


def fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "decoded row by row" in r.getMessage()]


# ---- the same change rows as the per-row path ------------------------------------------------


def test_every_column_type_and_a_per_row_table(
        mysql_server: Sandbox, admin: Conn, cdc_conn: Conn, reader: Any, database: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="binlog.mysql.columnar")
    start = current_offset(cdc_conn)
    test_types.populate(mysql_server, database)  # every type, edge values, NULLs
    test_types.touch_every_row(mysql_server, database)  # multi-row update events
    run(admin, TYPES_DDL, TYPED_ROW, TYPED_UPDATE,  # INET6/UUID: decoded row by row
        "UPDATE every_type SET id = id + 100 WHERE id IN (2, 5)",  # key changes: d + c
        "BEGIN", "DELETE FROM every_type WHERE id IN (3, 4)", "UPDATE typed SET flag = 7",
        "COMMIT")
    end = current_offset(cdc_conn)

    blocks = assert_same_changes(reader("every_type", "typed"), cdc_conn, start, end)

    every, typed = (blocks[TableId(database, t)] for t in ("every_type", "typed"))
    # row 1 (a 210 kB MEDIUMTEXT) fills a rows event of its own
    assert [(b.op, b.num_rows) for b in every] == [("c", 1)] * 7 + [
        ("u", 1), ("u", 6), ("u", 2), ("d", 2)]
    assert [b.op for b in typed] == ["c", "u", "u"]
    assert [m for m in fallbacks(caplog) if "every_type" in m] == []
    assert [m.split(":")[0] for m in fallbacks(caplog)] == [f"rows of {database}.typed are "
                                                            "decoded row by row"]
    first = every[8]
    assert first.before is not None and first.after is not None
    assert first.to_events()[0].after == first.after.to_pylist()[0]


def test_wide_multi_row_events_with_nulls_key_changes_and_two_tables(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    run(admin, customer_ddl(), "CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(20))")
    start = current_offset(cdc_conn)
    # a short statement: every change row carries it (source.query)
    run(admin, "INSERT INTO customer SELECT seq, CONCAT('AAAA', LPAD(seq, 12, '0')), "
        "IF(seq % 3, NULL, seq), seq % 7, NULL, seq, -seq, 'Mr.', CONCAT('Émile', seq), "
        "CONCAT('Zoë🙂', seq), IF(seq % 2, 'Y', 'N'), seq % 28 + 1, seq % 12 + 1, 1970, "
        "IF(seq % 5, CONCAT('land ', seq), NULL), NULL, CONCAT('e', seq, '@x.org'), seq "
        "FROM seq_1_to_2000",  # ~100 rows events
        "UPDATE customer SET c_last_review_date_sk = c_last_review_date_sk + 1, "
        "c_birth_country = NULL WHERE c_customer_sk % 2 = 0",
        "BEGIN", "INSERT INTO other VALUES (1, 'a')",
        "UPDATE customer SET c_customer_sk = c_customer_sk + 5000 WHERE c_customer_sk < 40",
        "INSERT INTO other VALUES (2, 'b')", "UPDATE other SET v = 'c'",
        "DELETE FROM customer WHERE c_customer_sk BETWEEN 100 AND 900", "COMMIT")
    end = current_offset(cdc_conn)

    blocks = assert_same_changes(reader("customer", "other"), cdc_conn, start, end)

    customer = blocks[TableId(database, "customer")]
    assert len(customer) > 50 and sum(b.num_rows for b in customer) == 2000 + 1000 + 39 + 801
    assert max(b.num_rows for b in customer) < 100  # one block per rows event


# ---- slice semantics ----------------------------------------------------------------------


def positions(blocks: list[EventRows]) -> list[tuple[str, int, int]]:
    return [(b.file, b.pos, b.first_row + i) for b in blocks for i in range(b.num_rows)]


def test_adjacent_block_slices_add_up_and_stop_at_end(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    create_abc(admin)
    a = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (1, 'x'), (2, 'y')", "UPDATE a SET v = 'w' WHERE id = 1",
        "INSERT INTO c VALUES (1, 'not wanted')")
    b = current_offset(cdc_conn)
    run(admin, "BEGIN", "INSERT INTO a VALUES (3, 'z')", "DELETE FROM a WHERE id = 2", "COMMIT",
        "FLUSH BINARY LOGS", "UPDATE a SET v = 'u'", "INSERT INTO b VALUES (1, 'b')")
    c = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES (4, 'after')")

    whole = list(reader("a", "b").read_event_rows(a, c, [TableId(database, "a")]))
    split = reader("a", "b")
    first, second = list(split.read_event_rows(a, b)), list(split.read_event_rows(b, c))

    assert positions(first + second[:-1]) == positions(whole)  # second ends with b's insert
    assert [(x.table_id.table, x.op, x.num_rows) for x in first + second] == [
        ("a", "c", 2), ("a", "u", 1), ("a", "c", 1), ("a", "d", 1), ("a", "u", 2), ("b", "c", 1)]
    assert second[-2].file == c.file != a.file  # crossed a rotation
    assert split.stream_opens == 1  # the second slice continued on the first one's connection
    assert list(split.read_event_rows(c, c)) == []
    with pytest.raises(ValueError, match="before its start"):
        split.read_event_rows(c, a)
    d = current_offset(cdc_conn)  # the binlog's end: returns without waiting for more
    began = time.monotonic()
    assert [(x.op, x.after.to_pylist()) for x in split.read_event_rows(c, d) if x.after] == [
        ("c", [{"id": 4, "v": "after"}])]
    assert time.monotonic() - began < 5


def test_a_slice_cut_anywhere_is_read_once_by_its_pieces(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    """Readers that all start at the slice start and each decode from their cut on: together
    they give every change once, in order, wherever the cuts fall (inside events, at a rotation)."""
    create_abc(admin)
    a = current_offset(cdc_conn)
    run(admin, "INSERT INTO a VALUES " + ",".join(f"({i}, '{'x' * 8}')" for i in range(2000)),
        "UPDATE a SET v = 'y' WHERE id < 750", "INSERT INTO b VALUES (1, 'b')", "FLUSH BINARY LOGS",
        "BEGIN", "DELETE FROM a WHERE id >= 1500", "INSERT INTO b VALUES (2, 'c')", "COMMIT",
        "UPDATE a SET v = 'z'")
    end = current_offset(cdc_conn)
    whole = positions(list(reader("a", "b").read_event_rows(a, end)))
    events = sorted({(f, p) for f, p, _ in whole})
    assert len(events) > 12 and events[-1][0] != a.file  # multi-row events on both sides of a rotation

    cuts = [BinlogOffset(f, p + d) for f, p in events[1:] for d in (0, 1, -1)] + [BinlogOffset(end.file, 4)]
    for cut in cuts:
        r = reader("a", "b")
        head, tail = list(r.read_event_rows(a, cut)), list(reader("a", "b").read_event_rows(a, end, decode_from=cut))
        assert positions(head) + positions(tail) == whole, f"cut at {cut}"
        assert all(not BinlogOffset(b.file, b.pos).is_before(cut) for b in tail)

    sizes = binary_log_sizes(cdc_conn)
    three = byte_cuts(a, end, sizes, parts=3, min_bytes=64, skip_cost=0.2)
    assert len(three) == 2 and a.is_before(three[0]) and three[0].is_before(three[1]) and three[1].is_before(end)
    bounds = [None, *three]
    pieces = [positions(list(reader("a", "b").read_event_rows(a, e, decode_from=b)))
              for b, e in zip(bounds, [*three, end], strict=True)]
    assert [p for piece in pieces for p in piece] == whole
    with pytest.raises(ValueError, match="outside the slice"):
        reader("a").read_event_rows(three[0], end, decode_from=a)


def test_lost_connection_while_rows_are_held_resumes_without_loss_or_duplicates(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    """Single-row transactions: a batch holds rows of many transactions when the dump dies."""
    run(admin, "CREATE TABLE big (id INT PRIMARY KEY, pad TEXT)")
    start = current_offset(cdc_conn)
    with admin.cursor() as cur:  # ~12 MB of binlog: more than the socket buffers hold
        for i in range(1000):
            cur.execute(f"INSERT INTO big VALUES ({i}, REPEAT('x', 12000))")
    end = current_offset(cdc_conn)
    r = reader("big")
    blocks = r.read_event_rows(start, end)
    got = [next(blocks)]  # the reader now holds decoded rows; the dump thread is blocked
    with admin.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'")
        [(dump_thread,)] = cur.fetchall()
        cur.execute(f"KILL {dump_thread}")
    got.extend(blocks)

    assert r.reconnects == 1
    ids = [row["id"] for b in got if b.after for row in b.after.to_pylist()]
    assert sorted(ids) == ids == list(range(1000))
    assert positions(got) == sorted(set(positions(got)))
    assert len({b.gtid for b in got}) == 1000


# ---- property: random rows of a mixed table -------------------------------------------------

MIXED_DDL = """
CREATE TABLE mixed (
  id INT PRIMARY KEY, k SMALLINT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED, d DECIMAL(20, 4),
  dw DECIMAL(50, 10), f FLOAT, db DOUBLE, dd DATE, dtm DATETIME(3), ts TIMESTAMP(6) NULL,
  tm TIME(2), y YEAR, c CHAR(4), vc VARCHAR(300), bn BINARY(3), vb VARBINARY(20), tx TEXT,
  e ENUM('x', 'yy', 'ü'), s SET('p', 'q', 'r'), bt BIT(12)
) DEFAULT CHARSET=utf8mb4
"""
_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                max_size=12)
COLUMNS: dict[str, Any] = {
    "k": st.integers(0, 65535), "b": st.integers(-2**63, 2**63 - 1),
    "bu": st.integers(0, 2**64 - 1),
    "d": st.decimals(-10**16 + 1, 10**16 - 1, places=4, allow_nan=False),
    "dw": st.decimals(-10**20, 10**20, places=10, allow_nan=False),
    "f": st.floats(-2.0**100, 2.0**100, width=32),
    "db": st.floats(allow_nan=False, allow_infinity=False),
    "dd": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    "dtm": st.datetimes(dt.datetime(1000, 1, 1)).map(lambda v: v.replace(
        microsecond=v.microsecond // 1000 * 1000)),
    "ts": st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 1)),
    "tm": st.integers(-838 * 3600 * 100, 838 * 3600 * 100).map(
        lambda v: dt.timedelta(microseconds=v * 10000)),
    "y": st.sampled_from([0, 1901, 2000, 2155]), "c": _text.map(lambda s: s[:4].rstrip(" ")),
    "vc": _text, "bn": st.binary(max_size=3), "vb": st.binary(max_size=20), "tx": _text,
    "e": st.sampled_from(["x", "yy", "ü"]), "s": st.sampled_from(["", "p", "q,r", "p,q,r"]),
    "bt": st.integers(0, 4095),
}
_row = st.fixed_dictionaries({c: st.none() | s for c, s in COLUMNS.items()})


@pytest.fixture
def mixed(admin: Conn, cdc_conn: Conn, reader: Any) -> tuple[Conn, Conn, MySqlBinlogReader]:
    run(admin, MIXED_DDL, "SET time_zone = '+00:00'")
    return admin, cdc_conn, reader("mixed")


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(_row, min_size=1, max_size=40), changed=st.lists(_row, max_size=40))
def test_random_rows_of_a_mixed_table(mixed: tuple[Conn, Conn, MySqlBinlogReader],
                                      rows: list[dict[str, Any]],
                                      changed: list[dict[str, Any]]) -> None:
    admin, conn, r = mixed
    run(admin, "DELETE FROM mixed")
    start = current_offset(conn)
    names = ["id", *COLUMNS]
    insert = f"INSERT INTO mixed ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"
    with admin.cursor() as cur:
        cur.executemany(insert, [(i, *(row[c] for c in COLUMNS)) for i, row in enumerate(rows)])
        for i, row in enumerate(changed[:len(rows)]):
            sets = ", ".join(f"{c} = %s" for c in row)
            cur.execute(f"UPDATE mixed SET {sets} WHERE id = %s", (*row.values(), i))
        cur.execute("UPDATE mixed SET id = id + 1000 WHERE id % 3 = 0")
        cur.execute("DELETE FROM mixed WHERE id % 4 = 1")
    end = current_offset(conn)
    assert_same_changes(r, conn, start, end)


def test_decimals_at_their_limits(admin: Conn, cdc_conn: Conn, reader: Any) -> None:
    run(admin, "CREATE TABLE decs (id INT PRIMARY KEY, a DECIMAL(38, 0), b DECIMAL(38, 38), "
        "c DECIMAL(19, 9), d DECIMAL(65, 30), e DECIMAL(1, 0), f DECIMAL(18, 18))")
    start = current_offset(cdc_conn)
    big = "9" * 38
    rows = [(1, big, "0." + "9" * 38, "9999999999.999999999", "9" * 35 + "." + "9" * 30, "9",
             "0." + "9" * 18),
            (2, "-" + big, "-0." + "0" * 37 + "1", "-0.000000001", "-0.5", "-9",
             "-0." + "0" * 17 + "1"),
            (3, "0", "0", "0", "0", "0", "0"),
            (4, str(2**64), "0.5", "-1000000000", str(-10**34), "1", "0.1")]
    run(admin, "INSERT INTO decs VALUES " + ", ".join(
        "(" + ", ".join(map(str, row)) + ")" for row in rows))
    end = current_offset(cdc_conn)
    blocks = assert_same_changes(reader("decs"), cdc_conn, start, end)
    [block] = next(iter(blocks.values()))
    assert block.after is not None
    assert block.after.schema == load_table_schema(cdc_conn, block.table_id).arrow_schema()
    assert block.after.column("a").to_pylist()[:2] == [Decimal(big), Decimal("-" + big)]
    assert block.after.column("d").to_pylist()[1] == "-0.500000000000000000000000000000"


def test_set_and_enum_members_keep_their_case_like_a_select(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    """SET text comes from the binlog's own member list, so it matches SELECT even for members
    with capitals (information_schema's COLUMN_TYPE is lower-cased by cdc/schema.py, so the
    per-row path's SET conversion drops such members: it is not the reference here)."""
    run(admin, "CREATE TABLE cased (id INT PRIMARY KEY, s SET('Apple', 'b', 'Çé'), "
        "e ENUM('Xy', 'z'))")
    start = current_offset(cdc_conn)
    run(admin, "INSERT INTO cased VALUES (1, 'Apple,b,Çé', 'Xy'), (2, '', 'z'), (3, NULL, NULL)")
    end = current_offset(cdc_conn)
    with cdc_conn.cursor() as cur:
        cur.execute(f"SELECT id, s, e FROM `{database}`.cased ORDER BY id")
        selected = [dict(zip(("id", "s", "e"), row, strict=True)) for row in cur.fetchall()]
    [block] = reader("cased").read_event_rows(start, end)
    assert block.after is not None and block.after.to_pylist() == selected
