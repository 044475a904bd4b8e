"""The chunk SELECT -> Arrow fetch layer (chunking/fetch.py) against a real server.

Every installed backend must give the same Arrow table, with exactly the schema
``TableSchema.arrow_schema()`` says, equal both to literal expected values and to what a plain
pymysql ``SELECT *`` gives after conversion. Backends that are not installed are skipped with a
reason (``-ra`` lists them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pymysql
import pytest

from binlog.mysql.connection import Endpoint
from binlog.mysql.fetch import (
    BackendName,
    available_backends,
    choose_backend,
    fetch_arrow,
    render_sql,
    sql_literal,
)
from binlog.mysql.keys import range_predicate
from binlog.mysql.types import load_table_schema, quoted_table
from cdc.model.errors import AuthenticationFailed, ConfigError, TableNotFound
from cdc.model.schema import Column, TableId, TableSchema

BACKENDS = ["connectorx", "mysqlclient", "pymysql"]
UTC = dt.timezone.utc

TYPES_DDL = """
CREATE TABLE types (
  id INT PRIMARY KEY,
  i8 TINYINT, u8 TINYINT UNSIGNED, b1 TINYINT(1), i16 SMALLINT, u16 SMALLINT UNSIGNED,
  i24 MEDIUMINT, u24 MEDIUMINT UNSIGNED, i32 INT, u32 INT UNSIGNED,
  i64 BIGINT, u64 BIGINT UNSIGNED,
  d10 DECIMAL(10,2), d28 DECIMAL(28,10), d38 DECIMAL(38,10), d65 DECIMAL(65,30),
  f FLOAT, db DOUBLE,
  d DATE, d2 DATE, dtm DATETIME(6), dtm0 DATETIME, ts TIMESTAMP(6) NULL DEFAULT NULL,
  tm TIME(6), y YEAR,
  ch CHAR(10), vc VARCHAR(50), lat VARCHAR(20) CHARACTER SET latin1, tx TEXT,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  en ENUM('a','b','日本'), st SET('x','y','z'), js JSON, bt1 BIT(1), bt64 BIT(64)
) DEFAULT CHARSET=utf8mb4
"""

D65_MAX = "9" * 35 + "." + "9" * 30
D65_TINY = "-0." + "0" * 29 + "1"

# (column -> SQL literal, column -> expected Python value) per row; absent columns are NULL.
ROWS: list[dict[str, tuple[str, Any]]] = [
    {
        "id": ("1", 1), "i8": ("127", 127), "u8": ("255", 255), "b1": ("1", 1),
        "i16": ("32767", 32767), "u16": ("65535", 65535), "i24": ("8388607", 8388607),
        "u24": ("16777215", 16777215), "i32": ("2147483647", 2147483647),
        "u32": ("4294967295", 4294967295), "i64": ("9223372036854775807", 2**63 - 1),
        "u64": ("18446744073709551615", Decimal(2**64 - 1)),
        "d10": ("99999999.99", Decimal("99999999.99")),
        "d28": ("999999999999999999.9999999999", Decimal("999999999999999999.9999999999")),
        "d38": ("9999999999999999999999999999.9999999999",
                Decimal("9999999999999999999999999999.9999999999")),
        "d65": (D65_MAX, D65_MAX),
        "f": ("16777216", 16777216.0), "db": ("0.1e0 + 0.2e0", 0.30000000000000004),
        "d": ("'9999-12-31'", dt.date(9999, 12, 31)), "d2": ("'2024-02-29'", dt.date(2024, 2, 29)),
        "dtm": ("'9999-12-31 23:59:59.999999'", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
        "dtm0": ("'2024-02-29 12:00:00'", dt.datetime(2024, 2, 29, 12)),
        "ts": ("'2038-01-19 03:14:07.999999'", dt.datetime(2038, 1, 19, 3, 14, 7, 999999, UTC)),
        "tm": ("'838:59:59.000000'", dt.timedelta(hours=838, minutes=59, seconds=59)),
        "y": ("2155", 2155), "ch": ("'abc'", "abc"),
        "vc": ("'héllo €😀 日本'", "héllo €😀 日本"), "lat": ("'café'", "café"),
        "tx": ("REPEAT('ab', 5000)", "ab" * 5000),
        "bn": ("X'00ff0102'", b"\x00\xff\x01\x02"), "vb": ("X'ff00'", b"\xff\x00"),
        "bl": ("X'000102ff'", b"\x00\x01\x02\xff"), "en": ("'日本'", "日本"), "st": ("'x,z'", "x,z"),
        "js": ("'{\"a\": [1, 2.5, \"é\"], \"b\": null}'", '{"a": [1, 2.5, "é"], "b": null}'),
        "bt1": ("b'1'", b"\x01"), "bt64": ("X'ffffffffffffffff'", b"\xff" * 8),
    },
    {
        "id": ("2", 2), "i8": ("-128", -128), "u8": ("0", 0), "b1": ("0", 0),
        "i16": ("-32768", -32768), "u16": ("0", 0), "i24": ("-8388608", -8388608),
        "u24": ("0", 0), "i32": ("-2147483648", -2147483648), "u32": ("0", 0),
        "i64": ("-9223372036854775808", -(2**63)), "u64": ("0", Decimal(0)),
        "d10": ("-99999999.99", Decimal("-99999999.99")),
        "d28": ("-999999999999999999.9999999999", Decimal("-999999999999999999.9999999999")),
        "d38": ("-0.0000000001", Decimal("-0.0000000001")),
        "d65": (D65_TINY, D65_TINY),
        "f": ("-3.4028234e38", -3.4028234663852886e38), "db": ("4.9406564584124654e-324", 5e-324),
        "d": ("'0001-01-01'", dt.date(1, 1, 1)), "d2": ("'1000-01-01'", dt.date(1000, 1, 1)),
        "dtm": ("'0001-01-01 00:00:00'", dt.datetime(1, 1, 1)),
        "dtm0": ("'1000-01-01 00:00:01'", dt.datetime(1000, 1, 1, 0, 0, 1)),
        "ts": ("'1970-01-01 00:00:01'", dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        "tm": ("'-838:59:59.000000'", -dt.timedelta(hours=838, minutes=59, seconds=59)),
        "y": ("1901", 1901), "ch": ("''", ""), "vc": ("''", ""), "lat": ("''", ""),
        "tx": ("''", ""), "bn": ("X'00000000'", b"\x00" * 4), "vb": ("X''", b""),
        "bl": ("X''", b""), "en": ("'a'", "a"), "st": ("''", ""), "js": ("'[]'", "[]"),
        "bt1": ("b'0'", b"\x00"), "bt64": ("b'0'", b"\x00" * 8),
    },
    {"id": ("3", 3)},  # NULL in every nullable column
    {   # values with no calendar date read as NULL; odd but valid values of other types
        "id": ("4", 4), "b1": ("2", 2), "f": ("0.1", 0.10000000149011612),
        "d": ("'0000-00-00'", None), "d2": ("'0000-01-01'", None),
        "dtm": ("'0000-00-00 00:00:00'", None), "dtm0": ("'2024-02-30 01:00:00'", None),
        "ts": ("'0000-00-00 00:00:00'", None),
        "tm": ("'100:00:00.5'", dt.timedelta(hours=100, milliseconds=500)),
        "y": ("0", 0), "ch": ("'pad  '", "pad"), "vc": ("'pad  '", "pad  "),
        "d38": ("1.5", Decimal("1.5000000000")), "d65": ("1.5", "1." + "5" + "0" * 29),
    },
    {
        "id": ("5", 5), "d": ("'2024-00-10'", None), "d2": ("'2023-02-29'", None),
        "dtm": ("'2024-05-00 10:00:00.5'", None),
        "tm": ("'-00:00:00.000001'", dt.timedelta(microseconds=-1)),
        "ts": ("'2024-06-30 23:59:59.5'", dt.datetime(2024, 6, 30, 23, 59, 59, 500000, UTC)),
    },
]


def backend_param(name: str) -> Any:
    missing = name not in available_backends()
    return pytest.param(name, marks=pytest.mark.skipif(missing, reason=f"{name} not installed"))


ALL_BACKENDS = [backend_param(b) for b in BACKENDS]


def read_table(cdc: Endpoint, schema: TableSchema, backend: BackendName, where: str = "TRUE",
               params: tuple[Any, ...] = (), batch_rows: int = 65536) -> pa.Table:
    batches = list(fetch_arrow(cdc, schema, where, params, batch_rows=batch_rows, backend=backend))
    for b in batches:
        assert b.schema == schema.arrow_schema()
        assert 0 < b.num_rows <= batch_rows
    return pa.Table.from_batches(batches, schema=schema.arrow_schema())


def schema_of(cdc: Endpoint, database: str, table: str) -> TableSchema:
    with contextlib.closing(cdc.connect()) as conn:
        return load_table_schema(conn, TableId(database, table))


@pytest.fixture
def types_schema(admin: pymysql.connections.Connection, database: str,
                 cdc_endpoint: Endpoint) -> TableSchema:
    with admin.cursor() as cur:
        cur.execute(TYPES_DDL)
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")  # lets zero dates in
        for row in ROWS:
            names = ", ".join(f"`{c}`" for c in row)
            cur.execute(f"INSERT INTO types ({names}) VALUES ({', '.join(v[0] for v in row.values())})")
    return schema_of(cdc_endpoint, database, "types")


def expected_table(schema: TableSchema) -> pa.Table:
    rows = [{c: row.get(c, (None, None))[1] for c in schema.column_names} for row in ROWS]
    return pa.Table.from_pylist(rows, schema=schema.arrow_schema())


def plain_pymysql_table(cdc: Endpoint, schema: TableSchema) -> pa.Table:
    """``SELECT *`` through pymysql's converters, turned into Arrow value by value."""
    with contextlib.closing(cdc.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {quoted_table(schema.table_id)} ORDER BY id")
        rows = cur.fetchall()
    columns = [
        pa.array([plain_value(col, row[i]) for row in rows], type=col.arrow_type())
        for i, col in enumerate(schema.columns)
    ]
    return pa.Table.from_arrays(columns, schema=schema.arrow_schema())


def plain_value(col: Column, value: Any) -> Any:
    if value is None:
        return None
    if col.data_type in ("date", "datetime", "timestamp") and isinstance(value, str):
        return None  # pymysql leaves dates Python cannot represent as text
    if col.data_type == "timestamp":
        return value.replace(tzinfo=UTC)  # the session time zone is UTC
    if col.arrow_type() == pa.bool_():
        return bool(value)
    if isinstance(value, Decimal) and col.arrow_type() == pa.string():
        return format(value, "f")
    return value


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_every_type_reads_exactly(backend: BackendName, types_schema: TableSchema,
                                  cdc_endpoint: Endpoint) -> None:
    got = read_table(cdc_endpoint, types_schema, backend).sort_by("id")
    expected = expected_table(types_schema)
    assert got.schema == types_schema.arrow_schema()
    for name in types_schema.column_names:
        assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert got.equals(expected)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_equals_plain_pymysql_select(backend: BackendName, types_schema: TableSchema,
                                     cdc_endpoint: Endpoint) -> None:
    got = read_table(cdc_endpoint, types_schema, backend).sort_by("id")
    plain = plain_pymysql_table(cdc_endpoint, types_schema)
    for name in types_schema.column_names:
        if name == "f":
            continue  # MariaDB's text protocol rounds FLOAT to 6 digits; we read it exactly
        assert got.column(name).equals(plain.column(name)), name


@pytest.fixture
def global_setting(mysql_server: Any) -> Iterator[Callable[[str, str], None]]:
    """Set a GLOBAL server variable for new connections; restored after the test."""
    saved: dict[str, Any] = {}
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:

        def set_global(name: str, value: str) -> None:
            cur.execute(f"SELECT @@GLOBAL.{name}")
            saved.setdefault(name, cur.fetchone()[0])
            cur.execute(f"SET GLOBAL {name} = %s", (value,))

        try:
            yield set_global
        finally:
            for name, value in saved.items():
                cur.execute(f"SET GLOBAL {name} = %s", (value,))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_timestamp_is_utc_whatever_the_server_time_zone(
    backend: BackendName, types_schema: TableSchema, cdc_endpoint: Endpoint,
    global_setting: Callable[[str, str], None],
) -> None:
    global_setting("time_zone", "+05:30")
    got = read_table(cdc_endpoint, types_schema, backend).sort_by("id")
    expected = expected_table(types_schema)
    assert got.column("ts").equals(expected.column("ts"))
    assert got.column("dtm").equals(expected.column("dtm"))  # DATETIME: wall clock, unshifted


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_global_sql_mode_does_not_change_values(
    backend: BackendName, types_schema: TableSchema, cdc_endpoint: Endpoint,
    global_setting: Callable[[str, str], None],
) -> None:
    global_setting("sql_mode", "PAD_CHAR_TO_FULL_LENGTH,ANSI,NO_BACKSLASH_ESCAPES")
    got = read_table(cdc_endpoint, types_schema, backend, "ch = %s OR id > %s", ("abc", 1))
    assert got.sort_by("id").equals(expected_table(types_schema))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_batches_respect_batch_rows(backend: BackendName, admin: pymysql.connections.Connection,
                                    database: str, cdc_endpoint: Endpoint) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE seq (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.executemany("INSERT INTO seq VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, 1001)])
    schema = schema_of(cdc_endpoint, database, "seq")
    batches = list(fetch_arrow(cdc_endpoint, schema, "id > %s", (0,), batch_rows=300,
                               backend=backend))
    assert [b.num_rows for b in batches] == [300, 300, 300, 100]
    ids = pa.Table.from_batches(batches).column("id").to_pylist()
    assert sorted(ids) == list(range(1, 1001))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_empty_range_yields_no_batch(backend: BackendName, types_schema: TableSchema,
                                     cdc_endpoint: Endpoint) -> None:
    batches = fetch_arrow(cdc_endpoint, types_schema, "id > %s", (10**9,),
                          backend=backend)
    assert list(batches) == []


NASTY = ["'", "\\", "\\'", "''", "' OR 1=1 -- ", "%s", "%%", "a\"b", "\n\r\t", "\x00z",
         "😀", "ß", "日本語", "`", "\\\\'; DROP TABLE nasty; --"]


@pytest.fixture
def nasty_schema(admin: pymysql.connections.Connection, database: str,
                 cdc_endpoint: Endpoint) -> TableSchema:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE nasty (`k%``ey` VARCHAR(40) COLLATE utf8mb4_bin PRIMARY KEY, "
                    "n INT, raw VARBINARY(40)) DEFAULT CHARSET=utf8mb4")
        cur.executemany("INSERT INTO nasty VALUES (%s, %s, %s)",
                        [(s, i, s.encode()) for i, s in enumerate(NASTY)])
    return schema_of(cdc_endpoint, database, "nasty")


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("no_backslash_escapes", [False, True])
def test_nasty_literals_are_bound_safely(
    backend: BackendName, no_backslash_escapes: bool, nasty_schema: TableSchema,
    cdc_endpoint: Endpoint, global_setting: Callable[[str, str], None],
) -> None:
    if no_backslash_escapes:
        global_setting("sql_mode", "NO_BACKSLASH_ESCAPES")
    with contextlib.closing(cdc_endpoint.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT `k%``ey` FROM {quoted_table(nasty_schema.table_id)} ORDER BY 1")
        ordered = [r[0] for r in cur.fetchall()]  # the server's order, PAD SPACE included
    for i, value in enumerate(ordered):
        end = ordered[i + 1] if i + 1 < len(ordered) else None
        where, params = range_predicate("k%`ey", value, end)
        got = read_table(cdc_endpoint, nasty_schema, backend, where, params)
        assert got.column("k%`ey").to_pylist() == [value]
        got = read_table(cdc_endpoint, nasty_schema, backend, "raw = %s", (value.encode(),))
        assert got.column("n").to_pylist() == [NASTY.index(value)]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_auto_falls_back_for_columns_a_backend_cannot_read(
    backend: BackendName, admin: pymysql.connections.Connection, database: str,
    cdc_endpoint: Endpoint,
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE geo (id INT PRIMARY KEY, p POINT)")
        cur.execute("INSERT INTO geo VALUES (1, POINT(1.5, -2)), (2, NULL)")
        cur.execute("SELECT p FROM geo ORDER BY id")
        stored = [r[0] for r in cur.fetchall()]
    schema = schema_of(cdc_endpoint, database, "geo")
    assert choose_backend(schema, "auto").name != "connectorx"
    if backend == "connectorx":
        with pytest.raises(ConfigError, match=r"cannot read column\(s\) p \(point\)"):
            choose_backend(schema, "connectorx")
        return
    got = read_table(cdc_endpoint, schema, backend).sort_by("id")
    assert got.column("p").to_pylist() == stored


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_missing_table_raises_table_not_found(backend: BackendName, types_schema: TableSchema,
                                              admin: pymysql.connections.Connection,
                                              cdc_endpoint: Endpoint) -> None:
    with admin.cursor() as cur:
        cur.execute("DROP TABLE types")
    with pytest.raises(TableNotFound, match="types"):
        list(fetch_arrow(cdc_endpoint, types_schema, backend=backend))


# connectorx's connection pool retries a refused login for 30 s before failing: not tested here.
@pytest.mark.parametrize("backend", ["mysqlclient", "pymysql"])
def test_wrong_password_raises_authentication_failed(backend: BackendName, types_schema: TableSchema,
                                                     cdc_endpoint: Endpoint) -> None:
    if backend not in available_backends():
        pytest.skip(f"{backend} not installed")
    wrong = replace(cdc_endpoint, user=cdc_endpoint.user, password="not-the-password")
    with pytest.raises(AuthenticationFailed) as info:
        list(fetch_arrow(wrong, types_schema, backend=backend))
    assert "not-the-password" not in str(info.value)


@pytest.fixture
def odd_password_user(admin: pymysql.connections.Connection, database: str,
                      cdc_endpoint: Endpoint) -> Iterator[Endpoint]:
    """A user whose name and password hold every character that means something in a URI.

    ASCII only: pymysql sends a str password encoded as latin-1 (cdc/connection.py passes str).
    """
    user, password = "odd@user:/", "p@ss:w/rd?#%&+ =;'\\"
    hosts = ("localhost", "127.0.0.1", "%")
    with admin.cursor() as cur:
        for host in hosts:
            cur.execute("CREATE USER %s@%s IDENTIFIED BY %s", (user, host, password))
            cur.execute(f"GRANT SELECT ON `{database}`.* TO %s@%s", (user, host))
    try:
        yield replace(cdc_endpoint, user=user, password=password)
    finally:
        with admin.cursor() as cur:
            for host in hosts:
                cur.execute("DROP USER %s@%s", (user, host))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_credentials_with_uri_characters(backend: BackendName, types_schema: TableSchema,
                                         odd_password_user: Endpoint) -> None:
    got = read_table(odd_password_user, types_schema, backend, "id = %s", (1,))
    assert got.column("id").to_pylist() == [1]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_abandoned_read_closes_its_connection(backend: BackendName, admin: pymysql.connections.Connection,
                                              database: str,
                                              cdc_endpoint: Endpoint) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v CHAR(200))")
        cur.executemany("INSERT INTO big VALUES (%s, %s)", [(i, "x") for i in range(1, 20001)])
    schema = schema_of(cdc_endpoint, database, "big")
    batches = fetch_arrow(cdc_endpoint, schema, batch_rows=100,
                          backend=backend)
    assert next(batches).num_rows == 100
    batches.close()
    deadline = time.monotonic() + 10
    while reader_connections(admin, cdc_endpoint.user) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reader_connections(admin, cdc_endpoint.user) == 0


def reader_connections(admin: pymysql.connections.Connection, user: str) -> int:
    with admin.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s "
                    "AND INFO LIKE 'SELECT%%big%%'", (user,))
        (count,) = cur.fetchone() or (0,)
        return int(count)


def test_bad_options_raise_config_error(types_schema: TableSchema,
                                        cdc_endpoint: Endpoint) -> None:
    with pytest.raises(ConfigError, match="unknown backend 'odbc'"):
        fetch_arrow(cdc_endpoint, types_schema, backend="odbc")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="batch_rows"):
        fetch_arrow(cdc_endpoint, types_schema, batch_rows=0)


def test_sql_literals() -> None:
    assert sql_literal(None) == "NULL"
    assert sql_literal(True) == "1"
    assert sql_literal(-(2**70)) == str(-(2**70))
    assert sql_literal(Decimal("1E+3")) == "1000"
    assert sql_literal(Decimal("-0.000001")) == "-0.000001"
    assert sql_literal(1e-5) == "1e-05"
    assert sql_literal("it's") == "_utf8mb4 X'69742773'"
    assert sql_literal(b"\x00'") == "X'0027'"
    assert sql_literal(dt.date(2024, 2, 29)) == "'2024-02-29'"
    aware = dt.datetime(2024, 1, 1, 5, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    assert sql_literal(aware) == "'2024-01-01 00:00:00.000000'"
    assert sql_literal(dt.timedelta(hours=-100, microseconds=1)) == "'-99:59:59.999999'"
    assert sql_literal(dt.time(1, 2, 3)) == "'01:02:03.000000'"
    assert render_sql("`a%%` >= %s AND b < %s", ("x", 2)) == "`a%` >= _utf8mb4 X'78' AND b < 2"
    for bad in (float("nan"), float("inf"), Decimal("NaN")):
        with pytest.raises(ValueError):
            sql_literal(bad)
    with pytest.raises(TypeError):
        sql_literal(object())
    with pytest.raises(TypeError):
        render_sql("a = %s", ())
