"""The lock-free chunk read gives exactly the chunk's state at its high watermark.

The read is the MySQL dialect's LW and SELECT, then the dialect-neutral backfill of the binlog
(LW, HW] (tests/chunk_read.py composes them as the job does across two batches). DML is
injected between LW and the SELECT and between the SELECT and HW (hooks), and run by concurrent
random writers. Each time the result must equal a fresh SELECT of the range taken with writes
paused at HW.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pymysql
import pytest
from chunk_read import ChunkResult, ReadHooks, read_chunk
from pipeline import RandomWriter, writing

from binlog.mysql.connection import Endpoint
from binlog.mysql.dialect import MySqlDialect
from binlog.mysql.keys import range_predicate
from binlog.mysql.types import load_table_schema
from cdc.model.envelope import snapshot_envelope
from cdc.model.schema import TableId, TableSchema
from chunking.chunks import SnapshotSplit
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


def chunks(dialect: MySqlDialect, schema: TableSchema, size: int = 100) -> list[SnapshotSplit]:
    with contextlib.closing(dialect.connect()) as conn:
        column = dialect.chunk_key(schema)
        queries = dialect.split_queries(conn, schema, column)
        return ChunkSplitter(queries, schema, column, SplitterOptions(chunk_size=size)).next_chunks(10_000)


def middle(splits: list[SnapshotSplit]) -> SnapshotSplit:
    """The chunk holding key 150 (integer keys order like Python ints)."""
    found = [s for s in splits if (s.start is None or s.start <= 150) and (s.end is None or s.end > 150)]
    assert found, [s.split_name for s in splits]
    return found[0]


def fresh_select(cdc: Endpoint, split: SnapshotSplit) -> list[dict[str, Any]]:
    sql, params = range_predicate(split.key_column, split.start, split.end)
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
def reader_for(mysql_dialect: MySqlDialect) -> Callable[..., Callable[..., ChunkResult]]:
    def make(schema: TableSchema) -> Callable[..., ChunkResult]:
        def read(split: SnapshotSplit, hooks: ReadHooks | None = None) -> ChunkResult:
            return read_chunk(mysql_dialect, schema, split, SERVER_ID, hooks or ReadHooks())
        return read

    return make


@pytest.mark.parametrize("when", ["after_low_watermark", "after_select"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_chunk_equals_its_state_at_high_watermark(
    scenario: str, when: str, admin: Conn, database: str, cdc_endpoint: Endpoint,
    reader_for: Callable[..., Callable[..., ChunkResult]], mysql_dialect: MySqlDialect,
) -> None:
    schema = make_table(admin, database)
    split = middle(chunks(mysql_dialect, schema))
    before = fresh_select(cdc_endpoint, split)
    hooks = ReadHooks(**{when: lambda: run(admin, *SCENARIOS[scenario])})

    result = reader_for(schema)(split, hooks)

    after = fresh_select(cdc_endpoint, split)  # nothing writes after HW: this is the state at HW
    assert as_rows(result) == after
    assert result.low_watermark.is_before(result.high_watermark)
    if when == "after_select" and after != before:
        assert result.changes_applied > 0  # the merge did the work, not the SELECT


def test_quiet_chunk_skips_the_binlog(
    admin: Conn, database: str, cdc_endpoint: Endpoint, reader_for: Callable[..., Callable[..., ChunkResult]], mysql_dialect: MySqlDialect,
) -> None:
    schema = make_table(admin, database)
    read = reader_for(schema)
    for split in chunks(mysql_dialect, schema):
        result = read(split)
        # LW == HW on a quiet server: the chunk is its SELECT, no binlog is read
        assert result.low_watermark == result.high_watermark and result.changes_applied == 0
        assert as_rows(result) == fresh_select(cdc_endpoint, split)


def test_result_as_debezium_read_rows(
    admin: Conn, database: str, cdc_endpoint: Endpoint, reader_for: Callable[..., Callable[..., ChunkResult]], mysql_dialect: MySqlDialect,
) -> None:
    schema = make_table(admin, database, rows=50)
    (split,) = chunks(mysql_dialect, schema)
    result = reader_for(schema)(split)
    source = mysql_dialect.snapshot_source(schema.table_id, result.high_watermark, 7)
    rows = snapshot_envelope(schema, result.rows, source).to_pylist()
    assert len(rows) == 50 and {r["op"] for r in rows} == {"r"}
    first = min(rows, key=lambda r: r["after"]["id"])
    assert first["before"] is None and first["after"] == {"id": 0, "v": "v0", "n": 0}
    assert first["source"]["file"] == result.high_watermark.file
    assert first["source"]["pos"] == result.high_watermark.pos
    assert (first["source"]["db"], first["source"]["table"], first["source"]["snapshot"]) == (database, "t", "true")


def test_string_keys_with_case_insensitive_collation(
    admin: Conn, database: str, cdc_endpoint: Endpoint, reader_for: Callable[..., Callable[..., ChunkResult]], mysql_dialect: MySqlDialect,
) -> None:
    run(admin, "CREATE TABLE t (id VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v VARCHAR(40), n INT)")
    names = [f"{c}{i:03d}" for c in "aBcDeF" for i in range(60)]
    run(admin, "INSERT INTO t VALUES " + ",".join(f"('{k}', 'x', 0)" for k in names))
    schema = load_table_schema(admin, TableId(database, "t"))
    splits = chunks(mysql_dialect, schema, size=50)
    target = splits[len(splits) // 2]
    low = str(target.start)
    # Writes whose keys differ from the boundary only by case: the server's collation decides.
    dml = [f"INSERT INTO t VALUES ('{low.upper()}z', 'in', 1)", f"INSERT INTO t VALUES ('{low.lower()}!', 'in2', 1)",
           f"UPDATE t SET v = 'moved' WHERE id = '{low}'", "DELETE FROM t WHERE id = 'a000'"]
    result = reader_for(schema)(target, ReadHooks(after_select=lambda: run(admin, *dml)))
    sql, params = range_predicate(target.key_column, target.start, target.end)
    with contextlib.closing(cdc_endpoint.connect(database)) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT id, v, n FROM t WHERE {sql}", params)
        expected = sorted(cur.fetchall(), key=lambda r: r["id"].lower())
    assert sorted(result.rows.to_pylist(), key=lambda r: r["id"].lower()) == expected
    assert result.changes_applied >= 2


def test_keyless_table_with_chunk_key_column(
    admin: Conn, database: str, cdc_endpoint: Endpoint, reader_for: Callable[..., Callable[..., ChunkResult]], mysql_dialect: MySqlDialect,
) -> None:
    run(admin, "CREATE TABLE t (id INT, v VARCHAR(40), n INT)")
    run(admin, "INSERT INTO t VALUES " + ",".join(f"({i % 150}, 'v', {i})" for i in range(300)))
    schema = load_table_schema(admin, TableId(database, "t"))
    column = schema.column("id")
    with contextlib.closing(mysql_dialect.connect()) as conn:
        queries = mysql_dialect.split_queries(conn, schema, column)
        splits = ChunkSplitter(queries, schema, column, SplitterOptions(chunk_size=100)).next_chunks(100)
    dml = ["DELETE FROM t WHERE id = 60 AND n = 60", "INSERT INTO t VALUES (61, 'v', 61)",
           "UPDATE t SET v = 'w' WHERE n = 62"]
    for i, split in enumerate(splits):
        statements = dml if i == 0 else []
        result = reader_for(schema)(split, ReadHooks(after_select=lambda s=statements: run(admin, *s)))
        sql, params = range_predicate(split.key_column, split.start, split.end)
        with contextlib.closing(cdc_endpoint.connect(database)) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, v, n FROM t WHERE {sql}", params)
            expected = sorted(cur.fetchall(), key=repr)
        assert sorted((tuple(r.values()) for r in result.rows.to_pylist()), key=repr) == expected


def test_concurrent_random_writers(
    admin: Conn, database: str, cdc_endpoint: Endpoint, mysql_server: Any,
    reader_for: Callable[..., Callable[..., ChunkResult]], mysql_dialect: MySqlDialect,
) -> None:
    schema = make_table(admin, database, rows=400)
    splits = chunks(mysql_dialect, schema, size=40)
    writers = [RandomWriter(mysql_server, database, "t", seed, key_space=400) for seed in (1, 2)]
    read = reader_for(schema)
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
                result = read(split, hooks)
                assert as_rows(result) == fresh_select(cdc_endpoint, split), split.split_name
            merged += result.changes_applied
    assert sum(w.statements for w in writers) > 100
    assert merged > 0  # the writers did race the SELECTs
