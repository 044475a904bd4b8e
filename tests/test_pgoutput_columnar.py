"""The column-wise pgoutput decoder (``pgoutput_columnar`` + ``change_rows``, with the Arrow
kernels of ``casts``) against the per-row reference (``pgoutput.decode`` + the reader's per-row
path + ``types.to_arrow_rows``), on a real PostgreSQL: both must give identical change rows and
change events for every type, NULL, unchanged TOAST values under replica identity DEFAULT and
FULL, NaN and infinities, arrays, key updates, multi-relation transactions, a truncate, a slice
starting mid-log and the cut into :data:`reader.STREAM_ROWS` pieces."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pyarrow as pa
import pytest
from postgres_server import pg_dialect
from test_postgres import TYPE_ROWS, TYPES_DDL

from binlog.postgres import reader as pg_reader
from binlog.postgres.dialect import PostgresDialect
from binlog.postgres.positions import LsnOffset
from binlog.postgres.types import postgres_column, to_arrow, to_arrow_rows
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.schema import TableId

EDGE_ROWS = [  # values the Arrow kernels leave to the per-value parsers, and their limits
    "(10, 0, 0, 0, 'Infinity', '+Infinity', '+Infinity', true, 'x', 'y', 'zz', '\\x', 'infinity', '24:00:00', "
    "'00:00:00+14:59', '-infinity', 'infinity', 'PT0S', NULL, 'null', '[]', '{NULL}', '{NULL,\"NULL\"}', 'sad', "
    "'::ffff:1.2.3.4', '::/0', '92233720368547758.07')",
    "(11, 1, -1, '0.0005', '-Infinity', '-0', '-0', false, E'tab\\there\\nnl', '', '', '\\xDEADBEEF', "
    "'0044-03-15 BC', '00:00:00.000001', '23:59:59-12', '0044-03-15 12:00:00 BC', '10000-01-01 00:00:00+00', "
    "'P-1Y', NULL, '\"s\"', '1', '{-2147483648,2147483647}', '{\"a,b\",\"c}\",\"\\\\\\\\\"}', 'ok', NULL, NULL, "
    "'-92233720368547758.08')",
    "(12, NULL, NULL, 'NaN', '0', '1e-45', '5e-324', NULL, NULL, NULL, NULL, NULL, '10000-01-01', NULL, NULL, "
    "'2000-02-29 23:59:59.5', '1970-01-01 00:00:00.000001+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL)",
]


def _norm(value: Any) -> Any:
    """NaN == NaN, recursively (the rows hold floats, lists and structs)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _offset(d: PostgresDialect) -> LsnOffset:
    with contextlib.closing(d.connect()) as conn:
        return d.current_offset(conn)


def _read(d: PostgresDialect, tables: list[str], start: LsnOffset, end: LsnOffset, decoder: str) -> tuple[Any, Any]:
    """Change rows (table, first, schema, rows) and change events through one decoder."""
    with contextlib.closing(d.connect()) as conn:
        schemas = [d.table_schema(conn, TableId("public", t)) for t in tables]
    with d.log_reader(0, schemas) as reader:
        reader.decoder = decoder
        rows = [(str(b.table_id), b.first, b.rows.schema, _norm(b.rows.to_pylist()))
                for b in reader.change_rows(start, end)]
        events = [(str(e.table_id), e.op, _norm(e.before), _norm(e.after), e.position, e.ts_ms, e.source)
                  for e in reader.changes(start, end)]
    return rows, events


def _same(d: PostgresDialect, tables: list[str], start: LsnOffset, end: LsnOffset) -> list[Any]:
    columnar, reference = _read(d, tables, start, end, "columnar"), _read(d, tables, start, end, "rows")
    assert columnar[0] == reference[0]
    assert columnar[1] == reference[1]
    assert columnar[0], "the slice has changes"
    return columnar[0]


@pytest.fixture
def dialect(postgres_server: PostgresSandbox, pg_database: str) -> PostgresDialect:
    return pg_dialect(postgres_server, pg_database)


def _start(d: PostgresDialect) -> None:
    with contextlib.closing(d.connect()) as conn:
        d.check_source(conn)


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_every_type_decodes_the_same_column_wise(identity: str, dialect: PostgresDialect, pg_admin: Any) -> None:
    pg_admin.execute(TYPES_DDL)
    pg_admin.execute(f"ALTER TABLE types REPLICA IDENTITY {identity}")
    pg_admin.execute("INSERT INTO types VALUES " + TYPE_ROWS[0])  # before the slice
    _start(dialect)
    start = _offset(dialect)
    pg_admin.execute("INSERT INTO types VALUES " + ", ".join(TYPE_ROWS[1:] + EDGE_ROWS))
    pg_admin.execute("UPDATE types SET t = t || '!', r = r * 2, ia = ia || 7 WHERE id IN (1, 2, 10)")
    pg_admin.execute("UPDATE types SET id = 20, b = NOT b WHERE id = 11")  # a key update: a delete and a create
    pg_admin.execute("UPDATE types SET i2 = 5 WHERE id = 3")
    pg_admin.execute("DELETE FROM types WHERE id IN (2, 12)")
    end = _offset(dialect)
    rows = [r for _, _, _, batch in _same(dialect, ["types"], start, end) for r in batch]
    assert [r["op"] for r in rows] == ["c"] * 5 + ["u"] * 3 + ["d", "c"] + ["u", "d", "d"]
    assert rows[2]["after"]["ts"] is None and rows[3]["after"]["dt"] is None  # -infinity, 0044 BC


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_unchanged_toast_values_decode_the_same(identity: str, dialect: PostgresDialect, pg_admin: Any) -> None:
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(300_000))
    pg_admin.execute("CREATE TABLE doc (id int PRIMARY KEY, body text, n int, tail text)")
    pg_admin.execute("ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL")
    pg_admin.execute("ALTER TABLE doc ALTER COLUMN tail SET STORAGE EXTERNAL")
    pg_admin.execute(f"ALTER TABLE doc REPLICA IDENTITY {identity}")
    pg_admin.execute("INSERT INTO doc SELECT g, %s, 0, %s FROM generate_series(1, 4) g", (big, big[::-1]))
    _start(dialect)
    start = _offset(dialect)
    with pg_admin.transaction():
        pg_admin.execute("UPDATE doc SET n = 1 WHERE id IN (1, 2)")  # body and tail unchanged: 'u'
        pg_admin.execute("UPDATE doc SET n = 2, tail = 'short' WHERE id = 3")  # body alone unchanged
        pg_admin.execute("INSERT INTO doc VALUES (5, 'small', 5, NULL)")
    pg_admin.execute("UPDATE doc SET n = 3 WHERE id = 4")
    end = _offset(dialect)
    rows = [r for _, _, _, batch in _same(dialect, ["doc"], start, end) for r in batch]
    assert [(r["after"]["id"], r["after"]["body"] == big) for r in rows] == [
        (1, True), (2, True), (3, True), (5, False), (4, True)]
    assert rows[0]["after"]["tail"] == big[::-1] and rows[2]["after"]["tail"] == "short"


def test_transactions_of_several_tables_and_a_truncate_decode_the_same(
        dialect: PostgresDialect, pg_admin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for t in ("a", "b", "skipped"):
        pg_admin.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    _start(dialect)
    pg_admin.execute("CREATE TABLE nokey (x int, v text)")  # after the start-up checks (no chunk key)
    pg_admin.execute("ALTER TABLE nokey REPLICA IDENTITY FULL")
    pg_admin.execute("INSERT INTO a VALUES (100, 'before the slice')")
    start = _offset(dialect)
    with pg_admin.transaction():
        for i in range(1, 8):
            pg_admin.execute("INSERT INTO a VALUES (%s, %s)", (i, f"a{i}"))
            pg_admin.execute("INSERT INTO skipped VALUES (%s, 'not read')", (i,))
            pg_admin.execute("INSERT INTO b VALUES (%s, %s)", (i, None if i % 2 else f"b{i}"))
        pg_admin.execute("INSERT INTO nokey VALUES (1, 'x'), (1, 'x')")
    pg_admin.execute("TRUNCATE b")
    with pg_admin.transaction():
        pg_admin.execute("UPDATE a SET v = 'moved', id = id + 10 WHERE id <= 3")
        pg_admin.execute("UPDATE nokey SET v = 'y'")
        pg_admin.execute("INSERT INTO b VALUES (1, 'again')")
        pg_admin.execute("DELETE FROM a WHERE id = 7")
    pg_admin.execute("ALTER TABLE b REPLICA IDENTITY FULL")  # a Relation message sent again, same columns
    pg_admin.execute("UPDATE b SET v = 'full' WHERE id = 1")
    end = _offset(dialect)
    tables = ["a", "b", "nokey"]
    whole = _same(dialect, tables, start, end)
    assert {t for t, _, _, _ in whole} == {"public.a", "public.b", "public.nokey"}
    monkeypatch.setattr(pg_reader, "STREAM_ROWS", 4)  # pieces that cut transactions
    pieces = _same(dialect, tables, start, end)
    assert len(pieces) > len(whole)
    assert sorted(r["source"]["lsn"] for _, _, _, b in pieces for r in b) == \
        sorted(r["source"]["lsn"] for _, _, _, b in whole for r in b)
    pg_admin.execute("INSERT INTO skipped VALUES (100, 'only a table not read')")
    later = _offset(dialect)
    for decoder in ("columnar", "rows"):
        assert _read(dialect, tables, end, later, decoder) == ([], [])  # messages, none kept


@pytest.mark.parametrize("typname, category, typmod, texts", [
    ("date", "D", -1, ["2024-02-29", "0001-01-01", "infinity", "-infinity", "0044-03-15 BC", "10000-01-01", None]),
    ("time", "D", -1, ["23:59:59.999999", "00:00:00", "24:00:00", "12:00:00.5", None]),
    ("timestamp", "D", -1, ["2024-01-02 03:04:05.678901", "infinity", "0044-03-15 12:00:00 BC", None,
                            "2000-01-01 00:00:00.5", "10000-01-01 00:00:00"]),
    ("timestamptz", "D", -1, ["2024-01-01 21:34:05.5+00", "-infinity", None, "0044-03-15 12:00:00+00 BC"]),
    ("numeric", "N", (12 << 16 | 3) + 4, ["-123456789.125", "NaN", "Infinity", "-Infinity", None, "0.000"]),
    ("numeric", "N", (2 << 16 | 0) + 4, ["99", "-99", "NaN"]),
    ("money", "N", -1, ["-$1,234.50", "$0.00", "$92,233,720,368,547,758.07", None, "($5.00)"]),
    ("bytea", "U", -1, ["\\x00ff10", "\\x", None, "\\xDEADbeef", "not hex"]),
    ("int4[]", "A", -1, ["{1,NULL,3}", "{}", None, "{-2147483648,2147483647}", "[0:1]={1,2}"]),
    ("text[]", "A", -1, ['{"x y",NULL,"q\\"z",""}', "{a,b,NULL}", "{}", '{"NULL",c}', None]),
    ("float8[]", "A", -1, ["{NaN,Infinity,-Infinity,1.5}", "{NULL}"]),
    ("bool[]", "A", -1, ["{t,f,NULL}"]),
    ("date[]", "A", -1, ["{2024-01-01,infinity,NULL}", "{}"]),
    ("timestamptz[]", "A", -1, ['{"2024-01-01 00:00:00+00",NULL}']),
    ("numeric[]", "A", -1, ["{1.5,NaN}"]),
    ("timetz[]", "A", -1, ["{12:00:00+02}"]),
])
def test_the_arrow_kernels_match_the_per_value_parsers(typname: str, category: str, typmod: int,
                                                        texts: list[str | None]) -> None:
    elem = typname[:-2] if category == "A" else None
    name = f"_{elem}" if elem else typname
    column = postgres_column("c", name, typname, True, typmod=typmod, category=category, elem=elem,
                             elem_category="N" if elem in ("int4", "float8", "numeric") else "")
    values = pa.array(texts, pa.string())
    assert _norm(to_arrow(values, column).to_pylist()) == _norm(to_arrow_rows(values, column).to_pylist())
    assert to_arrow(values, column).type == column.arrow
