"""Type fidelity through the whole pipeline: snapshot == binlog == SELECT, for every column type.

One table, ``every_type``, holds a column of every MySQL/MariaDB type and rows of edge values
(min, max, zero, NULL, fractional seconds, multi-byte UTF-8, zero and invalid dates). The test

1. runs the pipeline: the snapshot writes ``op='r'`` rows to the changelog and the Delta mirror;
2. updates every row so that only the ``touch`` column changes, then runs again: the binlog's
   after image of each ``u`` event must equal the snapshot row;
3. compares, column by column, the ``r`` after image, the ``u`` after image, the mirror row and a
   direct ``SELECT`` converted by :func:`select_rows`;
4. encodes the ``r`` and ``u`` records as Debezium JSON and asserts identical ``after`` payloads,
   then spot-checks documented Debezium encodings.

It runs against the session server (time zone UTC) and against a server started with
``--default-time-zone=+05:30`` whose rows are written in the server's own zone. docs/sources/types.md is
the type table these tests prove.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
from pipeline import Pipeline
from pyspark.sql.pandas.types import from_arrow_type

from binlog.mysql.convert import value_converter
from binlog.mysql.positions import ChangePosition
from binlog.mysql.types import mysql_column
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.debezium.codec import encode_value, record_from_event
from cdc.model.debezium.connect import DebeziumOptions
from cdc.model.events import ChangeEvent
from cdc.model.schema import Column, TableId, TableSchema
from sinks.changes import mirror_schema

UTC = dt.timezone.utc
FSP = range(7)
SPATIAL = ("geo", "pt", "ls", "pg", "mpt", "mls", "mpg", "gc")

DDL = """
CREATE TABLE every_type (
  id INT PRIMARY KEY, touch INT NOT NULL DEFAULT 0,
  i8 TINYINT, u8 TINYINT UNSIGNED, z8 TINYINT(3) ZEROFILL, flag BOOLEAN, flag1 TINYINT(1),
  i16 SMALLINT, u16 SMALLINT UNSIGNED, z16 SMALLINT(5) ZEROFILL,
  i24 MEDIUMINT, u24 MEDIUMINT UNSIGNED, z24 MEDIUMINT(8) ZEROFILL,
  i32 INT, u32 INT UNSIGNED, z32 INT(10) ZEROFILL,
  i64 BIGINT, u64 BIGINT UNSIGNED, z64 BIGINT(20) ZEROFILL,
  f FLOAT, db DOUBLE, re REAL,
  d10 DECIMAL(10,2), d38 DECIMAL(38,10), d65 DECIMAL(65,30), d65i DECIMAL(65,0),
  bt1 BIT(1), bt10 BIT(10), bt64 BIT(64),
  ch CHAR(10), vc VARCHAR(50), lat VARCHAR(20) CHARACTER SET latin1,
  ttx TINYTEXT, tx TEXT, mtx MEDIUMTEXT, ltx LONGTEXT,
  bn BINARY(4), vb VARBINARY(10), tbl TINYBLOB, bl BLOB, mbl MEDIUMBLOB, lbl LONGBLOB,
  d DATE, {time_columns},
  y YEAR, en ENUM('a','b','日本'), st SET('x','y','z'), js JSON,
  geo GEOMETRY, pt POINT, ls LINESTRING, pg POLYGON, mpt MULTIPOINT, mls MULTILINESTRING,
  mpg MULTIPOLYGON, gc GEOMETRYCOLLECTION
) DEFAULT CHARSET=utf8mb4
""".format(time_columns=", ".join(
    f"t{n} TIME({n}), dt{n} DATETIME({n}), ts{n} TIMESTAMP({n}) NULL DEFAULT NULL" for n in FSP))


def utc(text: str) -> str:
    """A TIMESTAMP literal meaning the UTC instant ``text`` in whatever the session zone is."""
    return f"CONVERT_TZ('{text}', '+00:00', @@session.time_zone)"


def every_fsp(prefix: str, literal: str) -> dict[str, str]:
    return {f"{prefix}{n}": literal for n in FSP}


# Column -> SQL literal, one dict per row; absent columns are NULL.
ROWS: list[dict[str, str]] = [
    {   # maxima, multi-byte text, fractional seconds at their widest
        "id": "1", "i8": "127", "u8": "255", "z8": "7", "flag": "TRUE", "flag1": "1",
        "i16": "32767", "u16": "65535", "z16": "65535", "i24": "8388607", "u24": "16777215",
        "z24": "42", "i32": "2147483647", "u32": "4294967295", "z32": "4294967295",
        "i64": "9223372036854775807", "u64": "18446744073709551615",
        "z64": "18446744073709551615",
        "f": "3.4028234e38", "db": "1.7976931348623157e308", "re": "0.1e0 + 0.2e0",
        "d10": "99999999.99", "d38": "9999999999999999999999999999.9999999999",
        "d65": "9" * 35 + "." + "9" * 30, "d65i": "9" * 65,
        "bt1": "b'1'", "bt10": "b'1010000001'", "bt64": "X'ffffffffffffffff'",
        "ch": "'héllo€😀'", "vc": "'日本語🙂 trailing  '", "lat": "'café'",
        "ttx": "'ä'", "tx": "REPEAT('ab', 5000)", "mtx": "REPEAT('€', 70000)",
        "ltx": "'🙂 long'", "bn": "X'00ff0102'", "vb": "X'ff00'", "tbl": "X'01'",
        "bl": "X'000102ff'", "mbl": "REPEAT(X'ff', 70000)", "lbl": "X'00'",
        "d": "'9999-12-31'", **every_fsp("t", "'838:59:59'"),
        **every_fsp("dt", "'9999-12-31 23:59:59.999999'"),
        **every_fsp("ts", utc("2038-01-19 03:14:07.999999")),
        "y": "2155", "en": "'日本'", "st": "'x,z'", "js": "'{\"a\": [1, 2.5, \"é\"], \"b\": null}'",
        "geo": "ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))', 4326)",
        "pt": "ST_GeomFromText('POINT(1.5 -2.25)', 4326)",
        "ls": "ST_GeomFromText('LINESTRING(0 0,1 1,2 0)')",
        "pg": "ST_GeomFromText('POLYGON((0 0,3 0,3 3,0 0),(1 1,2 1,2 2,1 1))')",
        "mpt": "ST_GeomFromText('MULTIPOINT(0 0,1 1)')",
        "mls": "ST_GeomFromText('MULTILINESTRING((0 0,1 1),(2 2,3 3))')",
        "mpg": "ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 0)))')",
        "gc": "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))')",
    },
    {   # minima
        "id": "2", "i8": "-128", "u8": "0", "z8": "0", "flag": "FALSE", "flag1": "0",
        "i16": "-32768", "u16": "0", "z16": "0", "i24": "-8388608", "u24": "0", "z24": "0",
        "i32": "-2147483648", "u32": "0", "z32": "0", "i64": "-9223372036854775808", "u64": "0",
        "z64": "0", "f": "-3.4028234e38", "db": "-1.7976931348623157e308",
        "re": "4.9406564584124654e-324", "d10": "-99999999.99", "d38": "-0.0000000001",
        "d65": "-0." + "0" * 29 + "1", "d65i": "-" + "9" * 65,
        "bt1": "b'0'", "bt10": "b'0'", "bt64": "b'0'",
        "ch": "''", "vc": "''", "lat": "''", "ttx": "''", "tx": "''", "mtx": "''", "ltx": "''",
        "bn": "X''", "vb": "X''", "tbl": "X''", "bl": "X''", "mbl": "X''", "lbl": "X''",
        "d": "'0001-01-01'", **every_fsp("t", "'-838:59:59'"),
        **every_fsp("dt", "'0001-01-01 00:00:00'"), **every_fsp("ts", utc("1970-01-01 00:00:01")),
        "y": "1901", "en": "'a'", "st": "''", "js": "'[]'",
        "geo": "ST_GeomFromText('POINT(0 0)')", "pt": "ST_GeomFromText('POINT(0 0)')",
    },
    {"id": "3"},  # NULL in every nullable column
    {   # zeros, zero dates (read as NULL by both phases), odd values
        "id": "4", "i8": "0", "u8": "0", "flag": "2", "flag1": "-1", "i64": "0", "u64": "0",
        "f": "0", "db": "-0e0", "d10": "0", "d38": "0", "d65": "0", "d65i": "0",
        "ch": "'pad  '", "vc": "'pad  '", "d": "'0000-00-00'",
        **every_fsp("t", "'00:00:00'"), **every_fsp("dt", "'0000-00-00 00:00:00'"),
        **every_fsp("ts", "'0000-00-00 00:00:00'"), "y": "0", "en": "''", "js": "'null'",
    },
    {   # fractional seconds, over 24 h, negative fractions, month/day zero, an invalid date
        "id": "5", "f": "16777216", "db": "0.1", "re": "2.5", "d10": "0.01",
        "d38": "1.5", "d65": "1.5", "d": "'2024-00-10'", "flag": "1",
        **every_fsp("t", "'-12:34:56.123456'"),
        **every_fsp("dt", "'2024-02-29 12:34:56.123456'"),
        **every_fsp("ts", utc("2024-02-29 12:34:56.123456")),
        "y": "2024", "en": "'b'", "st": "'y'", "ch": "'日本'",
    },
    {   # dates the calendar lacks, allowed by ALLOW_INVALID_DATES: NULL in both phases
        "id": "6", "d": "'2024-02-30'", **every_fsp("dt", "'2024-05-00 10:00:00.5'"),
        **every_fsp("t", "'100:00:00.654321'"),
    },
]
# A wall clock written in the server's zone: TIMESTAMP converts it, DATETIME keeps it.
LOCAL_ROW = {"id": "7", **every_fsp("ts", "'2020-01-01 10:00:00'"),
             **every_fsp("dt", "'2020-01-01 10:00:00'")}


def populate(box: Sandbox, database: str) -> None:
    """Create ``every_type`` and insert :data:`ROWS`, in a session using the server's time zone."""
    with contextlib.closing(box.admin.connect(
            database, init_command="SET sql_mode = 'ALLOW_INVALID_DATES'")) as conn, \
            conn.cursor() as cur:
        cur.execute(DDL)
        for row in [*ROWS, LOCAL_ROW]:
            names = ", ".join(f"`{c}`" for c in row)
            cur.execute(f"INSERT INTO every_type ({names}) VALUES ({', '.join(row.values())})")


def touch_every_row(box: Sandbox, database: str) -> None:
    """Rewrite every row with every column unchanged except ``touch``."""
    with contextlib.closing(box.admin.connect(
            database, init_command="SET sql_mode = 'ALLOW_INVALID_DATES'")) as conn, \
            conn.cursor() as cur:
        cur.execute("UPDATE every_type SET touch = touch + 1")


def select_rows(box: Sandbox, schema: TableSchema) -> pa.Table:
    """A direct ``SELECT *`` (CDC user, session time zone UTC) converted to the Arrow schema.

    The conversion of pymysql's values: a DATE/DATETIME/TIMESTAMP pymysql cannot represent (it
    returns the text, e.g. ``0000-00-00``) is NULL; TIMESTAMP values are UTC instants (the session
    zone is UTC); DECIMAL wider than 38 digits is its plain text; FLOAT is
    selected as ``f + 0e0`` because the text protocol prints FLOAT with 6 digits only. Everything
    else is pymysql's own value (int, float, Decimal, str, bytes, date, datetime, timedelta).
    """
    items = [f"(`{c.name}` + 0e0)" if c.data_type == "float" else f"`{c.name}`"
             for c in schema.columns]
    with contextlib.closing(box.cdc.connect(schema.table_id.db)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(items)} FROM every_type ORDER BY id")
        rows = cur.fetchall()
    arrays = [pa.array([plain(c, r[i]) for r in rows], type=c.arrow_type())
              for i, c in enumerate(schema.columns)]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema())


def plain(col: Any, value: Any) -> Any:
    if value is None:
        return None
    if col.data_type in ("date", "datetime", "timestamp") and isinstance(value, str):
        return None
    if col.data_type == "timestamp":
        return value.replace(tzinfo=UTC)
    if col.data_type == "float":
        return struct.unpack("f", struct.pack("f", value))[0]
    if isinstance(value, Decimal) and col.arrow_type() == pa.string():
        return format(value, "f")
    return value


def by_id(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in rows}


def images(p: Pipeline, op: str) -> dict[int, dict[str, Any]]:
    """The ``after`` images of the changelog's ``op`` rows, in storage types, by id."""
    log = p.changelog("every_type")
    return by_id([r["after"] for r in log.to_pylist() if r["op"] == op])


def event_rows(p: Pipeline, schema: TableSchema) -> list[dict[str, Any]]:
    """Changelog rows with before/after converted back to event values (TIME as timedelta)."""
    log = p.changelog("every_type")
    out = []
    for image in ("before", "after"):
        column = log[image]
        flat = pa.Table.from_arrays(column.flatten(), names=[f.name for f in column.type])
        out.append(flat.cast(schema.arrow_schema()).to_pylist())
    ops, sources = log["op"].to_pylist(), log["source"].to_pylist()
    return [{"op": op, "before": b if op in "ud" else None, "after": a if op in "cur" else None,
             "source": s} for op, b, a, s in zip(ops, *out, sources, strict=True)]


def change_event(schema: TableSchema, row: dict[str, Any]) -> ChangeEvent:
    s = row["source"]
    position = None if row["op"] == "r" else ChangePosition(s["file"], s["pos"], s["row"])
    return ChangeEvent(schema.table_id, row["op"], row["before"], row["after"], position, s["ts_ms"],
                       {k: s[k] for k in ("server_id", "gtid", "file", "pos", "row", "thread", "query")})


def debezium_after(schema: TableSchema, row: dict[str, Any], options: DebeziumOptions) -> Any:
    s = row["source"]
    record = record_from_event(change_event(schema, row), connector_name="types",
                               offset={"file": s["file"], "pos": s["pos"]})
    return json.loads(encode_value(record, schema, schemas_enabled=False, options=options))["after"]


def check_fidelity(p: Pipeline, box: Sandbox) -> TableSchema:
    """Snapshot, touch, stream; assert r == u == mirror == SELECT column by column."""
    populate(box, p.database)
    p.run()
    schema = p.schemas()[TableId(p.database, "every_type")]
    snapshot_mirror = by_id(p.mirror("every_type").to_pylist())
    touch_every_row(box, p.database)
    p.run()
    storage = mirror_schema(schema)
    selected = by_id(select_rows(box, schema).cast(storage).to_pylist())
    reads, updates = images(p, "r"), images(p, "u")
    mirror = p.mirror("every_type")
    assert mirror.schema.remove_metadata() == storage.remove_metadata()
    final = by_id(mirror.to_pylist())
    assert set(reads) == set(updates) == set(final) == set(selected) == set(range(1, 8))
    for key, row in selected.items():
        for name in schema.column_names:
            want = row[name]
            if name == "touch":
                assert (reads[key][name], snapshot_mirror[key][name]) == (want - 1, want - 1)
                assert (updates[key][name], final[key][name]) == (want, want)
                continue
            got = {"snapshot r": reads[key][name], "binlog u": updates[key][name],
                   "mirror after snapshot": snapshot_mirror[key][name],
                   "mirror after update": final[key][name]}
            assert all(v == want and type(v) is type(want) for v in got.values()), (
                f"id={key} {name} ({schema.column(name).column_type}): SELECT {want!r}, {got}")
    return schema


def check_debezium(p: Pipeline, schema: TableSchema) -> dict[int, dict[str, Any]]:
    """The r and u records of each row encode to the same ``after`` JSON, in every mode."""
    rows = event_rows(p, schema)
    reads = {r["after"]["id"]: r for r in rows if r["op"] == "r"}
    updates = {r["after"]["id"]: r for r in rows if r["op"] == "u"}
    modes = [DebeziumOptions(), DebeziumOptions(decimal_handling_mode="string"),
             DebeziumOptions(decimal_handling_mode="double")]
    default: dict[int, dict[str, Any]] = {}
    for options in modes:
        for key, read in reads.items():
            r_after = debezium_after(schema, read, options)
            u_after = debezium_after(schema, updates[key], options)
            assert r_after.pop("touch") + 1 == u_after.pop("touch")
            assert r_after == u_after, (key, options)
            if options == modes[0]:
                default[key] = r_after
    return default


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def check_documented_encodings(encoded: dict[int, dict[str, Any]]) -> None:
    """Spot checks of Debezium's documented JSON values (default options)."""
    top, low, zero = encoded[1], encoded[2], encoded[4]
    assert top["d"] == 2932896 and low["d"] == -719162  # io.debezium.time.Date: epoch days
    assert top["dt3"] == 253402300799999 and top["dt0"] == 253402300799000  # Timestamp: ms
    assert top["dt6"] == 253402300799999999 and top["dt4"] == 253402300799999900  # Micro: µs
    assert encoded[5]["dt6"] == 1709210096123456
    assert top["ts0"] == "2038-01-19T03:14:07Z" and top["ts6"] == "2038-01-19T03:14:07.999999Z"
    assert top["ts3"] == "2038-01-19T03:14:07.999Z" and low["ts2"] == "1970-01-01T00:00:01.00Z"
    assert top["t0"] == 3020399000000 and low["t6"] == -3020399000000  # MicroTime: µs
    assert encoded[6]["t6"] == 360000654321 and encoded[5]["t3"] == -45296123000
    assert top["d10"] == b64((9999999999).to_bytes(5, "big", signed=True))  # Decimal: unscaled
    assert low["d10"] == b64((-9999999999).to_bytes(5, "big", signed=True))
    assert top["u64"] == b64((2**64 - 1).to_bytes(9, "big", signed=True))
    assert top["bt1"] is True and low["bt1"] is False  # BIT(1): boolean
    assert top["bt10"] == b64(b"\x81\x02") and top["bt64"] == b64(b"\xff" * 8)  # Bits: LE bytes
    assert top["flag"] == 1 and zero["flag"] == 2 and low["flag1"] == 0 and zero["flag1"] == -1  # INT16: lossless
    assert top["y"] == 2155 and zero["y"] == 0 and top["en"] == "日本" and top["st"] == "x,z"
    assert top["bn"] == b64(b"\x00\xff\x01\x02") and low["bn"] == b64(b"\x00" * 4)
    assert top["pt"] == {"x": 1.5, "y": -2.25, "srid": 4326,
                         "wkb": b64(bytes.fromhex("0101000000") + struct.pack("<dd", 1.5, -2.25))}
    assert top["geo"]["srid"] == 4326 and set(top["geo"]) == {"wkb", "srid"}
    assert all(encoded[3][c] is None for c in encoded[3] if c not in ("id", "touch"))
    for column in ("d", "dt0", "dt6", "ts0", "ts6"):
        assert zero[column] is None, column  # zero dates are NULL


def check_values(p: Pipeline, *, local_offset: dt.timedelta) -> None:
    """Literal expectations the SELECT comparison alone would not catch (shifted instants...)."""
    rows = by_id(p.mirror("every_type").to_pylist())
    top, low, zero, frac, local = rows[1], rows[2], rows[4], rows[5], rows[7]
    assert top["u64"] == top["z64"] == Decimal(2**64 - 1) and top["z8"] == 7
    assert top["f"] == 3.4028234663852886e38 and frac["f"] == 16777216.0
    assert top["d65"] == "9" * 35 + "." + "9" * 30 and top["d65i"] == "9" * 65
    assert top["ts6"] == dt.datetime(2038, 1, 19, 3, 14, 7, 999999, UTC)
    assert low["ts0"] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert top["ts2"] == dt.datetime(2038, 1, 19, 3, 14, 7, 990000, UTC)  # MariaDB truncates
    assert frac["dt6"] == dt.datetime(2024, 2, 29, 12, 34, 56, 123456)
    assert rows[6]["t6"] == 360000654321 and low["t0"] == -3020399000000  # TIME: int64 µs
    assert [frac[f"t{n}"] for n in FSP] == [-45296000000, -45296100000, -45296120000,
                                            -45296123000, -45296123400, -45296123450,
                                            -45296123456]  # MariaDB truncates to the precision
    assert top["ch"] == "héllo€😀" and top["vc"] == "日本語🙂 trailing  " and zero["ch"] == "pad"
    assert top["mtx"] == "€" * 70000 and top["mbl"] == b"\xff" * 70000
    assert top["pt"] == struct.pack("<I", 4326) + bytes.fromhex("0101000000") + struct.pack(
        "<dd", 1.5, -2.25)  # spatial: MySQL's internal SRID + WKB bytes
    for column in ("d", "dt0", "dt6", "ts0", "ts6"):
        assert zero[column] is None, column
    assert rows[6]["d"] is None and rows[6]["dt6"] is None and frac["d"] is None
    assert zero["y"] == 0 and zero["en"] == "" and zero["js"] == "null"
    wall = dt.datetime(2020, 1, 1, 10)
    assert local["dt3"] == wall  # DATETIME: the wall clock as written, never shifted
    assert local["ts3"] == (wall - local_offset).replace(tzinfo=UTC)  # TIMESTAMP: the instant


def spark_types(schema: TableSchema) -> dict[str, str]:
    return {f.name: str(from_arrow_type(f.type)) for f in schema.arrow_schema()}


def delta_types(p: Pipeline) -> dict[str, str]:
    table = deltalake.DeltaTable(str(p.lake / p.database / "every_type"))
    return {f.name: str(getattr(f.type, "type", f.type)) for f in table.schema().fields}


# The types docs/sources/types.md lists, as the stream (Spark) and the mirror (Delta) declare them.
SPARK_AND_DELTA = {
    "i8": ("ShortType()", "short"), "u8": ("ShortType()", "short"),
    "flag": ("ShortType()", "short"), "u16": ("IntegerType()", "integer"),
    "u32": ("LongType()", "long"), "u64": ("DecimalType(20,0)", "decimal(20,0)"),
    "z64": ("DecimalType(20,0)", "decimal(20,0)"), "f": ("FloatType()", "float"),
    "re": ("DoubleType()", "double"), "d38": ("DecimalType(38,10)", "decimal(38,10)"),
    "d65": ("StringType()", "string"), "bt1": ("BinaryType()", "binary"),
    "d": ("DateType()", "date"), "t6": ("DayTimeIntervalType(0, 3)", "long"),
    "dt6": ("TimestampNTZType()", "timestamp_ntz"), "ts6": ("TimestampType()", "timestamp"),
    "y": ("IntegerType()", "integer"), "st": ("StringType()", "string"),
    "js": ("StringType()", "string"), "pt": ("BinaryType()", "binary"),
}


def test_every_type_is_identical_through_snapshot_and_binlog(
        spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> None:
    p = Pipeline(spark, mysql_server, database, tmp_path)
    try:
        schema = check_fidelity(p, mysql_server)
        check_documented_encodings(check_debezium(p, schema))
        check_values(p, local_offset=dt.timedelta(0))
        spark, delta = spark_types(schema), delta_types(p)
        assert {c: (spark[c], delta[c]) for c in SPARK_AND_DELTA} == SPARK_AND_DELTA
    finally:
        p.cleanup()


def test_a_server_in_another_time_zone_shifts_nothing(
        spark: Any, india_server: Sandbox, tmp_path: Path) -> None:
    database = india_server.create_database()
    p = Pipeline(spark, india_server, database, tmp_path)
    try:
        with contextlib.closing(india_server.admin.connect(init_command="SET @x = 1")) as conn, \
                conn.cursor() as cur:
            cur.execute("SELECT @@session.time_zone")
            assert cur.fetchone() == ("+05:30",)  # populate() writes in this zone
        schema = check_fidelity(p, india_server)
        check_documented_encodings(check_debezium(p, schema))
        check_values(p, local_offset=dt.timedelta(hours=5, minutes=30))
    finally:
        p.cleanup()
        india_server.drop_database(database)


def test_binlog_converters_match_the_snapshot_for_values_the_library_misreads() -> None:
    """No server: the fixes in binlog/convert.py for what mysql-replication gets wrong."""
    def col(data_type: str, column_type: str, **kw: Any) -> Column:
        return mysql_column("c", data_type, column_type, True, **kw)

    time6 = value_converter(col("time", "time(6)", datetime_precision=6))
    assert time6 is not None and value_converter(col("time", "time")) is None
    td = dt.timedelta
    # -12:34:56.1 is stored as -12:34:57 + 0.9; the library reads -12:34:56.9
    assert time6(-td(seconds=45296, microseconds=900000)) == -td(seconds=45296, microseconds=100000)
    assert time6(-td(microseconds=500000)) == -td(microseconds=500000)
    assert time6(-td(seconds=1, microseconds=1)) == -td(seconds=1, microseconds=999999)
    assert time6(-td(hours=838, minutes=59, seconds=59)) == -td(hours=838, minutes=59, seconds=59)
    assert time6(td(hours=100, microseconds=654321)) == td(hours=100, microseconds=654321)
    stamp = value_converter(col("timestamp", "timestamp(6)", datetime_precision=6))
    assert stamp is not None and stamp(dt.datetime(1970, 1, 1)) is None  # the zero TIMESTAMP
    assert stamp(dt.datetime(1970, 1, 1, 0, 0, 1)) == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    for blob in ("varbinary(10)", "blob", "longblob"):
        to_bytes = value_converter(col(blob.split("(")[0], blob))
        assert to_bytes is not None and to_bytes("") == b"" and to_bytes(b"\xff") == b"\xff"
    padded = value_converter(col("binary", "binary(4)"))
    assert padded is not None and padded("") == b"\x00" * 4
