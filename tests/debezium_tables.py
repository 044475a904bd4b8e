"""The tables, rows and changes of the differential suite against Debezium
(tests/test_debezium_differential.py), per database, and the differences that stay, with why.

Each database gets one table per type family of docs/sources/types.md (NULLs, extremes, zero dates, time
zones, JSON, spatial, enums and sets on MariaDB; arrays, domains, enums, ranges of time on
PostgreSQL), a table with a composite key whose key order is not its column order, one without a
primary key, and a sentinel table whose row, written last, ends Debezium's run. The changes are
transactions (one list of statements each): every snapshot row again under a new key (every value
through the log), updates of every row (before and after images), deletes, primary-key updates, a
multi-row transaction over several tables, and DDL with changes after it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
from debezium_diff import Number

SENTINEL = "zz_end"

# --- MariaDB: the tables, their snapshot rows, the streamed changes -------------------------------

MARIADB_TABLES = [
    """CREATE TABLE t_int (
      id INT PRIMARY KEY, i8 TINYINT, u8 TINYINT UNSIGNED, z8 TINYINT(3) ZEROFILL, b1 TINYINT(1),
      bo BOOLEAN, i16 SMALLINT, u16 SMALLINT UNSIGNED, i24 MEDIUMINT, u24 MEDIUMINT UNSIGNED,
      i32 INT, u32 INT UNSIGNED, z32 INT(10) ZEROFILL, i64 BIGINT, u64 BIGINT UNSIGNED,
      nn INT NOT NULL DEFAULT 0)""",
    """CREATE TABLE t_num (
      id INT PRIMARY KEY, f FLOAT, f52 FLOAT(5,2), db DOUBLE, re REAL, d10 DECIMAL(10,2),
      d38 DECIMAL(38,10), d65 DECIMAL(65,30), d0 DECIMAL(5,0), nn DECIMAL(6,3) NOT NULL DEFAULT 0)""",
    """CREATE TABLE t_time (
      id INT PRIMARY KEY, d DATE, t0 TIME, t3 TIME(3), t6 TIME(6), dt0 DATETIME, dt3 DATETIME(3),
      dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts2 TIMESTAMP(2) NULL, ts6 TIMESTAMP(6) NULL, y YEAR,
      dnn DATE NOT NULL DEFAULT '2000-01-01', dtnn DATETIME NOT NULL DEFAULT '2000-01-01 00:00:00',
      tsnn TIMESTAMP NOT NULL DEFAULT '2000-01-01 00:00:00')""",
    """CREATE TABLE t_text (
      id INT PRIMARY KEY, ch CHAR(10), vc VARCHAR(50), lat VARCHAR(20) CHARACTER SET latin1,
      ttx TINYTEXT, tx TEXT, bn BINARY(4), vb VARBINARY(10), bl BLOB,
      nn VARCHAR(5) NOT NULL DEFAULT '') DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE t_misc (
      id INT PRIMARY KEY, bt1 BIT(1), bt10 BIT(10), bt64 BIT(64), en ENUM('a','b','日本'),
      st SET('x','y','z'), js JSON, ennn ENUM('p','q') NOT NULL DEFAULT 'p')""",
    """CREATE TABLE t_geo (
      id INT PRIMARY KEY, geo GEOMETRY, pt POINT, ls LINESTRING, pg POLYGON, mpt MULTIPOINT,
      mls MULTILINESTRING, mpg MULTIPOLYGON, gc GEOMETRYCOLLECTION)""",
    """CREATE TABLE t_dflt (
      id INT PRIMARY KEY, c TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), d DATETIME DEFAULT CURRENT_TIMESTAMP,
      e VARCHAR(5) DEFAULT 'x y', f DOUBLE DEFAULT 1.5, g BIT(1) DEFAULT b'1', h TIME DEFAULT '12:00:00',
      i YEAR DEFAULT 2000, j SET('x','y') DEFAULT 'x,y', k INT DEFAULT (1 + 1),
      l BIGINT UNSIGNED DEFAULT 42, m FLOAT DEFAULT 0.1, n BIT(10) DEFAULT b'101',
      o DATE DEFAULT '0001-01-01', p DECIMAL(5,2) NOT NULL DEFAULT -1.5, q CHAR(3) NOT NULL DEFAULT 'abc')""",
    "CREATE TABLE t_comp (a INT, b VARCHAR(10), v INT, PRIMARY KEY (b, a))",
    "CREATE TABLE t_nopk (a INT, b VARCHAR(10))",
    f"CREATE TABLE {SENTINEL} (id INT PRIMARY KEY)",
]

_INT_ROWS = [
    "(1, 127, 255, 7, 1, TRUE, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 4294967295,"
    " 9223372036854775807, 18446744073709551615, 1)",
    "(2, -128, 0, 0, 0, FALSE, -32768, 0, -8388608, 0, -2147483648, 0, 0, -9223372036854775808, 0, -1)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0)",
    "(4, 0, 1, 42, -1, 2, 0, 1, 0, 1, 0, 1, 7, 0, 9223372036854775808, 2)",
]
_NUM_ROWS = [
    "(1, 3.4028234e38, 999.99, 1.7976931348623157e308, 0.1e0 + 0.2e0, 99999999.99,"
    f" 9999999999999999999999999999.9999999999, {'9' * 35}.{'9' * 30}, 99999, 1.5)",
    "(2, -3.4028234e38, -999.99, -1.7976931348623157e308, 4.9406564584124654e-324, -99999999.99,"
    f" -0.0000000001, -0.{'0' * 29}1, -99999, -2.25)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0)",
    "(4, 3.14, 1.5, -0e0, 2.5, 0.01, 1.5, 1.5, 0, 0.001)",
    "(5, 16777216, 0, 0.1, 1e-300, 0, 0, 0, 1, 100)",
]
# written in a session whose time zone is +05:30 with ALLOW_INVALID_DATES (zero and invalid dates)
_TIME_ROWS = [
    "(1, '9999-12-31', '838:59:59', '838:59:59.000', '838:59:59.000000', '9999-12-31 23:59:59',"
    " '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999', '2038-01-19 08:44:07',"
    " '2038-01-19 08:44:07.99', '2038-01-19 08:44:07.999999', 2155, '9999-12-31', '9999-12-31 23:59:59',"
    " '2038-01-19 08:44:07')",
    "(2, '0001-01-01', '-838:59:59', '-12:34:56.123', '-12:34:56.123456', '0001-01-01 00:00:00',"
    " '0001-01-01 00:00:00.000', '0001-01-01 00:00:00.000000', '1970-01-01 05:30:01',"
    " '1970-01-01 05:30:01.01', '1970-01-01 05:30:01.000001', 1901, '0001-01-01', '0001-01-01 00:00:00',"
    " '1970-01-01 05:30:01')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2000-01-01',"
    " '2000-01-01 00:00:00', '2000-01-01 00:00:00')",
    "(4, '0000-00-00', '00:00:00', '00:00:00.000', '100:00:00.654321', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00.000', '2024-02-29 12:34:56.123456', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00.00', '0000-00-00 00:00:00.000000', 1999, '0000-00-00', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00')",
    "(5, '2024-02-30', '12:00:00', '23:59:59.999', '24:00:00', '2024-05-00 10:00:00',"
    " '2020-01-01 10:00:00.5', '2020-01-01 10:00:00.000001', '2020-01-01 10:00:00',"
    " '2020-01-01 10:00:00.5', '2020-01-01 10:00:00.123456', 2024, '2024-00-10', '2024-02-30 10:00:00',"
    " '2020-06-01 12:00:00')",
]
_TEXT_ROWS = [
    "(1, 'héllo€😀', '日本語🙂 trailing  ', 'café', 'ä', REPEAT('ab', 300), X'00ff0102', X'ff00',"
    " X'000102ff', 'x')",
    "(2, '', '', '', '', '', X'', X'', X'', '')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '')",
    "(4, 'pad  ', 'tab\\tnl\\nq\"b\\\\', 'ÿ', '\\r', 'ctl \\Z', X'41', X'00', REPEAT(X'ff', 300), 'y')",
]
_MISC_ROWS = [
    "(1, b'1', b'1010000001', X'ffffffffffffffff', '日本', 'x,z', '{\"a\": [1, 2.5, \"é\"], \"b\": null}', 'q')",
    "(2, b'0', b'0', b'0', 'a', '', '[]', 'p')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, 'p')",
    "(4, b'1', b'1111111111', X'0102030405060708', 'b', 'x,y,z', 'null', 'q')",
]
_GEO_ROWS = [
    "(1, ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))', 4326), ST_GeomFromText('POINT(1.5 -2.25)', 4326),"
    " ST_GeomFromText('LINESTRING(0 0,1 1,2 0)'), ST_GeomFromText('POLYGON((0 0,3 0,3 3,0 0),(1 1,2 1,2 2,1 1))'),"
    " ST_GeomFromText('MULTIPOINT(0 0,1 1)'), ST_GeomFromText('MULTILINESTRING((0 0,1 1),(2 2,3 3))'),"
    " ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 0)))'),"
    " ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))'))",
    "(2, ST_GeomFromText('POINT(0 0)'), ST_GeomFromText('POINT(0 0)'), NULL, NULL, NULL, NULL, NULL, NULL)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]
MARIADB_SNAPSHOT = [
    f"INSERT INTO t_int VALUES {', '.join(_INT_ROWS)}",
    f"INSERT INTO t_num VALUES {', '.join(_NUM_ROWS)}",
    f"INSERT INTO t_time VALUES {', '.join(_TIME_ROWS)}",
    f"INSERT INTO t_text VALUES {', '.join(_TEXT_ROWS)}",
    f"INSERT INTO t_misc VALUES {', '.join(_MISC_ROWS)}",
    f"INSERT INTO t_geo VALUES {', '.join(_GEO_ROWS)}",
    "INSERT INTO t_dflt (id) VALUES (1), (2)",
    "INSERT INTO t_comp VALUES (1, 'a', 10), (1, 'b', 11), (2, 'a', 12)",
    "INSERT INTO t_nopk VALUES (1, 'x'), (1, 'x'), (2, NULL)",
]


def _reinserted(table: str, rows: list[str], offset: int) -> str:
    """The snapshot's rows again under new keys (id + offset): every value through the binlog."""
    moved = [f"({int(r[1:r.index(',')]) + offset}{r[r.index(','):]}" for r in rows]
    return f"INSERT INTO {table} VALUES {', '.join(moved)}"


# Each entry is one transaction (a list: several statements committed together).
MARIADB_CHANGES: list[list[str]] = [
    [_reinserted("t_int", _INT_ROWS, 100)],
    [_reinserted("t_num", _NUM_ROWS, 100)],
    # streamed without the invalid date 2024-02-30: Debezium 3.5.0 stops on it in the binlog ("Error
    # while deserializing binlog data of date: Invalid date 'FEBRUARY 30'"); its snapshot reads null
    [_reinserted("t_time", [r.replace("2024-02-30", "2024-02-28") for r in _TIME_ROWS], 100)],
    # the zero YEAR streamed only: Debezium 3.5.0's MariaDB snapshot fails on it (its JDBC driver's
    # YearColumn throws IllegalArgumentException), which stops the connector
    ["INSERT INTO t_time (id, y) VALUES (200, 0)"],
    [_reinserted("t_text", _TEXT_ROWS, 100)],
    [_reinserted("t_misc", _MISC_ROWS, 100)],
    [_reinserted("t_geo", _GEO_ROWS, 100)],
    # updates touching every row of each family: before and after images of every value
    ["UPDATE t_int SET nn = nn + 10"], ["UPDATE t_num SET nn = nn + 1"],
    ["UPDATE t_time SET y = 2000 WHERE id < 100 AND id <> 5"], ["UPDATE t_text SET nn = 'u'"],
    ["UPDATE t_misc SET ennn = 'q'"], ["UPDATE t_geo SET id = id + 1000 WHERE id = 2"],  # a key update
    ["INSERT INTO t_dflt (id) VALUES (3)"], ["UPDATE t_dflt SET e = NULL, q = 'xyz' WHERE id = 1"],
    ["DELETE FROM t_int WHERE id = 3"], ["DELETE FROM t_time WHERE id = 104"],
    ["UPDATE t_int SET id = 5 WHERE id = 4"],  # a primary-key update: delete, tombstone, create
    ["UPDATE t_comp SET a = 3 WHERE a = 1 AND b = 'b'"],  # a composite key update
    # one multi-row transaction over several tables
    ["INSERT INTO t_comp VALUES (5, 'c', 1), (6, 'c', 2)", "UPDATE t_comp SET v = v + 1 WHERE b = 'a'",
     "DELETE FROM t_num WHERE id = 5", "UPDATE t_nopk SET b = 'w' WHERE a = 1",
     "DELETE FROM t_nopk WHERE a = 2", "INSERT INTO t_nopk VALUES (3, 'z')"],
    ["ALTER TABLE t_comp ADD COLUMN note VARCHAR(20) DEFAULT 'n' AFTER v"],
    ["INSERT INTO t_comp VALUES (7, 'd', 3, 'after the DDL')", "UPDATE t_comp SET note = 'changed' WHERE a = 2"],
    ["ALTER TABLE t_dflt ADD COLUMN r SMALLINT UNSIGNED NOT NULL DEFAULT 7"],
    ["ALTER TABLE t_misc ADD COLUMN ex ENUM('k','l') DEFAULT 'k' AFTER js, ADD COLUMN ey SET('u','v') NOT NULL DEFAULT ''"],
    ["INSERT INTO t_dflt (id) VALUES (4)", "UPDATE t_misc SET ex = 'l' WHERE id = 1"],
    [f"INSERT INTO {SENTINEL} VALUES (1)"],
]


# --- what stays different, and why (docs/sinks/kafka.md lists each) -----------------------------------------


@dataclass(frozen=True)
class Known:
    """A difference between Debezium and us that docs/sinks/kafka.md lists, in the rows of one table.

    The comparison turns our value into Debezium's with ``theirs`` (so the difference must be
    exactly the one described), or, without it, masks the column on both sides.

    Attributes:
        table: the table (None: every table).
        columns: the columns concerned (in ``before`` and ``after``), or with ``part`` ``source``
            the fields of the ``source`` block.
        phase: ``snapshot`` (the snapshot's reads) or ``stream`` (the changes after it).
        reason: why it differs (the test's failure message shows it).
        keys: the rows concerned, by ``id``; None: every row.
        theirs: Debezium's JSON value from ours (a parsed value: :class:`debezium_diff.Number` or str).
        ours: our JSON value from Debezium's, where Debezium's holds more (then ``theirs`` is None).
        part: ``images`` (``before`` and ``after``) or ``source``.
    """

    table: str | None
    columns: tuple[str, ...]
    phase: str
    reason: str
    keys: tuple[int, ...] | None = None
    theirs: Callable[[Any], Any] | None = None
    ours: Callable[[Any], Any] | None = None
    part: str = "images"


def _six_digits(ours: Any) -> Any:
    """A FLOAT as MariaDB's text protocol prints it: six significant digits (Java's Float.toString of it)."""
    from cdc.model.debezium.values import java_float, to_float32

    if ours is None:
        return None
    return Number(orjson.dumps(java_float(to_float32(float(f"{float(ours):.6g}")))).decode())


def _trimmed_fraction(ours: Any) -> Any:
    """A ZonedTimestamp without the trailing zeros of its fraction (``...:00.50Z`` is ``...:00.5Z``)."""
    return None if ours is None else re.sub(r"\.?0+Z$", "Z", ours) if "." in ours else ours


def _epoch(fsp: int) -> Callable[[Any], Any]:
    return lambda ours: "1970-01-01T00:00:00" + ("." + "0" * fsp if fsp else "") + "Z"


MARIADB_KNOWN = (
    Known("t_num", ("f",), "snapshot", "Debezium's snapshot reads FLOAT through the text protocol, which "
          "prints six significant digits (3.40282E38); its stream and we write the float32 (3.4028235E38)",
          theirs=_six_digits),
    Known("t_time", ("ts0", "ts2", "ts6", "tsnn"), "snapshot", "Debezium's snapshot drops a TIMESTAMP(n)'s "
          "trailing fraction zeros (00.5Z); its stream and we write n digits (00.50Z)", theirs=_trimmed_fraction),
    Known("t_dflt", ("c",), "snapshot", "the same for a TIMESTAMP(3) whose milliseconds end in 0 (58.78Z "
          "against 58.780Z), as its default CURRENT_TIMESTAMP(3) does one time in ten", theirs=_trimmed_fraction),
    Known("t_time", ("d", "dtnn"), "snapshot", "an invalid date (2024-02-30, ALLOW_INVALID_DATES): "
          "Debezium's snapshot rolls it over to 2024-03-01 and its stream stops on it; we write null "
          "(the column's default when NOT NULL)", keys=(5,)),
    *(Known("t_time", (column,), "stream", "a zero TIMESTAMP in a nullable column: Debezium's stream writes "
            "the epoch, its snapshot and we write null", keys=(4, 104), theirs=_epoch(fsp))
      for column, fsp in (("ts0", 0), ("ts2", 2), ("ts6", 6))),
    Known("t_time", ("tsnn",), "stream", "a zero TIMESTAMP in a NOT NULL column: Debezium's stream writes "
          "the epoch, its snapshot and we the column's default", keys=(4, 104), theirs=_epoch(0)),
    Known("t_time", ("y",), "stream", "a zero YEAR: Debezium's stream writes 1900 (and its snapshot "
          "fails on it); we write 0", keys=(200,), theirs=lambda ours: Number("1900")),
)


def adjust(known: tuple[Known, ...], table: str, side: str) -> Callable[[dict[str, Any]], None]:
    """The payload edit of ``table``'s known differences for one side (``theirs`` or ``ours``)."""

    def edit(image: dict[str, Any], k: Known) -> None:
        for column in k.columns:
            if k.theirs is None and k.ours is None:
                image[column] = f"<known: {k.reason[:40]}>"
            elif side == "ours" and k.theirs is not None:
                image[column] = k.theirs(image[column])
            elif side == "theirs" and k.ours is not None:
                image[column] = k.ours(image[column])

    def apply(payload: dict[str, Any]) -> None:
        phase = "snapshot" if payload.get("op") == "r" else "stream"
        for k in known:
            if k.table not in (None, table) or k.phase != phase:
                continue
            if k.part == "source":
                edit(payload["source"], k)
                continue
            for image in (payload.get("before"), payload.get("after")):
                if image is not None and (k.keys is None or int(image["id"]) in k.keys):
                    edit(image, k)

    return apply


# --- PostgreSQL (in a schema of the test's own; REPLICA IDENTITY FULL on some tables, DEFAULT on others)

POSTGRES_TABLES = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
    "CREATE DOMAIN short_text AS varchar(5)",
    """CREATE TABLE p_num (id int PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, o oid, n10 numeric(10,2),
       nv numeric, n50 numeric(50,10), r real, d double precision, b boolean, m money,
       nn integer NOT NULL DEFAULT 0)""",
    "ALTER TABLE p_num REPLICA IDENTITY FULL",
    """CREATE TABLE p_text (id int PRIMARY KEY, t text, vc varchar(20), ch char(5), nm name, by bytea, u uuid,
       j json, jb jsonb, x xml, ip inet, cd cidr, mac macaddr, nn text NOT NULL DEFAULT 'x')""",
    """CREATE TABLE p_time (id int PRIMARY KEY, d date, t time, t3 time(3), tz timetz, ts timestamp,
       ts3 timestamp(3), tstz timestamptz, tstz0 timestamptz(0), iv interval,
       dnn date NOT NULL DEFAULT '2000-01-01')""",
    "ALTER TABLE p_time REPLICA IDENTITY FULL",
    """CREATE TABLE p_arr (id int PRIMARY KEY, ai int[], at text[], an numeric(5,2)[], ad date[], ae mood[],
       e mood, dm posint, ds short_text)""",
    "CREATE TABLE p_comp (a int, b text, v int, PRIMARY KEY (b, a))",
    "CREATE TABLE p_nopk (a int, b text)",
    "ALTER TABLE p_nopk REPLICA IDENTITY FULL",
    f"CREATE TABLE {SENTINEL} (id int PRIMARY KEY)",
]

_P_NUM_ROWS = [
    f"(1, 32767, 2147483647, 9223372036854775807, 4294967295, 99999999.99, 1.5, {'9' * 40}.{'9' * 10}, "
    "3.4028235e38, 1.7976931348623157e308, true, 92233720368547758.07, 1)",
    "(2, -32768, -2147483648, -9223372036854775808, 0, -99999999.99, -0.000001, -0.0000000001, -1.5, 5e-324, "
    "false, -92233720368547758.08, -1)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0)",
    "(4, 0, 0, 0, 1, 0, 0, 0, 'NaN', 'Infinity', NULL, 0, 2)",
    "(5, 1, 1, 1, 1, 0.01, 123.4560, 1.5, '-Infinity', 'NaN', true, 0.01, 3)",
]
_P_TEXT_ROWS = [
    "(1, 'hé \"q\" ,x', 'abc', 'ab', 'name1', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
    "'{\"a\": [1, 2.5]}', '{\"b\": null, \"a\": 1}', '<a>x</a>', '192.168.0.1/24', '10.0.0.0/8', "
    "'08:00:2b:01:02:03', 'y')",
    "(2, '', '', '', '', '', NULL, '[]', '{}', '', '::1', '::/0', NULL, '')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'x')",
    "(4, E'tab\\tnl\\ncr\\r\\U0001F600 \\x1a', '日本語', 'pad', 'n', '\\x', NULL, 'null', '[1, \"é\"]', NULL, NULL, "
    "NULL, NULL, 'z')",
]
_P_TIME_ROWS = [
    "(1, '2024-02-29', '23:59:59.999999', '12:34:56.789', '12:34:56.5+02', '2024-01-02 03:04:05.678901', "
    "'2024-01-02 03:04:05.678', '2024-01-02 03:04:05.5+05:30', '2024-01-02 03:04:05+05:30', "
    "'1 year 2 mons 3 days 04:05:06.5', '2024-01-01')",
    "(2, '0001-01-01', '00:00:00', '00:00:00', '00:00:00+00', '0001-01-01 00:00:00', '1970-01-01', "
    "'1970-01-01 00:00:00+00', '1999-12-31 23:59:59-08', '-1 day', '0001-01-01')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2000-01-01')",
    "(4, '9999-12-31', '24:00:00', '00:00:00.001', '23:59:59-05:30', '9999-12-31 23:59:59.999999', "
    "'2000-02-29 12:00:00.5', '2038-01-19 03:14:07.999999+00', '1970-01-01 00:00:01+00', '-1 year -2 mons 3 days', "
    "'9999-12-31')",
]
_P_ARR_ROWS = [
    "(1, '{1,NULL,3}', '{\"x y\",NULL,\"q\\\"z\",\"\"}', '{1.50,NULL}', '{2024-01-01,NULL}', '{sad,happy}', 'ok', 5, "
    "'abcde')",
    "(2, '{}', '{}', '{}', '{}', '{}', 'sad', 1, '')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]
POSTGRES_SNAPSHOT = [
    f"INSERT INTO p_num VALUES {', '.join(_P_NUM_ROWS)}",
    f"INSERT INTO p_text VALUES {', '.join(_P_TEXT_ROWS)}",
    f"INSERT INTO p_time VALUES {', '.join(_P_TIME_ROWS)}",
    f"INSERT INTO p_arr VALUES {', '.join(_P_ARR_ROWS)}",
    "INSERT INTO p_comp VALUES (1, 'a', 10), (1, 'b', 11), (2, 'a', 12)",
    "INSERT INTO p_nopk VALUES (1, 'x'), (1, 'x'), (2, NULL)",
]
POSTGRES_CHANGES: list[list[str]] = [
    [_reinserted("p_num", _P_NUM_ROWS, 100)],
    [_reinserted("p_text", _P_TEXT_ROWS, 100)],
    [_reinserted("p_time", _P_TIME_ROWS, 100)],
    [_reinserted("p_arr", _P_ARR_ROWS, 100)],
    ["UPDATE p_num SET nn = nn + 10"], ["UPDATE p_text SET nn = 'u'"],
    ["UPDATE p_time SET dnn = '2001-01-01' WHERE id < 100"], ["UPDATE p_arr SET e = 'happy'"],
    ["DELETE FROM p_num WHERE id = 3"], ["DELETE FROM p_text WHERE id = 103"],
    ["UPDATE p_num SET id = 6 WHERE id = 4"],  # a primary-key update, REPLICA IDENTITY FULL
    ["UPDATE p_comp SET a = 3 WHERE a = 1 AND b = 'b'"],  # ... and DEFAULT
    ["INSERT INTO p_comp VALUES (5, 'c', 1), (6, 'c', 2)", "UPDATE p_comp SET v = v + 1 WHERE b = 'a'",
     "DELETE FROM p_num WHERE id = 5", "UPDATE p_nopk SET b = 'w' WHERE a = 1",
     "DELETE FROM p_nopk WHERE a = 2", "INSERT INTO p_nopk VALUES (3, 'z')"],
    ["ALTER TABLE p_comp ADD COLUMN note text DEFAULT 'n'"],
    ["INSERT INTO p_comp VALUES (7, 'd', 3, 'after the DDL')", "UPDATE p_comp SET note = 'changed' WHERE a = 2"],
    [f"INSERT INTO {SENTINEL} VALUES (1)"],
]
def _money_through_a_double(ours: Any) -> Any:
    """A money value (Connect Decimal, scale 2) as Debezium's snapshot reads it: through a Java
    double (JDBC getDouble), back to a decimal of its shortest digits (BigDecimal.valueOf)."""
    if ours is None:
        return None
    exact = Decimal(int.from_bytes(base64.b64decode(ours), "big", signed=True)).scaleb(-2)
    unscaled = int(Decimal(repr(float(exact))).quantize(Decimal("0.01")).scaleb(2))
    return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode()


_TWO_DAYS_US = 2 * 86_400 * 1_000_000

def _first_of_sequence(theirs: Any) -> Any:
    return re.sub(r'^\[(null|"\d+")', '[<previous transaction>', theirs)


POSTGRES_KNOWN = (
    *(Known(None, (field,), "stream", "the commit time's digits below the millisecond: Debezium has "
            "microseconds; our change rows keep milliseconds (source.ts_ms), so ours end in zeros",
            ours=lambda theirs, unit=unit: Number(str(int(theirs) // unit * unit)), part="source")
      for field, unit in (("ts_us", 1000), ("ts_ns", 1_000_000))),
    Known(None, ("sequence",), "stream", "sequence[0]: Debezium's is the end of the transaction it decoded "
          "before (null for its first after each start), ours the transaction's commit LSN; both order the "
          "changes the same way", ours=_first_of_sequence, theirs=_first_of_sequence, part="source"),
    Known("p_num", ("m",), "snapshot", "Debezium's snapshot reads money through a double: "
          "92233720368547758.07 becomes 92233720368547760.00; its stream and we keep the value",
          theirs=_money_through_a_double),
    Known("p_text", ("nm",), "stream", "a column of type name: Debezium's stream writes null; its snapshot "
          "and we write the name", theirs=lambda ours: None),
    Known("p_time", ("ts",), "snapshot", "a timestamp before 1582: Debezium's snapshot reads it in the "
          "Julian calendar (0001-01-01 is two days earlier); its stream and we in the proleptic Gregorian one",
          keys=(2,), theirs=lambda ours: Number(str(int(ours) - _TWO_DAYS_US))),
)
