"""The Debezium JSON format: round trips, Debezium's documented messages, encodings, errors.

Fixtures in tests/fixtures/debezium/ are the example messages of Debezium's MySQL connector
documentation (documentation/modules/ROOT/partials/modules/all-connectors/shared-mariadb-mysql.adoc
for key/create/update/delete; .../proc-verifying-the-connector-deployment.adoc for the snapshot
read), with the doc attributes filled in ({context} = mysql, {debezium-version} = 3.0.0.Final) and
the asciidoc bold markup removed. The update and delete examples elide their schema in the docs
(``"schema": { ... }``), so their fixtures hold the payload only.

Known differences between those examples and what we encode (each is asserted below, so a new
difference fails a test):

* The create/update/delete examples show ``source.snapshot`` as a boolean (Debezium 1.x); Debezium
  2.x+ (and we) write the ``io.debezium.data.Enum`` string ("false"). We decode both.
* The same examples lack ``source.sequence`` and ``transaction``, which current Debezium's JSON
  converter writes as null; we write them as null.
* Schemas: we write what Debezium's code builds (SchemaFactory, Envelope): struct versions
  (Source 1, Envelope 2), the full snapshot enum (7 values; the docs show 3, or a boolean),
  ``ts_us``/``ts_ns`` optional and after ``sequence`` in the source struct (the docs list them
  after ``ts_ms``, required), and the transaction block's name and version.
* The envelope's field order: the examples end with ``transaction``; Debezium 3.5 itself writes
  ``before, after, source, transaction, op, ts_ms, ts_us, ts_ns`` (seen by running it:
  tests/test_debezium_differential.py), and so do we.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlog.mysql.event_rows import change_source
from binlog.mysql.positions import ChangePosition
from binlog.mysql.types import default_literal, mysql_column, mysql_table
from cdc.model.debezium import values
from cdc.model.debezium.codec import (
    ChangeRecord,
    DebeziumFormatError,
    RowKind,
    SourceInfo,
    decode_changelog,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_from_event,
    to_changelog_rows,
)
from cdc.model.debezium.connect import SOURCE_FIELDS, DebeziumOptions, table_codecs
from cdc.model.errors import Terminal
from cdc.model.events import OPS, ChangeEvent, Op
from cdc.model.schema import Column, TableId, TableSchema

FIXTURES = Path(__file__).parent / "fixtures" / "debezium"
UTC = dt.timezone.utc


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def col(name: str, data_type: str, column_type: str | None = None, nullable: bool = True,
        **kw: Any) -> Column:
    return mysql_column(name, data_type, column_type or data_type, nullable, **kw)


# --- column kinds for generated tables ---------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One column definition and the Python values it holds (as cdc/events.py types them)."""

    data_type: str
    column_type: str
    values: st.SearchStrategy[Any]
    extra: tuple[tuple[str, Any], ...] = ()
    # what decoding by the embedded Connect schema alone gives back (no TableSchema)
    schemaless: Callable[[Any], Any] = lambda x: x

    def column(self, name: str, nullable: bool) -> Column:
        return mysql_column(name, self.data_type, self.column_type, nullable, **dict(self.extra))


def decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    top = 10**precision - 1
    edges = st.sampled_from([top, -top, 0, 1, -1])
    return st.one_of(edges, st.integers(-top, top)).map(lambda n: Decimal(f"{n}E-{scale}"))


def datetimes(fsp: int, lo: dt.datetime, hi: dt.datetime) -> st.SearchStrategy[dt.datetime]:
    step = 10 ** (6 - fsp)
    return st.datetimes(lo, hi).map(lambda d: d.replace(microsecond=d.microsecond // step * step))


def times(fsp: int) -> st.SearchStrategy[dt.timedelta]:
    limit = (838 * 3600 + 59 * 60 + 59) * 10**6
    step = 10 ** (6 - fsp)
    edges = st.sampled_from([-limit, limit, 0, -1 * step])
    return st.one_of(edges, st.integers(-limit // step, limit // step).map(lambda n: n * step)) \
        .map(lambda us: dt.timedelta(microseconds=us))


def point_bytes(x: float, y: float, srid: int) -> bytes:
    return srid.to_bytes(4, "little") + b"\x01" + (1).to_bytes(4, "little") + struct.pack("<dd", x, y)


UNSIGNED_MAX = 2**64 - 1

def finite(width: Literal[32, 64] = 64) -> st.SearchStrategy[float]:
    return st.floats(allow_nan=False, allow_infinity=False, width=width)

DATETIME_LO, DATETIME_HI = dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
TS_LO, TS_HI = dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 999999)

KINDS: dict[str, Kind] = {
    "tinyint": Kind("tinyint", "tinyint(4)", st.integers(-128, 127)),
    "tinyint_u": Kind("tinyint", "tinyint(3) unsigned", st.integers(0, 255)),
    "tinyint1": Kind("tinyint", "tinyint(1)", st.integers(-128, 127)),
    "smallint_u": Kind("smallint", "smallint(5) unsigned", st.integers(0, 65535)),
    "mediumint": Kind("mediumint", "mediumint(9)", st.integers(-(2**23), 2**23 - 1)),
    "int": Kind("int", "int(11)", st.integers(-(2**31), 2**31 - 1)),
    "int_u": Kind("int", "int(10) unsigned", st.integers(0, 2**32 - 1)),
    "bigint": Kind("bigint", "bigint(20)", st.integers(-(2**63), 2**63 - 1)),
    "bigint_u": Kind("bigint", "bigint(20) unsigned",
                     st.one_of(st.sampled_from([0, UNSIGNED_MAX, 2**63, 2**63 - 1]),
                               st.integers(0, UNSIGNED_MAX))),
    "float": Kind("float", "float", finite(32)),
    "double": Kind("double", "double", finite()),
    "decimal_10_2": Kind("decimal", "decimal(10,2)", decimals(10, 2),
                         (("precision", 10), ("scale", 2))),
    "decimal_38_10": Kind("decimal", "decimal(38,10)", decimals(38, 10),
                          (("precision", 38), ("scale", 10))),
    "decimal_65_30": Kind("decimal", "decimal(65,30)",  # wider than Arrow: a str in Python
                          decimals(65, 30).map(lambda d: format(d, "f")),
                          (("precision", 65), ("scale", 30)), schemaless=Decimal),
    "date": Kind("date", "date", st.dates(DATETIME_LO.date(), DATETIME_HI.date())),
    "datetime_0": Kind("datetime", "datetime", datetimes(0, DATETIME_LO, DATETIME_HI),
                       (("datetime_precision", 0),)),
    "datetime_3": Kind("datetime", "datetime(3)", datetimes(3, DATETIME_LO, DATETIME_HI),
                       (("datetime_precision", 3),)),
    "datetime_6": Kind("datetime", "datetime(6)", datetimes(6, DATETIME_LO, DATETIME_HI),
                       (("datetime_precision", 6),)),
    "timestamp_0": Kind("timestamp", "timestamp", datetimes(0, TS_LO, TS_HI).map(
        lambda d: d.replace(tzinfo=UTC)), (("datetime_precision", 0),)),
    "timestamp_6": Kind("timestamp", "timestamp(6)", datetimes(6, TS_LO, TS_HI).map(
        lambda d: d.replace(tzinfo=UTC)), (("datetime_precision", 6),)),
    "time_0": Kind("time", "time", times(0), (("datetime_precision", 0),)),
    "time_6": Kind("time", "time(6)", times(6), (("datetime_precision", 6),)),
    "year": Kind("year", "year(4)", st.integers(1901, 2155)),
    "varchar": Kind("varchar", "varchar(255)", st.text(max_size=40)),
    "text_mb": Kind("text", "text", st.text(st.sampled_from("aé中😀\u0000'\"\\,"), max_size=20)),
    "blob": Kind("blob", "blob", st.binary(max_size=40)),
    "bit_1": Kind("bit", "bit(1)", st.sampled_from([b"\x00", b"\x01"]),
                  schemaless=lambda b: b != b"\x00"),
    "bit_10": Kind("bit", "bit(10)", st.integers(0, 1023).map(lambda n: n.to_bytes(2, "big"))),
    "bit_64": Kind("bit", "bit(64)", st.integers(0, UNSIGNED_MAX).map(lambda n: n.to_bytes(8, "big"))),
    "enum": Kind("enum", "enum('a','it''s','ü,x')", st.sampled_from(["a", "it's", "ü,x"])),
    "set": Kind("set", "set('x','y','z')",
                st.sets(st.sampled_from("xyz")).map(lambda s: ",".join(sorted(s)))),
    "json": Kind("json", "json", st.dictionaries(st.text(max_size=5), st.integers()).map(json.dumps)),
    "point": Kind("point", "point", st.builds(point_bytes, finite(),
                                              finite(), st.integers(0, 2**32 - 1))),
    "geometry": Kind("geometry", "geometry", st.binary(min_size=4, max_size=40)),
}
KEY_KINDS = ["int", "bigint_u", "varchar", "datetime_6", "decimal_38_10", "blob", "time_6"]


@st.composite
def tables(draw: st.DrawFn, kinds: list[str] | None = None) -> tuple[TableSchema, dict[str, Kind]]:
    names = kinds or list(KINDS)
    key = draw(st.sampled_from([k for k in KEY_KINDS if k in names] or names))
    rest = draw(st.lists(st.sampled_from(names), min_size=1, max_size=8))
    by_column = {f"c{i}": KINDS[k] for i, k in enumerate([key, *rest])}
    columns = tuple(kind.column(name, nullable=name != "c0" and draw(st.booleans()))
                    for name, kind in by_column.items())
    return mysql_table(TableId("inv", draw(st.sampled_from(["t", "订单"]))), columns, ("c0",)), by_column


def rows(schema: TableSchema, kinds: dict[str, Kind]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        c.name: st.one_of(st.none(), kinds[c.name].values) if c.nullable else kinds[c.name].values
        for c in schema.columns
    })


optional_text = st.none() | st.text(max_size=20)
optional_int = st.none() | st.integers(0, 2**63 - 1)


def sources(table: TableId) -> st.SearchStrategy[SourceInfo]:
    return st.builds(
        SourceInfo, version=st.text(max_size=10), connector=st.sampled_from(["mysql", "mariadb"]),
        name=st.sampled_from(["dbserver1", "srv"]), ts_ms=st.integers(0, 2**41),
        snapshot=st.sampled_from(["true", "last", "false"]), db=st.just(table.db),
        sequence=optional_text, ts_us=optional_int, ts_ns=optional_int, table=st.just(table.table),
        server_id=st.integers(0, 2**32 - 1), gtid=optional_text, file=st.text(min_size=1, max_size=20),
        pos=st.integers(0, 2**63 - 1), row=st.integers(0, 2**31 - 1), thread=optional_int,
        query=optional_text)


@st.composite
def records(draw: st.DrawFn, kinds: list[str] | None = None) -> tuple[ChangeRecord, TableSchema, dict[str, Kind]]:
    schema, by_column = draw(tables(kinds))
    op: Op = draw(st.sampled_from(OPS))
    row = rows(schema, by_column)
    before = draw(row) if op in ("u", "d") else None
    after = draw(row) if op != "d" else None
    ts = draw(st.none() | st.integers(0, 2**41))
    record = ChangeRecord(op, before, after, draw(sources(schema.table_id)), ts,
                          None if ts is None else ts * 1000, None if ts is None else ts * 10**6)
    return record, schema, by_column


options_strategy = st.builds(
    DebeziumOptions, decimal_handling_mode=st.sampled_from(["precise", "string"]),
    bigint_unsigned_handling_mode=st.sampled_from(["precise", "long"]),
    binary_handling_mode=st.sampled_from(["bytes", "base64", "base64-url-safe", "hex"]))

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- round trips -------------------------------------------------------------------------------


@FAST
@given(records(), options_strategy, st.booleans())
def test_encode_then_decode_gives_back_the_record(
    case: tuple[ChangeRecord, TableSchema, dict[str, Kind]], options: DebeziumOptions,
    schemas_enabled: bool,
) -> None:
    record, schema, _ = case
    value = encode_value(record, schema, schemas_enabled=schemas_enabled, options=options)
    assert decode_value(value, schema, options=options) == record
    key = encode_key(record, schema, schemas_enabled=schemas_enabled, options=options)
    assert decode_key(key, schema, options=options) == {"c0": record.image()["c0"]}


@FAST
@given(records())
def test_the_embedded_schema_alone_types_the_values(
    case: tuple[ChangeRecord, TableSchema, dict[str, Kind]],
) -> None:
    record, schema, kinds = case

    def expected(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {k: None if x is None else kinds[k].schemaless(x) for k, x in row.items()}

    decoded = decode_value(encode_value(record, schema, schemas_enabled=True))
    assert decoded == replace(record, before=expected(record.before), after=expected(record.after))
    key = decode_key(encode_key(record, schema, schemas_enabled=True))
    assert key == {"c0": kinds["c0"].schemaless(record.image()["c0"])}


CONNECT_KINDS = {
    "date": KINDS["date"],
    "dt": Kind("datetime", "datetime(6)", datetimes(3, DATETIME_LO, DATETIME_HI),
               (("datetime_precision", 6),)),
    "tm": Kind("time", "time(3)", st.integers(0, 86_399_999).map(lambda ms: dt.timedelta(milliseconds=ms)),
               (("datetime_precision", 3),)),
    "dbl": Kind("decimal", "decimal(15,4)", decimals(15, 4), (("precision", 15), ("scale", 4))),
}


@FAST
@given(st.fixed_dictionaries({k: v.values for k, v in CONNECT_KINDS.items()}))
def test_lossy_modes_round_trip_values_they_can_hold(row: dict[str, Any]) -> None:
    """time.precision.mode=connect holds milliseconds within a day; decimal.handling.mode=double
    holds 15 significant digits."""
    options = DebeziumOptions(time_precision_mode="connect", decimal_handling_mode="double")
    schema = mysql_table(TableId("inv", "t"), tuple(k.column(n, True) for n, k in CONNECT_KINDS.items()), ())
    record = ChangeRecord("c", None, row, source_info())
    value = encode_value(record, schema, schemas_enabled=True, options=options)
    assert decode_value(value, schema, options=options) == record
    # the Connect logical types decode alone too; a double stays a float without the TableSchema
    alone = replace(record, after={**row, "dbl": float(row["dbl"])})
    assert decode_value(value) == alone
    assert encode_key(record, schema, schemas_enabled=True) is None  # no primary key, no key


def source_info(**kw: Any) -> SourceInfo:
    base: dict[str, Any] = {
        "version": "v", "connector": "mysql", "name": "srv", "ts_ms": 0, "db": "inv",
        "table": "t", "server_id": 1, "file": "mysql-bin.000001", "pos": 4, "row": 0}
    return SourceInfo(**{**base, **kw})


# --- Debezium's documented messages ------------------------------------------------------------

CUSTOMERS = mysql_table(TableId("inventory", "customers"), (
    col("id", "int", "int(11)", False),
    col("first_name", "varchar", "varchar(255)", False),
    col("last_name", "varchar", "varchar(255)", False),
    col("email", "varchar", "varchar(255)", False),
), ("id",))
PRODUCTS_ON_HAND = mysql_table(TableId("inventory", "products_on_hand"), (
    col("product_id", "int", "int(11)", False), col("quantity", "int", "int(11)", False),
), ("product_id",))

# What our payload adds to the docs' examples (always null), and how their snapshot is written.
ADDED_NULLS = {"create.json": {"transaction", "source.sequence"},
               "update.json": {"transaction", "source.sequence"},
               "delete.json": {"transaction", "source.sequence"},
               "read.json": set()}


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, x in d.items():
        if isinstance(x, dict) and k in ("source",):
            out.update(flatten(x, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = x
    return out


@pytest.mark.parametrize(("name", "schema"), [
    ("create.json", CUSTOMERS), ("update.json", CUSTOMERS), ("delete.json", CUSTOMERS),
    ("read.json", PRODUCTS_ON_HAND),
])
def test_documented_messages_decode_and_encode_back(name: str, schema: TableSchema) -> None:
    doc = fixture(name)
    raw = (FIXTURES / name).read_bytes()
    record = decode_value(raw, schema)
    assert record is not None
    assert decode_value(raw) == record  # typed by the embedded schema, or raw ints/strings
    ours = orjson.loads(encode_value(record, schema, schemas_enabled="schema" in doc))
    theirs = flatten(doc["payload"])
    mine = flatten(ours["payload"] if "schema" in doc else ours)
    if isinstance(theirs["source.snapshot"], bool):  # Debezium 1.x style in the docs
        theirs["source.snapshot"] = str(theirs["source.snapshot"]).lower()
    assert {k: mine[k] for k in theirs} == theirs
    added = set(mine) - set(theirs)
    assert added == ADDED_NULLS[name] and all(mine[k] is None for k in added)


def test_documented_create_event_fields() -> None:
    record = decode_value((FIXTURES / "create.json").read_bytes(), CUSTOMERS)
    assert record is not None and record.op == "c" and record.before is None
    assert record.after == {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar",
                            "email": "annek@noanswer.org"}
    assert record.table_id == TableId("inventory", "customers")
    assert record.source == source_info(
        version="3.0.0.Final", name="mysql-server-1", ts_ms=0, ts_us=0, ts_ns=0, snapshot="false",
        db="inventory", table="customers", server_id=0, file="mysql-bin.000003", pos=154, row=0,
        thread=7, query="INSERT INTO customers (first_name, last_name, email) VALUES "
                         "('Anne', 'Kretchmar', 'annek@noanswer.org')")
    assert (record.ts_ms, record.ts_us, record.ts_ns) == (
        1465491411815, 1465491411815437, 1465491411815437158)


@pytest.mark.parametrize(("name", "kinds"), [
    ("create.json", [RowKind.INSERT]), ("read.json", [RowKind.INSERT]),
    ("update.json", [RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER]), ("delete.json", [RowKind.DELETE]),
])
def test_documented_messages_become_flink_changelog_rows(name: str, kinds: list[RowKind]) -> None:
    rows = decode_changelog((FIXTURES / name).read_bytes())
    assert [k for k, _ in rows] == kinds
    payload = fixture(name)["payload"]
    images = [payload["before"], payload["after"]] if len(kinds) == 2 else [
        payload["before"] if kinds == [RowKind.DELETE] else payload["after"]]
    assert [r for _, r in rows] == images
    assert [k.value for k in kinds] == {"create.json": ["+I"], "read.json": ["+I"],
                                        "update.json": ["-U", "+U"], "delete.json": ["-D"]}[name]


def test_tombstones_are_skipped() -> None:
    assert decode_value(None) is None
    assert decode_value(b"null") is None
    assert decode_value(b'{"schema":null,"payload":null}') is None
    assert decode_changelog(None) == []
    assert decode_key(None) is None


def schema_diff(ours: Any, theirs: Any, path: str = "") -> set[str]:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return {d for k in set(ours) | set(theirs)
                for d in (schema_diff(ours.get(k), theirs.get(k), f"{path}.{k}")
                          if k in ours and k in theirs else {f"{path}.{k}"})}
    if isinstance(ours, list) and isinstance(theirs, list):  # struct fields, keyed by name
        mine, docs = ({f["field"]: f for f in x} for x in (ours, theirs))
        order = [n for n in mine if n in docs] != [n for n in docs if n in mine]
        return ({f"{path}(order)"} if order else set()) | {
            d for n in set(mine) | set(docs)
            for d in (schema_diff(mine[n], docs[n], f"{path}[{n}]") if n in mine and n in docs
                      else {f"{path}[{n}]"})}
    return set() if ours == theirs else {path}


def test_value_schema_matches_the_documented_one_but_for_known_differences() -> None:
    for name, schema, known in [
        ("read.json", PRODUCTS_ON_HAND, {
            ".version", ".fields(order)", "[source].version", "[source].fields(order)",
            "[source].fields[snapshot].parameters.allowed",
            "[source].fields[ts_us].optional", "[source].fields[ts_ns].optional",
            "[transaction].name", "[transaction].version"}),
        ("create.json", CUSTOMERS, {
            ".version", "[source].version", "[source].fields(order)",
            "[source].fields[sequence]", "[transaction]",
            *(f"[source].fields[snapshot].{k}" for k in ("type", "name", "version", "parameters",
                                                           "default")),
            "[source].fields[ts_us].optional", "[source].fields[ts_ns].optional"}),
    ]:
        doc = fixture(name)
        record = decode_value(json.dumps(doc), schema)
        assert record is not None
        ours = orjson.loads(encode_value(record, schema, schemas_enabled=True))["schema"]
        assert schema_diff(ours, doc["schema"]) == {
            p if p.startswith(".") else ".fields" + p for p in known}, name
        # the table-specific parts are identical in both
        assert ours["fields"][:2] == doc["schema"]["fields"][:2]
        assert ours["name"] == doc["schema"]["name"]


@pytest.mark.parametrize(("name", "schema", "row"), [
    ("key.json", CUSTOMERS, {"id": 1001}), ("read_key.json", PRODUCTS_ON_HAND, {"product_id": 101}),
])
def test_documented_keys(name: str, schema: TableSchema, row: dict[str, int]) -> None:
    raw = (FIXTURES / name).read_bytes()
    assert decode_key(raw, schema) == row == decode_key(raw)
    server = fixture(name)["schema"]["name"].split(".")[0]
    image = {c.name: row.get(c.name, "x") for c in schema.columns}
    record = ChangeRecord("c", None, image, source_info(
        name=server, db=schema.table_id.db, table=schema.table_id.table))
    assert orjson.loads(encode_key(record, schema, schemas_enabled=True) or b"") == fixture(name)
    assert orjson.loads(encode_key(record, schema, schemas_enabled=False) or b"") == row


# --- encodings, value by value -----------------------------------------------------------------


def encoded(column: Column, value: Any, **options: Any) -> tuple[Any, dict[str, Any]]:
    """(JSON value, field schema) of one column value."""
    schema = mysql_table(TableId("d", "t"), (column,), ())
    record = ChangeRecord("c", None, {column.name: value}, source_info(db="d"))
    out = orjson.loads(encode_value(record, schema, schemas_enabled=True,
                                    options=DebeziumOptions(**options)))
    return out["payload"]["after"][column.name], out["schema"]["fields"][1]["fields"][0]


@pytest.mark.parametrize(("column", "value", "json_value", "name", "params"), [
    # the docs: DATETIME 2018-06-20 06:37:03 -> 1529476623000
    (col("v", "datetime", datetime_precision=0), dt.datetime(2018, 6, 20, 6, 37, 3),
     1529476623000, "io.debezium.time.Timestamp", None),
    (col("v", "datetime", "datetime(6)", datetime_precision=6),
     dt.datetime(2018, 6, 20, 6, 37, 3, 5), 1529476623000005, "io.debezium.time.MicroTimestamp", None),
    # the docs: TIMESTAMP 2018-06-20 06:37:03 (UTC-7) -> 2018-06-20T13:37:03Z
    (col("v", "timestamp", datetime_precision=0),
     dt.datetime(2018, 6, 20, 6, 37, 3, tzinfo=dt.timezone(dt.timedelta(hours=-7))),
     "2018-06-20T13:37:03Z", "io.debezium.time.ZonedTimestamp", None),
    (col("v", "timestamp", "timestamp(3)", datetime_precision=3),
     dt.datetime(2018, 6, 20, 13, 37, 3, 120000, tzinfo=UTC), "2018-06-20T13:37:03.120Z",
     "io.debezium.time.ZonedTimestamp", None),
    (col("v", "date"), dt.date(1969, 12, 31), -1, "io.debezium.time.Date", None),
    (col("v", "time", datetime_precision=0), -dt.timedelta(hours=838, minutes=59, seconds=59),
     -3020399000000, "io.debezium.time.MicroTime", None),
    (col("v", "year", "year(4)"), 2024, 2024, "io.debezium.time.Year", None),
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), Decimal("1.00"), "ZA==",
     "org.apache.kafka.connect.data.Decimal", {"scale": "2", "connect.decimal.precision": "10"}),
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), Decimal("-1.28"), "gA==",
     "org.apache.kafka.connect.data.Decimal", {"scale": "2", "connect.decimal.precision": "10"}),
    (col("v", "bigint", "bigint(20) unsigned"), UNSIGNED_MAX, "AP//////////",
     "org.apache.kafka.connect.data.Decimal", {"scale": "0", "connect.decimal.precision": "20"}),
    (col("v", "bit", "bit(10)"), b"\x02\x01", base64.b64encode(b"\x01\x02").decode(),
     "io.debezium.data.Bits", {"length": "10"}),
    (col("v", "enum", "enum('a','it''s')"), "it's", "it's", "io.debezium.data.Enum",
     {"allowed": "a,it's"}),
    (col("v", "set", "set('x','y')"), "x,y", "x,y", "io.debezium.data.EnumSet", {"allowed": "x,y"}),
    (col("v", "json"), '{"a": 1}', '{"a": 1}', "io.debezium.data.Json", None),
    (col("v", "varbinary", "varbinary(4)"), b"\xff\x00", "/wA=", None, None),
    (col("v", "tinyint", "tinyint(1)"), 2, 2, None, None),  # INT16 as Debezium: no bool loss
    (col("v", "bit", "bit(1)"), b"\x01", True, None, None),
])
def test_values_are_encoded_as_debezium_does(
    column: Column, value: Any, json_value: Any, name: str | None, params: dict[str, str] | None,
) -> None:
    got, field = encoded(column, value)
    assert got == json_value
    assert field.get("name") == name and field.get("parameters") == params


@pytest.mark.parametrize(("column", "options", "value", "json_value", "connect_type"), [
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), {"decimal_handling_mode": "string"},
     Decimal("-12.50"), "-12.50", "string"),
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), {"decimal_handling_mode": "double"},
     Decimal("-12.50"), -12.5, "double"),
    (col("v", "bigint", "bigint(20) unsigned"), {"bigint_unsigned_handling_mode": "long"},
     UNSIGNED_MAX, -1, "int64"),
    (col("v", "blob"), {"binary_handling_mode": "hex"}, b"\xff\x00", "ff00", "string"),
    (col("v", "blob"), {"binary_handling_mode": "base64-url-safe"}, b"\xfb\xff", "-_8=", "string"),
    (col("v", "time", datetime_precision=0), {"time_precision_mode": "connect"},
     dt.timedelta(hours=1, microseconds=1500), 3600001, "int32"),
    (col("v", "float"), {}, 1.5, 1.5, "float"),
    (col("v", "double"), {}, 1.5, 1.5, "double"),
    (col("v", "tinyint", "tinyint(3) unsigned"), {}, 255, 255, "int16"),
    (col("v", "tinyint", "tinyint(4)"), {}, -1, -1, "int16"),
    (col("v", "int", "int(10) unsigned"), {}, 2**32 - 1, 2**32 - 1, "int64"),
])
def test_options_change_the_encoding(
    column: Column, options: dict[str, str], value: Any, json_value: Any, connect_type: str,
) -> None:
    got, field = encoded(column, value, **options)
    assert got == json_value and field["type"] == connect_type


def test_spatial_values_travel_as_debezium_geometry_structs() -> None:
    value = point_bytes(1.5, -2.0, 4326)
    got, field = encoded(col("v", "point"), value)
    assert got == {"x": 1.5, "y": -2.0, "wkb": base64.b64encode(value[4:]).decode(), "srid": 4326}
    assert field["name"] == "io.debezium.data.geometry.Point"
    got, field = encoded(col("v", "linestring"), value)
    assert got == {"wkb": base64.b64encode(value[4:]).decode(), "srid": 4326}
    assert field["name"] == "io.debezium.data.geometry.Geometry"


def test_record_from_event_fills_the_source_block() -> None:
    event = ChangeEvent(TableId("inv", "t"), "u", {"id": 1}, {"id": 1},
                        ChangePosition("mysql-bin.000003", 484, 2), ts_ms=1465581029000,
                        source=change_source(223344, "0-1-7", "mysql-bin.000003", 484, 2, 7,
                                             "UPDATE t SET id=1"))
    record = record_from_event(event, connector_name="dbserver1")
    assert record.source == SourceInfo(
        version=record.source.version, connector="mysql", name="dbserver1", ts_ms=1465581029000,
        snapshot="false", db="inv", ts_us=1465581029000000, ts_ns=1465581029000000000, table="t",
        server_id=223344, gtid="0-1-7", file="mysql-bin.000003", pos=484, row=2, thread=7,
        query="UPDATE t SET id=1")
    assert record.ts_ms == 1465581029000 and record.table_id == TableId("inv", "t")
    assert record_from_event(event, connector_name="x", ts_ms=5).ts_ns == 5_000_000


def test_snapshot_reads_take_their_position_from_the_offset() -> None:
    event = ChangeEvent(TableId("inv", "t"), "r", None, {"id": 1})
    with pytest.raises(DebeziumFormatError, match="pass offset="):
        record_from_event(event, connector_name="x")
    record = record_from_event(event, connector_name="x", snapshot="last",
                               offset={"file": "mysql-bin.000002", "pos": 154})
    assert (record.source.file, record.source.pos, record.source.row) == ("mysql-bin.000002", 154, 0)
    assert record.source.snapshot == "last"
    assert record_from_event(event, connector_name="x", offset={"file": "b.000001", "pos": 4}) \
        .source.snapshot == "true"
    with pytest.raises(DebeziumFormatError, match="snapshot='yes'"):
        record_from_event(event, connector_name="x", snapshot="yes")


# --- malformed input -----------------------------------------------------------------------------


def mutated(change: Callable[[dict[str, Any]], None], name: str = "create.json") -> bytes:
    doc = fixture(name)
    change(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("data", "message"), [
    (mutated(lambda d: d["payload"]["source"].update(pos="abc")),
     'payload.source.pos: expected integer, got "abc"'),
    (mutated(lambda d: d["payload"]["source"].pop("file")), "payload.source.file: required field is missing"),
    (mutated(lambda d: d["payload"]["source"].update(snapshot="maybe")),
     'payload.source.snapshot: expected one of true, first, .*, got "maybe"'),
    (mutated(lambda d: d["payload"]["source"].update(row=True)), "payload.source.row: expected integer, got true"),
    (mutated(lambda d: d["payload"].update(op="x")), 'payload.op: expected one of c, u, d, r, got "x"'),
    (mutated(lambda d: d["payload"].pop("op")), "payload.op: required field is missing"),
    (mutated(lambda d: d["payload"].update(after=None)), "payload.after: op 'c' needs an after image"),
    (mutated(lambda d: d["payload"].update(before=None), "update.json"),
     "payload.before: op 'u' needs a before image.*binlog_row_image"),
    (mutated(lambda d: d["payload"]["after"].update(id="1004")), 'payload.after.id: expected integer, got "1004"'),
    (mutated(lambda d: d["payload"]["after"].pop("email")), "payload.after.email: required field is missing"),
    (mutated(lambda d: d["payload"]["after"].update(extra=1)), "payload.after.extra: inventory.customers has no such column"),
    (mutated(lambda d: d["payload"].update(ts_ms="now")), 'payload.ts_ms: expected integer, got "now"'),
    (mutated(lambda d: d["payload"]["source"].update(table="orders")), "the event is for inventory.orders"),
    (b"[1, 2]", r"message: expected a JSON object, got \[1,2\]"),
    (b'{"payload": 7}', "payload: expected a JSON object, got 7"),
    (b"{not json", "not valid JSON"),
])
def test_malformed_messages_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(DebeziumFormatError, match=message) as info:
        decode_value(data, CUSTOMERS)
    assert isinstance(info.value, Terminal)
    again = pickle.loads(pickle.dumps(info.value))  # executors pickle errors to the driver
    assert type(again) is DebeziumFormatError and str(again) == str(info.value)


@pytest.mark.parametrize(("column", "json_value", "message"), [
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), 12, "expected base64 string, got 12"),
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), "not base64!", "expected base64 string"),
    (col("v", "timestamp", datetime_precision=0), "2018-06-20 13:37:03", "expected ISO-8601 timestamp"),
    (col("v", "date"), 10**12, "expected epoch day in range"),
    (col("v", "bit", "bit(10)"), "AAAA", r"expected at most 2 bytes for BIT\(10\)"),
    (col("v", "bit", "bit(1)"), 2, "expected boolean, got 2"),
    (col("v", "double"), "1.5", 'expected number, got "1.5"'),
    (col("v", "point"), {"x": 1}, "expected geometry struct with wkb"),
])
def test_malformed_values_name_the_column(column: Column, json_value: Any, message: str) -> None:
    schema = mysql_table(TableId("d", "t"), (column,), ())
    good = orjson.loads(encode_value(ChangeRecord("c", None, {"v": None}, source_info(db="d")),
                                     schema, schemas_enabled=False))
    good["after"]["v"] = json_value
    with pytest.raises(DebeziumFormatError, match=f"^after.v: {message}"):
        decode_value(orjson.dumps(good), schema)


@pytest.mark.parametrize(("column", "value", "message"), [
    (col("v", "decimal", "decimal(10,2)", precision=10, scale=2), Decimal("1.234"),
     r"after.v: cannot encode Decimal\('1.234'\) as org.apache.kafka.connect.data.Decimal"),
    (col("v", "time", datetime_precision=0), dt.timedelta(hours=25), "use adaptive_time_microseconds"),
    (col("v", "date"), "2020-01-01", "after.v: cannot encode '2020-01-01'"),
])
def test_values_that_cannot_be_encoded_name_the_column(column: Column, value: Any, message: str) -> None:
    schema = mysql_table(TableId("d", "t"), (column,), ())
    record = ChangeRecord("c", None, {"v": value}, source_info(db="d"))
    with pytest.raises(DebeziumFormatError, match=message):
        encode_value(record, schema, schemas_enabled=False,
                     options=DebeziumOptions(time_precision_mode="connect"))


def test_rows_must_match_the_schema_when_encoding() -> None:
    record = ChangeRecord("c", None, {"id": 1, "first_name": "a"}, source_info(db="inventory", table="customers"))
    with pytest.raises(DebeziumFormatError, match="after: the row has no column 'last_name'"):
        encode_value(record, CUSTOMERS, schemas_enabled=False)
    other = replace(record, source=source_info(db="inventory", table="orders"))
    with pytest.raises(DebeziumFormatError, match=r"record for inventory\.orders cannot be encoded"):
        encode_value(other, CUSTOMERS, schemas_enabled=False)


def test_changelog_rows_of_each_op() -> None:
    src = source_info()
    a, b = {"id": 1, "v": "a"}, {"id": 1, "v": "b"}
    assert to_changelog_rows(ChangeRecord("r", None, a, src)) == [(RowKind.INSERT, a)]
    assert to_changelog_rows(ChangeRecord("c", None, a, src)) == [(RowKind.INSERT, a)]
    assert to_changelog_rows(ChangeRecord("u", a, b, src)) == [
        (RowKind.UPDATE_BEFORE, a), (RowKind.UPDATE_AFTER, b)]
    assert to_changelog_rows(ChangeRecord("d", a, None, src)) == [(RowKind.DELETE, a)]


def test_values_of_the_wrong_python_type_are_refused() -> None:
    record = ChangeRecord("c", None, {"id": Decimal(1), "first_name": "a", "last_name": "b",
                                      "email": "c"}, source_info(db="inventory", table="customers"))
    with pytest.raises(DebeziumFormatError, match=r"cannot write the inventory\.customers event"):
        encode_value(record, CUSTOMERS, schemas_enabled=False)


def test_source_info_has_exactly_the_debezium_source_fields() -> None:
    assert [f.name for f in fields(SourceInfo)] == [name for name, _, _ in SOURCE_FIELDS]


def test_options_reject_unknown_modes() -> None:
    with pytest.raises(ValueError, match="decimal_handling_mode"):
        DebeziumOptions(decimal_handling_mode="exact")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra"):
        DebeziumOptions(decimal_mode="string")  # type: ignore[call-arg]


# --- what Kafka's JsonConverter (Jackson) writes, and Debezium's column defaults ----------------

def _created(row: dict[str, Any]) -> ChangeRecord:
    return ChangeRecord("c", None, row, source_info(db="db", table="t"))


@pytest.mark.parametrize(("value", "double", "float32"), [  # Java's Double.toString / Float.toString
    (3.4028234e38, "3.4028234E38", "3.4028235E38"), (1.7976931348623157e308, "1.7976931348623157E308", None),
    (5e-324, "4.9E-324", "0.0"), (1e-300, "1.0E-300", "0.0"), (16777216.0, "1.6777216E7", "1.6777216E7"),
    (0.30000000000000004, "0.30000000000000004", "0.3"), (999.989990234375, "999.989990234375", "999.99"),
    (0.1, "0.1", "0.1"), (100.0, "100.0", "100.0"), (1e7, "1.0E7", "1.0E7"), (9999999.0, "9999999.0", "9999999.0"),
    (0.001, "0.001", "0.001"), (0.00099, "9.9E-4", "9.9E-4"), (-0.0, "-0.0", "-0.0"), (-2.25, "-2.25", "-2.25"),
    (123456789.0, "1.23456789E8", "1.2345679E8"), (1.401298464324817e-45, "1.401298464324817E-45", "1.4E-45"),
    # Java 19+; Java 17 writes these with more digits than needed (1.23456792E8, 9.999999999999999E22)
    (1e23, "1.0E23", "1.0E23"),
])
def test_numbers_are_written_as_java_writes_them(value: float, double: str, float32: str | None) -> None:
    assert orjson.dumps(values.java_double(value)).decode() == double
    if float32 is not None:
        assert orjson.dumps(values.java_float(value)).decode() == float32


def test_strings_are_escaped_as_jackson_escapes_them() -> None:
    raw = orjson.dumps({"a": "ctl \x1a tab\t e\U0001F600 \\u001a é"})
    assert values.jackson_escapes(raw) == b'{"a":"ctl \\u001A tab\\t e\\uD83D\\uDE00 \\\\u001a \xc3\xa9"}'
    assert orjson.loads(values.jackson_escapes(raw)) == orjson.loads(raw)
    plain = orjson.dumps({"a": "x"})
    assert values.jackson_escapes(plain) is plain


@pytest.mark.parametrize(("catalog", "extra", "default"), [  # MariaDB's COLUMN_DEFAULT, MySQL 8's
    ("'2000-01-01'", "", "2000-01-01"), ("'it''s'", "", "it's"), ("0.000", "", "0.000"), ("b'101'", "", "b'101'"),
    ("NULL", "", None), (None, "", None), ("current_timestamp(3)", "", "1970-01-01 00:00:00"),
    ("(1 + 1)", "", None), ("'NULL'", "", "NULL"), ("2000-01-01", "", "2000-01-01"),
    ("CURRENT_TIMESTAMP", "DEFAULT_GENERATED", "1970-01-01 00:00:00"), ("(rand())", "DEFAULT_GENERATED", None),
])
def test_mysql_defaults_are_read_as_their_values(catalog: str | None, extra: str, default: str | None) -> None:
    assert default_literal(catalog, extra) == default


def test_defaults_are_in_the_schema_and_stand_for_nulls() -> None:
    """Debezium's converters write a NOT NULL column's null as its default (else the type's
    fallback), and JsonConverter (replace.null.with.default) a nullable one's too."""
    schema = mysql_table(TableId("db", "t"), (
        mysql_column("id", "int", "int(11)", False),
        mysql_column("d", "date", "date", False, default="2000-01-01"),
        mysql_column("ts", "timestamp", "timestamp(3)", False, datetime_precision=3, default="1970-01-01 00:00:00"),
        mysql_column("b", "bit", "bit(10)", True, default="b'101'"),
        mysql_column("note", "varchar", "varchar(5)", True, default="n"),
        mysql_column("z", "date", "date", False, default="0000-00-00"),  # not a date: no default
    ), ("id",))
    for replace_null, note in ((False, None), (True, "n")):
        options = DebeziumOptions(replace_null_with_default=replace_null)
        codecs = {c.column: c for c in table_codecs(schema, options)}
        assert codecs["d"].schema["default"] == 10957 and list(codecs["d"].schema)[-2:] == ["default", "field"]
        assert codecs["ts"].schema["default"] == "1970-01-01T00:00:00Z"  # a default's digits: only those needed
        assert codecs["b"].schema["default"] == base64.b64encode(b"\x05\x00").decode()
        assert "default" not in codecs["z"].schema and codecs["z"].zero == 0
        row = {"id": 1, "d": None, "ts": None, "b": None, "note": None, "z": None}
        after = orjson.loads(encode_value(_created(row), schema, schemas_enabled=False,
                                          options=options))["after"]
        assert after == {"id": 1, "d": 10957, "ts": "1970-01-01T00:00:00Z", "z": 0, "note": note,
                         "b": base64.b64encode(b"\x05\x00").decode() if replace_null else None}


def test_the_time_adjuster_reads_years_below_100_as_two_digit_years() -> None:
    schema = mysql_table(TableId("db", "t"), (mysql_column("id", "int", "int(11)", False),
                                              mysql_column("d", "date", "date", True)), ("id",))
    for day, on, off in ((dt.date(1, 1, 1), dt.date(2001, 1, 1), dt.date(1, 1, 1)),
                         (dt.date(70, 6, 1), dt.date(1970, 6, 1), dt.date(70, 6, 1)),
                         (dt.date(100, 1, 1), dt.date(100, 1, 1), dt.date(100, 1, 1))):
        for adjust, expected in ((True, on), (False, off)):
            after = orjson.loads(encode_value(_created({"id": 1, "d": day}), schema,
                                              schemas_enabled=False,
                                              options=DebeziumOptions(enable_time_adjuster=adjust)))["after"]
            assert after["d"] == values.enc_date(expected)


@pytest.mark.parametrize("chosen", ["mysql", "mariadb"])
def test_a_mysql_source_speaks_as_the_connector_it_is_told(chosen: Literal["mysql", "mariadb"]) -> None:
    """``source.debezium_connector`` (``auto``: the server's flavor, learnt at start)."""
    from binlog.mysql.config import MySqlSourceConfig
    from binlog.mysql.dialect import MySqlDialect
    from binlog.mysql.positions import BinlogOffset

    dialect = MySqlDialect(MySqlSourceConfig(port=1, username="u", tables=["db\\..*"], debezium_connector=chosen))
    source = dialect.snapshot_source(TableId("db", "t"), BinlogOffset("mysql-bin.000001", 4, "0-1-5"), 7)
    assert (source["connector"], source["gtid"], source["server_id"]) == (chosen, None, 0)
    schema = mysql_table(TableId("db", "t"), (mysql_column("id", "int", "int(11)", False),), ("id",))
    event = ChangeEvent(TableId("db", "t"), "r", None, {"id": 1}, None, 7, source)
    value = orjson.loads(encode_value(record_from_event(event, connector_name="c", connector=chosen), schema,
                                      schemas_enabled=True))
    assert value["schema"]["fields"][2]["name"] == f"io.debezium.connector.{chosen}.Source"
    assert value["payload"]["source"]["connector"] == chosen


# --- one integration test: real column metadata and values from MariaDB --------------------------


def test_rows_read_from_the_server_round_trip(admin: Any, database: str) -> None:
    """Column metadata from information_schema drives the encoding; values SELECTed back from
    the server (typed as the readers type them) survive encode -> decode."""
    from binlog.mysql.types import load_table_schema

    with admin.cursor() as cur:
        cur.execute(
            "CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, flag TINYINT(1), small TINYINT,"
            " price DECIMAL(38,10), wide DECIMAL(65,30), born DATE, seen DATETIME(6),"
            " at TIMESTAMP(3) NULL, took TIME(6), y YEAR, name VARCHAR(20), doc JSON,"
            " raw VARBINARY(8), b BIT(10), e ENUM('a','it''s'), s SET('x','y'), p POINT) DEFAULT CHARSET=utf8mb4")
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            "INSERT INTO t VALUES (18446744073709551615, 1, -128, -1234567890123456789.0123456789,"
            " 1.5, '1000-01-01', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999',"
            " '-838:59:59.000000', 2155, 'zß中😀', '{\"k\": [1]}', x'00ff', b'1000000001',"
            " 'it''s', 'x,y', ST_GeomFromText('POINT(1.5 -2)', 4326))")
        cur.execute("SELECT * FROM t")
        names = [d[0] for d in cur.description]
        row = dict(zip(names, cur.fetchone(), strict=True))
    schema = load_table_schema(admin, TableId(database, "t"))
    row["at"] = row["at"].replace(tzinfo=UTC)  # and TIMESTAMP as UTC-aware
    row["wide"] = format(row["wide"], "f")  # and DECIMAL wider than 38 digits as text
    event = ChangeEvent(schema.table_id, "c", None, row, ChangePosition("mysql-bin.000001", 4, 0),
                        source=change_source(1, None, "mysql-bin.000001", 4, 0, None, None))
    record = record_from_event(event, connector_name="srv", connector="mariadb")
    value = encode_value(record, schema, schemas_enabled=True)
    decoded = decode_value(value, schema)
    assert decoded is not None and decoded.after is not None
    assert {k: x for k, x in decoded.after.items() if row[k] != x} == {}
    assert decoded == record
    fields = {f["field"]: f for f in orjson.loads(value)["schema"]["fields"][1]["fields"]}
    assert fields["flag"]["type"] == "int16" and fields["small"]["type"] == "int16"
    assert fields["e"]["parameters"] == {"allowed": "a,it's"}
    assert fields["b"]["parameters"] == {"length": "10"}
    assert fields["seen"]["name"] == "io.debezium.time.MicroTimestamp"
    assert fields["price"]["parameters"] == {"scale": "10", "connect.decimal.precision": "38"}
    payload = orjson.loads(value)["payload"]["after"]
    assert payload["took"] == -3020399000000 and payload["at"] == "2038-01-19T03:14:07.999Z"
    assert payload["p"]["x"] == 1.5 and payload["p"]["srid"] == 4326
