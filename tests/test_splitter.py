"""The chunk splitter against a real server, run as the least-privilege CDC user.

Every case proves coverage on the server: the rows of all chunk SELECTs, taken together, are
exactly the rows of ``SELECT *`` (each row once), and chunk sizes stay near chunk_size where the
data allows it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise
from typing import Any

import pymysql
import pytest

from binlog.mysql.connection import Endpoint
from binlog.mysql.dialect import MySqlSplitQueries
from binlog.mysql.keys import KeyOrder, chunkable, range_predicate, sql_ident
from binlog.mysql.types import load_table_schema, quoted_table
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.errors import ConfigError, NoChunkKey
from cdc.model.schema import TableId, TableSchema
from chunking.chunks import SnapshotSplit
from chunking.splitter import ChunkSplitter, SplitterOptions, SplitterState, select_chunk_key

CHUNK = 100
Conn = pymysql.connections.Connection


@pytest.fixture
def cdc(cdc_endpoint: Endpoint, database: str) -> Iterator[Conn]:
    with contextlib.closing(cdc_endpoint.connect(database)) as conn:
        yield conn


def make_table(admin: Conn, ddl: str, rows: Sequence[tuple[Any, ...]]) -> None:
    with admin.cursor() as cur:
        cur.execute(ddl)
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            cur.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        cur.execute("ANALYZE TABLE t")
        cur.fetchall()


def splitter_of(conn: Conn, schema: TableSchema, options: SplitterOptions, key: str | None = None,
                state: SplitterState | None = None) -> ChunkSplitter:
    """The splitter the job builds: the MySQL dialect's queries on ``conn``."""
    column = select_chunk_key(schema, key, chunkable)
    return ChunkSplitter(MySqlSplitQueries(conn, schema.table_id, column), schema, column, options, state)


def select_sql(chunk: SnapshotSplit, schema: TableSchema) -> tuple[str, tuple[Any, ...]]:
    where, params = range_predicate(chunk.key_column, chunk.start, chunk.end)
    columns = ", ".join(sql_ident(c) for c in schema.column_names)
    return f"SELECT {columns} FROM {quoted_table(schema.table_id)} WHERE {where}", params


def split_all(conn: Conn, schema: TableSchema, options: SplitterOptions, key: str | None = None) -> list[SnapshotSplit]:
    splitter = splitter_of(conn, schema, options, key)
    chunks: list[SnapshotSplit] = []
    while not splitter.finished:
        chunks += splitter.next_chunks(7)
    assert splitter.estimated_total_chunks() == len(chunks)
    return chunks


def check_coverage(conn: Conn, schema: TableSchema, chunks: list[SnapshotSplit]) -> list[int]:
    """Assert the chunks are contiguous and read every row exactly once; return chunk sizes."""
    assert [c.split_id for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start is None and chunks[-1].end is None
    assert all(a.end == b.start for a, b in pairwise(chunks))
    union: Counter[tuple[Any, ...]] = Counter()
    sizes = []
    with conn.cursor() as cur:
        for chunk in chunks:
            cur.execute(*select_sql(chunk, schema))
            rows = cur.fetchall()
            sizes.append(len(rows))
            union.update(rows)
        cur.execute(f"SELECT * FROM {quoted_table(schema.table_id)}")
        everything = Counter(cur.fetchall())
    assert sum(sizes) == sum(everything.values())
    assert union == everything
    return sizes


def key_counts(conn: Conn, chunks: list[SnapshotSplit]) -> list[tuple[int, int]]:
    """Per chunk: non-NULL keys and distinct keys, counted by the server (collation applies)."""
    counts = []
    with conn.cursor() as cur:
        for chunk in chunks:
            where, params = range_predicate(chunk.key_column, chunk.start, chunk.end)
            k = f"`{chunk.key_column}`"
            cur.execute(f"SELECT COUNT({k}), COUNT(DISTINCT {k}) FROM t WHERE {where}", params)
            keys, distinct = cur.fetchone() or (0, 0)
            counts.append((int(keys), int(distinct)))
    return counts


@dataclass(frozen=True)
class Case:
    ddl: str
    rows: Callable[[random.Random], list[tuple[Any, ...]]]
    mode: str
    max_chunk: int  # the most non-NULL keys a chunk of two or more distinct keys may hold
    key: str | None = None


def _strings(rnd: random.Random) -> list[tuple[Any, ...]]:
    words = ["".join(rnd.choice("aAbBeEéÉzZ") for _ in range(rnd.randint(1, 6))) for _ in range(1500)]
    dups = ["a", "A", "a ", "A  "] * 15  # 60 keys equal under the collation
    words += [w + " " * rnd.randint(0, 2) for w in words[:300]] + dups
    rows: list[tuple[Any, ...]] = [(i, w) for i, w in enumerate(words)]
    return rows + [(len(rows) + i, None) for i in range(20)]


CASES = {
    "dense_int": Case("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(8))",
                      lambda r: [(i, f"v{i}") for i in range(1, 3001)], "even", 2 * CHUNK),
    "sparse_int": Case("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)",
                       lambda r: [(i * 100_003, i) for i in range(1, 2001)], "uneven", CHUNK),
    "skewed_int": Case(
        "CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY)",
        lambda r: [(i,) for i in range(1, 1501)] + [(x,) for x in {r.randrange(10**6, 2**64) for _ in range(1500)}],
        "uneven", CHUNK),
    "duplicate_keys": Case(
        "CREATE TABLE t (id INT PRIMARY KEY, g BIGINT, KEY (g))",  # 600 rows share one key
        lambda r: [(i, 1_200_000_007 if i % 4 == 0 else i * 10**6) for i in range(1, 2401)],
        "uneven", CHUNK, key="g"),
    "string_pk": Case(
        "CREATE TABLE t (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT)",
        lambda r: [(f"{'Kk'[i % 2]}-{i * 7919 % 100_000:05d}", i) for i in range(2500)],
        "uneven", CHUNK),
    "string_ci_key": Case(
        "CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(32) COLLATE utf8mb4_general_ci, KEY (s))",
        _strings, "uneven", CHUNK, key="s"),
    "decimal_even": Case("CREATE TABLE t (d DECIMAL(12,2) PRIMARY KEY)",
                         lambda r: [(Decimal(i) / 2,) for i in range(1, 3001)], "even", 2 * CHUNK),
    "decimal_dense": Case("CREATE TABLE t (d DECIMAL(12,2) PRIMARY KEY)",
                          lambda r: [(Decimal(i) / 100,) for i in range(1, 3001)], "uneven", CHUNK),
    "datetime": Case(
        "CREATE TABLE t (ts DATETIME(3) PRIMARY KEY, v INT)",
        lambda r: [(dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i * 1500 + r.randint(0, 999)), i)
                   for i in range(2500)], "uneven", CHUNK),
    "time_negative": Case(
        "CREATE TABLE t (tm TIME(6) PRIMARY KEY)",
        lambda r: [(dt.timedelta(seconds=i * 37 - 40_000, microseconds=i),) for i in range(2000)],
        "uneven", CHUNK),
    "varbinary": Case("CREATE TABLE t (b VARBINARY(16) PRIMARY KEY)",
                      lambda r: [(b,) for b in {r.randbytes(r.randint(1, 4)) for _ in range(2000)}], "uneven", CHUNK),
    "composite": Case(
        "CREATE TABLE t (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))",
        lambda r: [(a, f"b{b}", a * b) for a in range(1, 61) for b in range(40)], "uneven", CHUNK),
    "nulls_in_key": Case(
        "CREATE TABLE t (id INT PRIMARY KEY, k INT NULL)",
        lambda r: [(i, None if i % 8 == 0 else i) for i in range(1, 2401)], "even", 2 * CHUNK, key="k"),
    "no_pk_with_key": Case("CREATE TABLE t (k INT, v VARCHAR(4))",
                           lambda r: [(r.randint(1, 10**6), "x") for _ in range(2000)], "even", 2 * CHUNK,
                           key="k"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_chunks_cover_every_row_once(name: str, admin: Conn, cdc: Conn, database: str) -> None:
    case = CASES[name]
    make_table(admin, case.ddl, case.rows(random.Random(name)))
    schema = load_table_schema(cdc, TableId(database, "t"))
    options = SplitterOptions(chunk_size=CHUNK)
    assert splitter_of(cdc, schema, options, case.key).state.mode == case.mode
    chunks = split_all(cdc, schema, options, case.key)
    sizes = check_coverage(cdc, schema, chunks)
    assert len(chunks) > 5, sizes
    for chunk, (keys, distinct) in zip(chunks, key_counts(cdc, chunks), strict=True):
        # A chunk may only exceed the bound when one key value fills it (it cannot be cut).
        assert keys <= case.max_chunk or distinct == 1, f"{chunk}: {keys} keys; sizes {sizes}"
    print(f"{name}: {len(chunks)} chunks ({case.mode}), max {max(sizes)}, mean {sum(sizes) / len(sizes):.0f}")


def test_null_keys_are_read_by_the_first_chunk(admin: Conn, cdc: Conn, database: str) -> None:
    make_table(admin, "CREATE TABLE t (id INT PRIMARY KEY, k VARCHAR(8) NULL)",
               [(i, None if i < 30 else f"{i:05d}") for i in range(1000)])
    schema = load_table_schema(cdc, TableId(database, "t"))
    chunks = split_all(cdc, schema, SplitterOptions(chunk_size=CHUNK), "k")
    with cdc.cursor() as cur:
        cur.execute(*select_sql(chunks[0], schema))
        assert sum(1 for row in cur.fetchall() if row[1] is None) == 30
    check_coverage(cdc, schema, chunks)


@pytest.mark.parametrize("rows", [0, 1])
def test_empty_and_single_row_tables_are_one_chunk(rows: int, admin: Conn, cdc: Conn, database: str) -> None:
    make_table(admin, "CREATE TABLE t (id INT PRIMARY KEY)", [(5,)] * rows)
    schema = load_table_schema(cdc, TableId(database, "t"))
    splitter = splitter_of(cdc, schema, SplitterOptions(chunk_size=CHUNK))
    assert splitter.next_chunks(10) == [SnapshotSplit(schema.table_id, 0, "id", None, None)]
    assert splitter.finished and splitter.next_chunks(10) == []


def test_table_without_key_needs_a_chunk_key_column(admin: Conn, cdc: Conn, database: str) -> None:
    make_table(admin, "CREATE TABLE t (k INT, v INT)", [(1, 1)])
    schema = load_table_schema(cdc, TableId(database, "t"))
    with pytest.raises(NoChunkKey, match=rf'source\.chunk_key_columns: {{"{database}\.t"'):
        splitter_of(cdc, schema, SplitterOptions())
    with pytest.raises(ConfigError, match="no column 'nope'"):
        splitter_of(cdc, schema, SplitterOptions(), "nope")


@pytest.mark.parametrize("name", ["dense_int", "decimal_even", "datetime", "string_ci_key",
                                  "time_negative", "varbinary"])
def test_state_round_trip_continues_where_it_stopped(
    name: str, admin: Conn, cdc: Conn, cdc_endpoint: Endpoint, database: str
) -> None:
    case = CASES[name]
    make_table(admin, case.ddl, case.rows(random.Random(name)))
    schema = load_table_schema(cdc, TableId(database, "t"))
    options = SplitterOptions(chunk_size=CHUNK)
    whole = split_all(cdc, schema, options, case.key)
    first = splitter_of(cdc, schema, options, case.key)
    head = first.next_chunks(len(whole) // 2)
    saved = json.loads(json.dumps(first.state.to_dict()))
    with contextlib.closing(cdc_endpoint.connect(database)) as other:
        second = splitter_of(other, schema, options, case.key, SplitterState.from_dict(saved))
        tail = second.next_chunks(10**6)
    assert head + tail == whole
    with pytest.raises(ConfigError, match="was started with chunk key"):
        splitter_of(cdc, schema, options, case.key, SplitterState.from_dict({**saved, "key_column": "other"}))


def test_splitting_is_lazy(
    admin: Conn, cdc: Conn, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    make_table(admin, "CREATE TABLE t (id BIGINT PRIMARY KEY)", [(i * 100_003,) for i in range(5000)])
    schema = load_table_schema(cdc, TableId(database, "t"))
    splitter = splitter_of(cdc, schema, SplitterOptions(chunk_size=CHUNK))
    assert splitter.state.mode == "uneven"
    overhead = -_selects(cdc) + _selects(cdc)  # does SHOW STATUS count itself?
    before = _selects(cdc)
    chunks = splitter.next_chunks(3)
    spent = _selects(cdc) - before - overhead
    assert len(chunks) == 3 and not splitter.finished and splitter.state.next_id == 3
    assert 1 <= spent <= 3, f"{spent} SELECTs for 3 chunks of a ~50-chunk table"
    assert 40 <= splitter.estimated_total_chunks() <= 60
    with caplog.at_level("INFO", logger="chunking.splitter"):
        rest = splitter.next_chunks(10**6)
    assert f"{database}.t: split into {3 + len(rest)} chunks (uneven)" in caplog.text


def _selects(conn: Conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Com_select'")
        row = cur.fetchone()
        assert row is not None
        return int(row[1])


def _collations(flavor: str) -> list[str]:
    extra = "utf8mb4_0900_ai_ci" if flavor == "mysql" else "utf8mb4_general_nopad_ci"
    return ["utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_bin", "latin1_swedish_ci", extra]


def _random_words(n: int) -> list[str]:
    rnd = random.Random(42)
    alphabet = "aAbBeEéÉèzZßsSäÄ \t-"
    words = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 5))) + " " * rnd.randint(0, 2)
             for _ in range(n)]
    return [*words, "a", "A", "a ", "a\t", "b", "B", "ss", "ß", "e", "é", "E "]


@pytest.mark.parametrize("collation", _collations("mariadb"))
def test_key_order_matches_server_order(
    collation: str, mysql_server: Sandbox, admin: Conn, cdc: Conn, database: str
) -> None:
    if collation not in _collations(mysql_server.flavor):
        pytest.skip(f"{collation} is not a {mysql_server.flavor} collation")
    charset = collation.split("_")[0]
    words = _random_words(300)
    make_table(admin, f"CREATE TABLE t (id INT PRIMARY KEY, w VARCHAR(20) CHARACTER SET {charset} "
               f"COLLATE {collation} NULL)", [(i, w) for i, w in enumerate(words)] + [(999, None)])
    schema = load_table_schema(cdc, TableId(database, "t"))
    with cdc.cursor() as cur:
        cur.execute("SELECT id, w, DENSE_RANK() OVER (ORDER BY w) FROM t")
        server = {row[0]: (row[1], row[2]) for row in cur.fetchall()}
    order = KeyOrder(schema.column("w"), cdc)
    ids = sorted(server)
    keys = order.sort_keys([server[i][0] for i in ids])
    ranks = {k: r for r, k in enumerate(sorted(set(keys)), start=1)}
    assert {i: ranks[k] for i, k in zip(ids, keys, strict=True)} == {i: server[i][1] for i in ids}


def test_case_and_trailing_spaces_compare_like_the_server(cdc: Conn, admin: Conn, database: str) -> None:
    make_table(admin, "CREATE TABLE t (s VARCHAR(8) COLLATE utf8mb4_general_ci PRIMARY KEY)", [])
    order = KeyOrder(load_table_schema(cdc, TableId(database, "t")).column("s"), cdc)
    a, upper_a, b, a_space, a_tab = order.sort_keys(["a", "A", "b", "a  ", "a\t"])
    assert a == upper_a == a_space and hash(a) == hash(a_space)
    assert b > upper_a and a_tab < a
    many = [f"K{i:04d}" for i in range(1200)]  # more than one weight query's worth
    keys = order.sort_keys(many)
    assert keys == order.sort_keys(many[:700]) + order.sort_keys(many[700:])
    assert all(x < y for x, y in pairwise(keys))


@pytest.mark.parametrize("collation", ["utf8mb4_general_ci", "latin1_swedish_ci"])
def test_chunk_membership_in_python_matches_server(
    collation: str, admin: Conn, cdc: Conn, database: str
) -> None:
    words = _random_words(400)
    charset = collation.split("_")[0]
    rows = [(i, w) for i, w in enumerate(words)] + [(1000 + i, None) for i in range(5)]
    make_table(admin, f"CREATE TABLE t (id INT PRIMARY KEY, w VARCHAR(20) CHARACTER SET {charset} "
               f"COLLATE {collation} NULL, KEY (w))", rows)
    schema = load_table_schema(cdc, TableId(database, "t"))
    chunks = split_all(cdc, schema, SplitterOptions(chunk_size=25), "w")
    server: dict[int, int] = {}
    with cdc.cursor() as cur:
        for chunk in chunks:
            where, params = range_predicate(chunk.key_column, chunk.start, chunk.end)
            cur.execute(f"SELECT id FROM t WHERE {where}", params)
            server.update((row[0], chunk.split_id) for row in cur.fetchall())
    order = KeyOrder(schema.column("w"), cdc)
    located = [next((c for c in chunks if c.contains(k, order)), None)
               for k in order.sort_keys([w for _, w in rows])]
    assert {i: s.split_id for (i, _), s in zip(rows, located, strict=True) if s} == server
    assert len(server) == len(rows)
    for (i, w), key in zip(rows[::20], order.sort_keys([w for _, w in rows[::20]]), strict=True):
        assert [c.split_id for c in chunks if c.contains(key, order)] == [server[i]], (i, w)
