"""The lock-free chunk reader returns exactly the chunk's state at its high watermark.

DML is injected between LW and the SELECT and between the SELECT and HW (test hooks), and run
by concurrent random writers. Each time the result must equal a fresh SELECT of the range taken
with writes paused at HW.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from pipeline import RandomWriter, writing

from binlog.mysql.connection import ConnectionSettings
from cdc.model.schema import TableId, TableSchema, load_table_schema
from chunking.chunks import SnapshotSplit
from chunking.reader import ChunkReader, ChunkReaderOptions, ChunkResult, ReadHooks
from chunking.splitter import ChunkSplitter, SplitterOptions

Conn = pymysql.connections.Connection
SERVER_ID = 6101


def run(conn: Conn, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def make_table(admin: Conn, database: str, rows: int = 300, key: str = "INT") -> TableSchema:
    run(admin,
        f"CREATE TABLE t (id {key} PRIMARY KEY, v VARCHAR(40), n INT) ENGINE=InnoDB",
        "CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(40))")
    values = ",".join(f"({i}, 'v{i}', {i * 10})" for i in range(rows) if not 150 <= i < 155)
    run(admin, f"INSERT INTO t VALUES {values}", "INSERT INTO other VALUES (1, 'x'), (150, 'y')")
    return load_table_schema(admin, TableId(database, "t"))


def chunks(cdc: ConnectionSettings, schema: TableSchema, size: int = 100) -> list[SnapshotSplit]:
    with contextlib.closing(cdc.connect()) as conn:
        return ChunkSplitter(conn, schema, SplitterOptions(chunk_size=size)).next_chunks(10_000)


def middle(splits: list[SnapshotSplit]) -> SnapshotSplit:
    """The chunk holding key 150 (integer keys order like Python ints)."""
    found = [s for s in splits if (s.start is None or s.start <= 150) and (s.end is None or s.end > 150)]
    assert found, [s.split_name for s in splits]
    return found[0]


def fresh_select(cdc: ConnectionSettings, split: SnapshotSplit) -> list[dict[str, Any]]:
    sql, params = split.where_clause()
    with contextlib.closing(cdc.connect(split.table_id.db)) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT id, v, n FROM t WHERE {sql}", params)
        return sorted(cur.fetchall(), key=lambda r: r["id"])


def as_rows(result: ChunkResult) -> list[dict[str, Any]]:
    return sorted(result.rows.to_pylist(), key=lambda r: r["id"])


# DML scenarios against the chunk holding key 150 (about [100, 200)); ids 150-154 start absent.
SCENARIOS: dict[str, list[str]] = {
    "insert_in_range": ["INSERT INTO t VALUES (150, 'new', 1), (151, 'new', 2)"],
    "update_in_range": ["UPDATE t SET v = 'changed', n = n + 1 WHERE id BETWEEN 110 AND 130"],
    "delete_in_range": ["DELETE FROM t WHERE id IN (120, 160, 180)"],
    "key_moved_into_range": ["UPDATE t SET id = 152 WHERE id = 5", "UPDATE t SET id = 153 WHERE id = 250"],
    "key_moved_out_of_range": ["UPDATE t SET id = 5000 WHERE id = 170", "UPDATE t SET id = -4 WHERE id = 171"],
    "other_table_and_other_chunks": ["UPDATE other SET v = 'z' WHERE id = 150",
                                     "DELETE FROM t WHERE id = 50", "UPDATE t SET v = 'far' WHERE id = 250"],
    "transaction_mixed": ["BEGIN", "DELETE FROM t WHERE id = 121", "UPDATE t SET id = 121 WHERE id = 122",
                          "INSERT INTO t VALUES (122, 'ins', 3)", "UPDATE t SET n = -1 WHERE id = 123",
                          "COMMIT"],
    "delete_then_reinsert": ["DELETE FROM t WHERE id = 140", "INSERT INTO t VALUES (140, 'again', 4)",
                             "UPDATE t SET v = 'last' WHERE id = 140"],
}


@pytest.fixture
def reader_for(cdc_endpoint: ConnectionSettings) -> Iterator[Callable[..., ChunkReader]]:
    opened: list[ChunkReader] = []

    def make(schema: TableSchema, **options: Any) -> ChunkReader:
        reader = ChunkReader(cdc_endpoint, schema, ChunkReaderOptions(server_id=SERVER_ID, **options))
        opened.append(reader)
        return reader

    yield make
    for r in opened:
        r.close()


@pytest.mark.parametrize("when", ["after_low_watermark", "after_select"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_chunk_equals_its_state_at_high_watermark(
    scenario: str, when: str, admin: Conn, database: str, cdc_endpoint: ConnectionSettings,
    reader_for: Callable[..., ChunkReader],
) -> None:
    schema = make_table(admin, database)
    split = middle(chunks(cdc_endpoint, schema))
    before = fresh_select(cdc_endpoint, split)
    hooks = ReadHooks(**{when: lambda: run(admin, *SCENARIOS[scenario])})

    result = reader_for(schema).read(split, hooks)

    after = fresh_select(cdc_endpoint, split)  # nothing writes after HW: this is the state at HW
    assert as_rows(result) == after
    assert result.low_watermark.is_before(result.high_watermark)
    if when == "after_select" and after != before:
        assert result.changes_applied > 0  # the merge did the work, not the SELECT


def test_backfill_skip_returns_the_select_unmerged(
    admin: Conn, database: str, cdc_endpoint: ConnectionSettings, reader_for: Callable[..., ChunkReader],
) -> None:
    schema = make_table(admin, database)
    split = middle(chunks(cdc_endpoint, schema))
    before = fresh_select(cdc_endpoint, split)
    hooks = ReadHooks(after_select=lambda: run(admin, "DELETE FROM t WHERE id = 160"))

    result = reader_for(schema, backfill_skip=True).read(split, hooks)

    assert as_rows(result) == before != fresh_select(cdc_endpoint, split)
    assert result.high_watermark == result.low_watermark


def test_quiet_chunk_skips_the_binlog(
    admin: Conn, database: str, cdc_endpoint: ConnectionSettings, reader_for: Callable[..., ChunkReader],
) -> None:
    schema = make_table(admin, database)
    reader = reader_for(schema)
    for split in chunks(cdc_endpoint, schema):
        result = reader.read(split)
        assert result.low_watermark == result.high_watermark and result.changes_applied == 0
        assert as_rows(result) == fresh_select(cdc_endpoint, split)
    assert reader._binlog is None  # LW == HW every time: no replication connection was opened


def test_result_as_debezium_read_rows(
    admin: Conn, database: str, cdc_endpoint: ConnectionSettings, reader_for: Callable[..., ChunkReader],
) -> None:
    schema = make_table(admin, database, rows=50)
    (split,) = chunks(cdc_endpoint, schema)
    result = reader_for(schema).read(split)
    rows = result.envelope(schema, name="shop", server_id=1, ts_ms=7).to_pylist()
    assert len(rows) == 50 and {r["op"] for r in rows} == {"r"}
    first = min(rows, key=lambda r: r["after"]["id"])
    assert first["before"] is None and first["after"] == {"id": 0, "v": "v0", "n": 0}
    assert first["source"]["file"] == result.high_watermark.file
    assert first["source"]["pos"] == result.high_watermark.pos
    assert (first["source"]["db"], first["source"]["table"], first["source"]["snapshot"]) == (database, "t", "true")


def test_string_keys_with_case_insensitive_collation(
    admin: Conn, database: str, cdc_endpoint: ConnectionSettings, reader_for: Callable[..., ChunkReader],
) -> None:
    run(admin, "CREATE TABLE t (id VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v VARCHAR(40), n INT)")
    names = [f"{c}{i:03d}" for c in "aBcDeF" for i in range(60)]
    run(admin, "INSERT INTO t VALUES " + ",".join(f"('{k}', 'x', 0)" for k in names))
    schema = load_table_schema(admin, TableId(database, "t"))
    splits = chunks(cdc_endpoint, schema, size=50)
    target = splits[len(splits) // 2]
    low = str(target.start)
    # Writes whose keys differ from the boundary only by case: the server's collation decides.
    dml = [f"INSERT INTO t VALUES ('{low.upper()}z', 'in', 1)", f"INSERT INTO t VALUES ('{low.lower()}!', 'in2', 1)",
           f"UPDATE t SET v = 'moved' WHERE id = '{low}'", "DELETE FROM t WHERE id = 'a000'"]
    result = reader_for(schema).read(target, ReadHooks(after_select=lambda: run(admin, *dml)))
    sql, params = target.where_clause()
    with contextlib.closing(cdc_endpoint.connect(database)) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT id, v, n FROM t WHERE {sql}", params)
        expected = sorted(cur.fetchall(), key=lambda r: r["id"].lower())
    assert sorted(result.rows.to_pylist(), key=lambda r: r["id"].lower()) == expected
    assert result.changes_applied >= 2


def test_keyless_table_with_chunk_key_column(
    admin: Conn, database: str, cdc_endpoint: ConnectionSettings, reader_for: Callable[..., ChunkReader],
) -> None:
    run(admin, "CREATE TABLE t (id INT, v VARCHAR(40), n INT)")
    run(admin, "INSERT INTO t VALUES " + ",".join(f"({i % 150}, 'v', {i})" for i in range(300)))
    schema = load_table_schema(admin, TableId(database, "t"))
    with contextlib.closing(cdc_endpoint.connect()) as conn:
        splits = ChunkSplitter(conn, schema, SplitterOptions(chunk_size=100, chunk_key_column="id")).next_chunks(100)
    dml = ["DELETE FROM t WHERE id = 60 AND n = 60", "INSERT INTO t VALUES (61, 'v', 61)",
           "UPDATE t SET v = 'w' WHERE n = 62"]
    for i, split in enumerate(splits):
        statements = dml if i == 0 else []
        result = reader_for(schema).read(split, ReadHooks(after_select=lambda s=statements: run(admin, *s)))
        sql, params = split.where_clause()
        with contextlib.closing(cdc_endpoint.connect(database)) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, v, n FROM t WHERE {sql}", params)
            expected = sorted(cur.fetchall(), key=repr)
        assert sorted((tuple(r.values()) for r in result.rows.to_pylist()), key=repr) == expected


def test_concurrent_random_writers(
    admin: Conn, database: str, cdc_endpoint: ConnectionSettings, mysql_server: Any,
    reader_for: Callable[..., ChunkReader],
) -> None:
    schema = make_table(admin, database, rows=400)
    splits = chunks(cdc_endpoint, schema, size=40)
    writers = [RandomWriter(mysql_server, database, "t", seed, key_space=400) for seed in (1, 2)]
    reader = reader_for(schema)
    with writing(*writers):
        merged = 0
        for split in splits * 2:
            pause = contextlib.ExitStack()

            def pause_writers(pause: contextlib.ExitStack = pause) -> None:
                for w in writers:
                    pause.enter_context(w.paused())

            # Writers run through LW and the SELECT; they pause before HW is read, and stay
            # paused until the range has been compared with a fresh SELECT (the state at HW).
            with pause:
                hooks = ReadHooks(after_select=pause_writers)
                result = reader.read(split, hooks)
                assert as_rows(result) == fresh_select(cdc_endpoint, split), split.split_name
            merged += result.changes_applied
    assert sum(w.statements for w in writers) > 100
    assert merged > 0  # the writers did race the SELECTs
