"""The Dialect contract (binlog/dialect.py), checked for every registered dialect against a real
server: what the splitter, the watermark merge and the stream rely on.

Each dialect case supplies a running server, a fresh database (or schema) per test, an admin
connection for DML, and the dialect as the job builds it. Proven for each dialect:

* watermarks: the current offset moves forward with every commit and not without one, and
  offsets survive their JSON form (the offset log);
* a chunk read plus the log (LW, HW] gives the chunk's rows at HW (writes racing the read);
* the log between two offsets holds exactly the changes committed in between, in commit order,
  the same on every re-read (a replayed batch), one per row and as Arrow change rows alike;
* the splitter's queries cut a table into chunks that hold every row once, and the key order
  agrees with the server's ORDER BY (collations included);
* discovery, schemas, chunk keys and reader ids behave as the job expects.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from binlog.dialect import Dialect
from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.dialect import MySqlDialect
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.envelope import envelope_schema, snapshot_envelope, split_key_changes
from cdc.model.errors import ConfigError, NoChunkKey
from cdc.model.schema import TableId
from chunking.backfill import Backfill
from chunking.splitter import ChunkSplitter, SplitterOptions

_reader_ids = itertools.count(6200)


@dataclass
class Case:
    """One dialect against one fresh database: DML as admin, the dialect as the job has it."""

    dialect: Dialect
    db: str
    execute: Callable[..., None]
    select: Callable[[str], list[tuple[Any, ...]]]

    def table(self, name: str) -> TableId:
        return TableId(self.db, name)

    def reader(self, *tables: str) -> Any:
        schemas = [self.schema(t) for t in tables]
        return self.dialect.log_reader(next(_reader_ids), schemas)

    def schema(self, name: str) -> Any:
        with contextlib.closing(self.dialect.connect()) as conn:
            return self.dialect.table_schema(conn, self.table(name))

    def offset(self) -> Any:
        with contextlib.closing(self.dialect.connect()) as conn:
            return self.dialect.current_offset(conn)


def _mariadb(mysql_server: Sandbox, database: str) -> Iterator[Case]:
    cdc = mysql_server.cdc
    dialect = MySqlDialect(MySqlSourceConfig(
        hostname=cdc.host, port=cdc.port, username=cdc.user, password=cdc.password,
        tables=[f"{database}\\..*"], server_id="6100-6109"))
    with contextlib.closing(mysql_server.admin.connect(database)) as admin:
        def execute(*statements: str) -> None:
            with admin.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)

        def select(sql: str) -> list[tuple[Any, ...]]:
            with admin.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())

        yield Case(dialect, database, execute, select)


def _postgres(box: Any, database: str) -> Iterator[Case]:
    from postgres_server import pg_dialect

    dialect = pg_dialect(box, database)
    with contextlib.closing(box.admin.connect(database)) as admin:
        with contextlib.closing(dialect.connect()) as conn:
            dialect.check_source(conn)  # the job's start: creates the slot before any offset is taken

        def execute(*statements: str) -> None:
            for sql in statements:
                admin.execute(sql)

        def select(sql: str) -> list[tuple[Any, ...]]:
            return list(admin.execute(sql).fetchall())

        yield Case(dialect, "public", execute, select)


@pytest.fixture(params=["mariadb", "postgres"])
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    if request.param == "mariadb":
        yield from _mariadb(request.getfixturevalue("mysql_server"), request.getfixturevalue("database"))
    else:
        yield from _postgres(request.getfixturevalue("postgres_server"), request.getfixturevalue("pg_database"))


def make_t(case: Case, rows: int = 300) -> None:
    case.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                 "INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}', {i})" for i in range(rows)))


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


# ---------------------------------------------------------------- watermarks

def test_the_current_offset_moves_with_commits_and_survives_json(case: Case) -> None:
    make_t(case, rows=1)
    a, b = case.offset(), case.offset()
    assert a.compare(b) == 0, "no commit, no move"
    case.execute("UPDATE t SET n = n + 1")
    c = case.offset()
    assert a.is_before(c) and c.is_at_or_after(a) and not c.is_before(a)
    again = case.dialect.offset_from_dict(c.to_dict())
    assert again.compare(c) == 0 and case.dialect.describe_offset(c.to_dict())


def test_a_chunk_read_plus_the_log_to_hw_is_the_chunk_at_hw(case: Case) -> None:
    make_t(case)
    schema = case.schema("t")
    column = case.dialect.chunk_key(schema)
    with contextlib.closing(case.dialect.connect()) as conn:
        queries = case.dialect.split_queries(conn, schema, column)
        split = ChunkSplitter(queries, schema, column, SplitterOptions(chunk_size=100)).next_chunks(3)[1]
        lw, rows = case.dialect.read_chunk(schema, split)
        case.execute("UPDATE t SET v = 'later' WHERE id BETWEEN 90 AND 130", "DELETE FROM t WHERE id = 150",
                     "INSERT INTO t VALUES (1000, 'x', 1)", "UPDATE t SET id = 1160 WHERE id = 105",
                     "UPDATE t SET id = 150 WHERE id = 5")
        hw = case.dialect.current_offset(conn)
        fill = Backfill(split, lw, schema, case.dialect.key_order(column, conn))
        with case.reader("t") as reader:
            fill.offer(reader.changes(lw, hw), hw)
    # the splitter sizes chunks from the table's row estimate, which may lag on a busy server: the
    # second chunk can be the last, unbounded one
    below = f" AND id < {split.end}" if split.end is not None else ""
    expected = case.select(f"SELECT id, v, n FROM t WHERE id >= {split.start}{below}")
    assert rows_of(fill.result(rows)) == sorted(expected) and fill.applied > 0


# ---------------------------------------------------------------- the log

def test_the_log_between_two_offsets_holds_exactly_those_changes_in_order(case: Case) -> None:
    make_t(case, rows=10)
    start = case.offset()
    case.execute("INSERT INTO t VALUES (100, 'a', 1)", "UPDATE t SET v = 'b' WHERE id = 100",
                 "UPDATE t SET id = 101 WHERE id = 100", "DELETE FROM t WHERE id = 3")
    end = case.offset()
    case.execute("UPDATE t SET v = 'after the end' WHERE id = 4")
    with case.reader("t") as reader:
        first = list(reader.changes(start, end))
        again = list(reader.changes(start, end))  # a replayed batch reads the same slice
        rows = [r for batch in reader.change_rows(start, end) for r in batch.rows.to_pylist()]
    assert [(e.op, e.before and e.before["id"], e.after and e.after["id"]) for e in first] == [
        ("c", None, 100), ("u", 100, 100), ("u", 100, 101), ("d", 3, None)]
    assert [(e.op, e.before, e.after) for e in again] == [(e.op, e.before, e.after) for e in first]
    assert all(e.position is not None and e.position.in_slice(start, end) for e in first)
    keys = [e.position.sort_key() for e in first if e.position is not None]
    assert keys == sorted(keys)
    split = split_key_changes(first, ("id",))  # the primary-key update: a delete, then a create
    assert [(r["op"], r["before"], r["after"]) for r in rows] == [(e.op, e.before, e.after) for e in split]


def test_change_rows_fit_the_envelope_and_name_their_table(case: Case) -> None:
    make_t(case, rows=3)
    schema = case.schema("t")
    start = case.offset()
    case.execute("UPDATE t SET n = 7")
    with case.reader("t") as reader:
        batches = list(reader.change_rows(start, case.offset()))
    assert batches and all(b.table_id == schema.table_id for b in batches)
    assert all(b.rows.schema.equals(envelope_schema(schema)) for b in batches)
    source = case.dialect.snapshot_source(schema.table_id, start, 7)
    read = snapshot_envelope(schema, pa.table({"id": [1], "v": ["x"], "n": [2]}).cast(schema.arrow_schema()),
                             source).to_pylist()[0]
    assert read["op"] == "r" and read["source"]["snapshot"] == "true"
    assert (read["source"]["db"], read["source"]["table"]) == (schema.table_id.db, "t")


# ---------------------------------------------------------------- splitting and keys

def test_split_queries_cut_a_table_into_chunks_that_hold_every_row_once(case: Case) -> None:
    case.execute("CREATE TABLE s (k VARCHAR(20) PRIMARY KEY, n INT)",
                 "INSERT INTO s VALUES " + ",".join(f"('{c}{i:03d}', {i})" for c in "aBcD" for i in range(90)))
    schema = case.schema("s")
    column = case.dialect.chunk_key(schema)
    with contextlib.closing(case.dialect.connect()) as conn:
        splitter = ChunkSplitter(case.dialect.split_queries(conn, schema, column), schema, column,
                                 SplitterOptions(chunk_size=50))
        chunks = splitter.next_chunks(1000)
        order = case.dialect.key_order(column, conn)
        keys = [k for (k,) in case.select("SELECT k FROM s ORDER BY k")]
        sort_keys = order.sort_keys(keys)
        assert sort_keys == sorted(sort_keys), "the key order is the server's ORDER BY"
        homes = [[c.split_id for c in chunks if c.contains(k, order)] for k in sort_keys]
    assert all(len(h) == 1 for h in homes), "every row lies in exactly one chunk"
    assert len(chunks) >= 6


def test_discovery_schemas_and_chunk_keys(case: Case) -> None:
    make_t(case, rows=1)
    case.execute("CREATE TABLE nokey (a INT, b INT)")
    with contextlib.closing(case.dialect.connect()) as conn:
        case.dialect.check_source(conn)
        found = case.dialect.discover_tables(conn, [f"{case.db}\\..*"])
        assert set(found) == {case.table("t"), case.table("nokey")}
        with pytest.raises(ConfigError, match=r"source\.tables"):
            case.dialect.discover_tables(conn, [f"{case.db}\\.nothing_like_this"])
        schema = case.dialect.table_schema(conn, case.table("t"))
    assert schema.column_names == ["id", "v", "n"] and schema.primary_key == ("id",)
    assert case.dialect.chunk_key(schema).name == "id"
    with pytest.raises(NoChunkKey, match="chunk_key_columns"):
        case.dialect.chunk_key(case.schema("nokey"))
    ids = case.dialect.reader_ids()
    assert ids and len(set(ids)) == len(ids)
