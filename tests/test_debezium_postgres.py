"""Debezium JSON of PostgreSQL change rows: the PostgreSQL connector's envelope, source block and
value encodings (no database).

Expected values come from Debezium's PostgreSQL connector documentation
(documentation/modules/ROOT/pages/connectors/postgresql.adoc; the section is named at each test)
with its defaults: pgoutput, decimal.handling.mode=precise, time.precision.mode=adaptive,
binary.handling.mode=bytes, interval.handling.mode=numeric, money.fraction.digits=2. Where the
documentation is silent, from its code (PostgresSourceInfoStructMaker, PostgresValueConverter,
JdbcValueConverters), named in the comment.

Change rows are built in the envelope layout (cdc/model/envelope.py) with the source block the
Postgres dialect writes (``source_block`` with schema/sequence/txId/lsn/commit_lsn/row), passed
through Arrow (``envelope_schema``) so that values have the types the stream gives them.

Known differences from the documentation's examples (asserted below):

* ``ts_us``/``ts_ns`` (source and envelope) are ``ts_ms`` * 1000 / * 10**6: our change rows hold
  milliseconds.
* An update or delete under REPLICA IDENTITY DEFAULT: the documentation abbreviates ``before`` to
  ``{"id": 1}``; Debezium's converters fill the other NOT NULL columns with their fallback ("")
  (JdbcValueConverters.convertValue), and so do we.
* The documentation's example source shows ``snapshot`` as a boolean (Debezium 1.x) and omits
  ``sequence`` in updates and deletes; current Debezium writes the Enum string and the sequence.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest

from binlog.postgres.types import postgres_column, postgres_table
from cdc.model.debezium.codec import (
    ChangeRecord,
    DebeziumFormatError,
    PostgresSourceInfo,
    RowKind,
    decode_changelog,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_from_row,
)
from cdc.model.debezium.connect import POSTGRES_SOURCE_FIELDS, DebeziumOptions
from cdc.model.envelope import envelope_schema, source_block
from cdc.model.schema import Column, TableId, TableSchema

UTC = dt.timezone.utc
PREFIX = "PostgreSQL_server"
DATABASE = "postgres"


def typmod_numeric(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def col(name: str, typname: str, full: str | None = None, nullable: bool = True, **kw: Any) -> Column:
    return postgres_column(name, typname, full or typname, nullable, **kw)


def array(name: str, elem: str, full: str, **kw: Any) -> Column:
    return postgres_column(name, f"_{elem}", full, True, category="A", elem=elem,
                           elem_category=kw.pop("elem_category", ""), **kw)


CUSTOMERS = postgres_table(TableId("public", "customers"), (
    col("id", "int4", "integer", False),
    col("first_name", "varchar", "character varying(255)", False),
    col("last_name", "varchar", "character varying(255)", False),
    col("email", "varchar", "character varying(255)", False),
), ("id",))


def pg_source(*, ts_ms: int, snapshot: str = "false", **fields: Any) -> dict[str, Any]:
    """The source block the Postgres dialect writes (binlog/postgres/reader.py, dialect.py)."""
    return source_block("postgresql", PREFIX, CUSTOMERS.table_id, ts_ms, snapshot,
                        {"schema": "public", **fields})


def change_row(schema: TableSchema, op: str, before: dict[str, Any] | None,
               after: dict[str, Any] | None, source: dict[str, Any], ts_ms: int) -> dict[str, Any]:
    """One change row in the envelope layout, through Arrow as the stream holds it."""
    row = {"op": op, "before": before, "after": after, "source": source, "ts_ms": ts_ms}
    out: dict[str, Any] = pa.Table.from_pylist([row], schema=envelope_schema(schema)).to_pylist()[0]
    return out


def encoded(schema: TableSchema, row: dict[str, Any], **options: Any) -> dict[str, Any]:
    record = record_from_row(row, schema, database=DATABASE)
    out: dict[str, Any] = orjson.loads(encode_value(record, schema, schemas_enabled=True,
                                                    options=DebeziumOptions(**options)))
    return out


ANNE = {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
ANNE_MARIE = {**ANNE, "first_name": "Anne Marie"}
KEY_ONLY = {"id": 1, "first_name": None, "last_name": None, "email": None}  # REPLICA IDENTITY DEFAULT


# --- the source block and the envelope (postgresql.adoc, "Data change events") -------------------


SOURCE_SCHEMA = {
    "type": "struct", "fields": [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
         "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,"
                                   "last,false,incremental"},
         "default": "false", "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "sequence"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
        {"type": "string", "optional": False, "field": "schema"},
        {"type": "string", "optional": False, "field": "table"},
        {"type": "int64", "optional": True, "field": "txId"},
        {"type": "int64", "optional": True, "field": "lsn"},
        {"type": "int64", "optional": True, "field": "xmin"},
        {"type": "string", "optional": True, "field": "origin"},  # Debezium 3.5
        {"type": "int64", "optional": True, "field": "origin_lsn"},
    ], "optional": False, "name": "io.debezium.connector.postgresql.Source", "version": 1,
    "field": "source"}


def test_create_event_is_the_documented_one() -> None:
    """"_create_ events": the example value for `customers`, prefix PostgreSQL_server."""
    ts = 1559033904863
    row = change_row(CUSTOMERS, "c", None, ANNE, pg_source(
        ts_ms=ts, sequence='["24023119","24023128"]', txId=555, lsn=24023128,
        commit_lsn=24023200, row=0), ts)
    message = encoded(CUSTOMERS, row)
    payload = message["payload"]
    assert payload == {
        "before": None,
        "after": {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
        "source": {"version": row["source"]["version"], "connector": "postgresql", "name": PREFIX,
                   "ts_ms": ts, "snapshot": "false", "db": "postgres",
                   "sequence": '["24023119","24023128"]', "ts_us": ts * 1000, "ts_ns": ts * 10**6,
                   "schema": "public", "table": "customers", "txId": 555, "lsn": 24023128, "xmin": None,
                   "origin": None, "origin_lsn": None},
        "transaction": None, "op": "c", "ts_ms": ts, "ts_us": ts * 1000, "ts_ns": ts * 10**6,
    }
    assert list(payload) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert list(payload["source"]) == [name for name, _, _ in POSTGRES_SOURCE_FIELDS] == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
        "schema", "table", "txId", "lsn", "xmin", "origin", "origin_lsn"]
    schema = message["schema"]
    assert schema["name"] == "PostgreSQL_server.public.customers.Envelope" and schema["version"] == 2
    assert [f["field"] for f in schema["fields"]] == [  # Debezium 3.5's order (the docs show transaction last)
        "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    value = {"type": "struct", "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": False, "field": "first_name"},
        {"type": "string", "optional": False, "field": "last_name"},
        {"type": "string", "optional": False, "field": "email"},
    ], "optional": True, "name": "PostgreSQL_server.public.customers.Value"}
    assert schema["fields"][0] == {**value, "field": "before"}
    assert schema["fields"][1] == {**value, "field": "after"}
    assert schema["fields"][2] == SOURCE_SCHEMA


def test_key_is_the_documented_one() -> None:
    """"Change event keys": `<prefix>.<schema>.<table>.Key` with the primary-key columns."""
    row = change_row(CUSTOMERS, "c", None, ANNE, pg_source(ts_ms=0, lsn=1), 0)
    record = record_from_row(row, CUSTOMERS, database=DATABASE)
    key = orjson.loads(encode_key(record, CUSTOMERS, schemas_enabled=True) or b"")
    assert key == {"schema": {"type": "struct", "fields": [
        {"type": "int32", "optional": False, "field": "id"}],
        "optional": False, "name": "PostgreSQL_server.public.customers.Key"}, "payload": {"id": 1}}
    assert decode_key(orjson.dumps(key), CUSTOMERS) == {"id": 1} == decode_key(orjson.dumps(key))


def test_update_event_under_replica_identity_default() -> None:
    """"_update_ events": before holds the key (other NOT NULL columns: the converter's fallback
    "", JdbcValueConverters.convertValue), after the new row."""
    ts = 1559033904863
    row = change_row(CUSTOMERS, "u", KEY_ONLY, ANNE_MARIE, pg_source(
        ts_ms=ts, sequence='["24023119","24023128"]', txId=556, lsn=24023128), 1465584025523)
    payload = encoded(CUSTOMERS, row)["payload"]
    assert payload["before"] == {"id": 1, "first_name": "", "last_name": "", "email": ""}
    assert payload["after"] == {"id": 1, "first_name": "Anne Marie", "last_name": "Kretchmar",
                                "email": "annek@noanswer.org"}
    assert {k: payload["source"][k] for k in ("snapshot", "db", "schema", "table", "txId", "lsn", "xmin")} == {
        "snapshot": "false", "db": "postgres", "schema": "public", "table": "customers", "txId": 556,
        "lsn": 24023128, "xmin": None}
    assert (payload["op"], payload["ts_ms"], payload["ts_us"]) == ("u", 1465584025523, 1465584025523000)


def test_delete_event_under_replica_identity_default() -> None:
    """"_delete_ events": before holds the key, after is null, lsn 46523128."""
    ts = 1559033904863
    row = change_row(CUSTOMERS, "d", KEY_ONLY, None, pg_source(
        ts_ms=ts, sequence='["46523100","46523128"]', txId=556, lsn=46523128), 1465581902461)
    message = encoded(CUSTOMERS, row)
    payload = message["payload"]
    assert payload["before"] == {"id": 1, "first_name": "", "last_name": "", "email": ""}
    assert payload["after"] is None and payload["op"] == "d"
    assert (payload["source"]["txId"], payload["source"]["lsn"]) == (556, 46523128)
    assert decode_changelog(orjson.dumps(message), CUSTOMERS) == [
        (RowKind.DELETE, {"id": 1, "first_name": "", "last_name": "", "email": ""})]


def test_delete_under_replica_identity_full_round_trips() -> None:
    row = change_row(CUSTOMERS, "d", ANNE, None, pg_source(ts_ms=5, txId=7, lsn=99), 5)
    record = record_from_row(row, CUSTOMERS, database=DATABASE)
    for schemas_enabled in (True, False):
        value = encode_value(record, CUSTOMERS, schemas_enabled=schemas_enabled)
        assert decode_value(value, CUSTOMERS) == record
        assert decode_changelog(value) == [(RowKind.DELETE, ANNE)]


def test_snapshot_read_event() -> None:
    """A snapshot read (op r, snapshot "true"): the dialect's snapshot source block (its
    chunk's high watermark as lsn, sequence [null, lsn], no txId)."""
    row = change_row(CUSTOMERS, "r", None, ANNE, pg_source(
        ts_ms=1700000000000, snapshot="true", lsn=24023128, sequence='[null,"24023128"]'),
        1700000000000)
    message = encoded(CUSTOMERS, row)
    payload = message["payload"]
    assert payload["op"] == "r" and payload["before"] is None and payload["after"] == ANNE
    assert payload["source"] == {
        "version": row["source"]["version"], "connector": "postgresql", "name": PREFIX,
        "ts_ms": 1700000000000, "snapshot": "true", "db": "postgres", "sequence": '[null,"24023128"]',
        "ts_us": 1700000000000000, "ts_ns": 1700000000000000000, "schema": "public",
        "table": "customers", "txId": None, "lsn": 24023128, "xmin": None, "origin": None, "origin_lsn": None}
    record = decode_value(orjson.dumps(message))
    assert record is not None and record.op == "r"
    assert record.source == PostgresSourceInfo(
        version=row["source"]["version"], name=PREFIX, ts_ms=1700000000000, snapshot="true",
        db="postgres", sequence='[null,"24023128"]', ts_us=1700000000000000,
        ts_ns=1700000000000000000, schema="public", table="customers", lsn=24023128)
    assert record.table_id == CUSTOMERS.table_id
    assert decode_changelog(orjson.dumps(message)) == [(RowKind.INSERT, ANNE)]


def test_the_database_name_is_required() -> None:
    row = change_row(CUSTOMERS, "c", None, ANNE, pg_source(ts_ms=0, lsn=1), 0)
    with pytest.raises(DebeziumFormatError, match="pass database="):
        record_from_row(row, CUSTOMERS)


def test_an_update_under_replica_identity_default_has_no_before_as_in_debezium() -> None:
    """pgoutput sends no old row for such an update; the change row's key-only before is ours, and
    Debezium writes ``before: null``. It decodes to +U alone; a delete without before names the fix."""
    default = replace(CUSTOMERS, replica_identity="d")
    row = change_row(default, "u", KEY_ONLY, ANNE, pg_source(ts_ms=0, lsn=1, txId=1, commit_lsn=2, row=0), 0)
    record = record_from_row(row, default, database=DATABASE)
    assert record.before is None
    message = orjson.loads(encode_value(record, default, schemas_enabled=False))
    assert message["before"] is None and message["op"] == "u"
    assert decode_changelog(orjson.dumps(message), default) == [(RowKind.UPDATE_AFTER, ANNE)]
    full = replace(CUSTOMERS, replica_identity="f")
    assert record_from_row(change_row(full, "u", KEY_ONLY, ANNE, pg_source(ts_ms=0, lsn=1), 0), full,
                           database=DATABASE).before == KEY_ONLY
    message["op"], message["after"] = "d", None
    with pytest.raises(DebeziumFormatError, match="REPLICA IDENTITY FULL"):
        decode_value(orjson.dumps(message), CUSTOMERS)


# --- values, type by type ----------------------------------------------------------------------

NUMERIC_10_2 = col("v", "numeric", "numeric(10,2)", typmod=typmod_numeric(10, 2))
NUMERIC_50_10 = col("v", "numeric", "numeric(50,10)", typmod=typmod_numeric(50, 10))
NUMERIC = col("v", "numeric", "numeric")
DECIMAL_10_2 = {"scale": "2", "connect.decimal.precision": "10"}
VSD_FIELDS = [{"type": "int32", "optional": False, "field": "scale"},
              {"type": "bytes", "optional": False, "field": "value"}]
MOOD = "enum('happy','sad','it''s')"

# (column, Python value as the dialect types it, JSON value, expected field schema minus "field")
CASES: list[tuple[Column, Any, Any, dict[str, Any]]] = [
    # "Basic types"
    (col("v", "int2", "smallint"), -32768, -32768, {"type": "int16"}),
    (col("v", "int4", "integer"), 2**31 - 1, 2**31 - 1, {"type": "int32"}),
    (col("v", "int8", "bigint"), -(2**63), -(2**63), {"type": "int64"}),
    (col("v", "oid"), 4294967295, 4294967295, {"type": "int64"}),
    (col("v", "float4", "real"), 0.1, 0.1, {"type": "float"}),
    (col("v", "float8", "double precision"), 1.5, 1.5, {"type": "double"}),
    # Kafka's JsonConverter (Jackson) writes non-finite doubles as strings
    (col("v", "float4", "real"), float("inf"), "Infinity", {"type": "float"}),
    (col("v", "float8", "double precision"), float("-inf"), "-Infinity", {"type": "double"}),
    (col("v", "bool", "boolean"), True, True, {"type": "boolean"}),
    (col("v", "text"), "zß中😀", "zß中😀", {"type": "string"}),
    (col("v", "varchar", "character varying(20)"), "a ", "a ", {"type": "string"}),
    (col("v", "bpchar", "character(4)"), "ab  ", "ab  ", {"type": "string"}),
    (col("v", "bytea"), b"\xff\x00", "/wA=", {"type": "bytes"}),
    (col("v", "uuid"), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
     {"type": "string", "name": "io.debezium.data.Uuid", "version": 1}),
    (col("v", "json"), '{"a": [1, 2]}', '{"a": [1, 2]}',
     {"type": "string", "name": "io.debezium.data.Json", "version": 1}),
    (col("v", "jsonb"), '{"a": [1, 2]}', '{"a": [1, 2]}',
     {"type": "string", "name": "io.debezium.data.Json", "version": 1}),
    (col("v", "xml"), "<a/>", "<a/>", {"type": "string", "name": "io.debezium.data.Xml", "version": 1}),
    (col("v", "mood", MOOD, enum_labels="'happy','sad','it''s'"), "it's", "it's",
     {"type": "string", "name": "io.debezium.data.Enum", "version": 1,
      "parameters": {"allowed": "happy,sad,it's"}}),
    # "Network address types": plain strings
    (col("v", "inet"), "192.168.0.1", "192.168.0.1", {"type": "string"}),
    (col("v", "cidr"), "10.0.0.0/8", "10.0.0.0/8", {"type": "string"}),
    # "Decimal types", precise: Decimal(scale, connect.decimal.precision); base64 of the unscaled int
    (NUMERIC_10_2, Decimal("1.00"), "ZA==",
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": DECIMAL_10_2}),
    (NUMERIC_10_2, Decimal("-1.28"), "gA==",
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": DECIMAL_10_2}),
    (NUMERIC_50_10, "1.5000000000", "A34R1gA=",  # wider than Arrow's 38 digits: text
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": {"scale": "10", "connect.decimal.precision": "50"}}),
    # no scale constraint: VariableScaleDecimal {scale, value}, trailing zeros stripped
    (NUMERIC, "1.5", {"scale": 1, "value": "Dw=="},
     {"type": "struct", "fields": VSD_FIELDS, "name": "io.debezium.data.VariableScaleDecimal",
      "version": 1, "doc": "Variable scaled decimal"}),
    (NUMERIC, "100", {"scale": 0, "value": "ZA=="},
     {"type": "struct", "fields": VSD_FIELDS, "name": "io.debezium.data.VariableScaleDecimal",
      "version": 1, "doc": "Variable scaled decimal"}),
    # MONEY: Decimal with scale money.fraction.digits (2)
    (col("v", "money"), Decimal("12.34"), "BNI=",
     {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": {"scale": "2"}}),
    # "Temporal types", adaptive
    (col("v", "date"), dt.date(2018, 6, 20), 17702,
     {"type": "int32", "name": "io.debezium.time.Date", "version": 1}),
    (col("v", "time", "time without time zone"), dt.timedelta(hours=15, minutes=13, seconds=16,
                                                             microseconds=945104),
     54796945104, {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}),
    (col("v", "time", "time without time zone"), dt.timedelta(days=1), 86400000000,
     {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}),
    (col("v", "time", "time(3) without time zone", typmod=3),
     dt.timedelta(hours=15, minutes=13, seconds=16, milliseconds=945), 54796945,
     {"type": "int32", "name": "io.debezium.time.Time", "version": 1}),
    # "TIMESTAMP type": 2018-06-20 15:13:16.945104 is MicroTimestamp 1529507596945104
    (col("v", "timestamp", "timestamp without time zone"), dt.datetime(2018, 6, 20, 15, 13, 16, 945104),
     1529507596945104, {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}),
    (col("v", "timestamp", "timestamp(3) without time zone", typmod=3),
     dt.datetime(2018, 6, 20, 15, 13, 16, 945000), 1529507596945,
     {"type": "int64", "name": "io.debezium.time.Timestamp", "version": 1}),
    # TIMESTAMPTZ: ZonedTimestamp in UTC, fraction digits = the column's scale (6 unconstrained)
    (col("v", "timestamptz", "timestamp with time zone"),
     dt.datetime(2018, 6, 20, 13, 37, 3, tzinfo=UTC), "2018-06-20T13:37:03.000000Z",
     {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    (col("v", "timestamptz", "timestamp(0) with time zone", typmod=0),
     dt.datetime(2018, 6, 20, 13, 37, 3, tzinfo=UTC), "2018-06-20T13:37:03Z",
     {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    (col("v", "timestamptz", "timestamp(3) with time zone", typmod=3),
     dt.datetime(2018, 6, 20, 13, 37, 3, 120000, tzinfo=UTC), "2018-06-20T13:37:03.120Z",
     {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    # TIMETZ: ZonedTime in GMT (the dialect already normalized it)
    (col("v", "timetz", "time with time zone"), "10:34:56.5Z", "10:34:56.5Z",
     {"type": "string", "name": "io.debezium.time.ZonedTime", "version": 1}),
    # INTERVAL: MicroDuration, "the approximate number of microseconds" (months: see below)
    (col("v", "interval"), "P3DT4H5M6.78S", 273906780000,  # ((3 * 24 + 4) * 60 + 5) * 60 + 6.78 s
     {"type": "int64", "name": "io.debezium.time.MicroDuration", "version": 1}),
    (col("v", "interval"), "PT-1.5S", -1500000,
     {"type": "int64", "name": "io.debezium.time.MicroDuration", "version": 1}),
    # arrays: Connect arrays of optional elements (PostgresValueConverter.schemaBuilder)
    (array("v", "int4", "integer[]"), [1, None, 3], [1, None, 3],
     {"type": "array", "items": {"type": "int32", "optional": True}}),
    (array("v", "text", "text[]"), ["a,b", None, 'c"d'], ["a,b", None, 'c"d'],
     {"type": "array", "items": {"type": "string", "optional": True}}),
    (array("v", "date", "date[]"), [dt.date(1970, 1, 2)], [1],
     {"type": "array", "items": {"type": "int32", "optional": True, "name": "io.debezium.time.Date",
                                 "version": 1}}),
    (array("v", "mood", f"{MOOD}[]", elem_category="E", enum_labels="'happy','sad','it''s'"),
     ["sad"], ["sad"],  # enum elements are not optional in Debezium's schema
     {"type": "array", "items": {"type": "string", "optional": False, "name": "io.debezium.data.Enum",
                                 "version": 1, "parameters": {"allowed": "happy,sad,it's"}}}),
]


@pytest.mark.parametrize(("column", "value", "json_value", "field"), CASES,
                         ids=[f"{c.column_type}-{i}" for i, (c, _, _, _) in enumerate(CASES)])
def test_values_are_encoded_as_debezium_does(column: Column, value: Any, json_value: Any,
                                             field: dict[str, Any]) -> None:
    schema = postgres_table(TableId("public", "t"), (col("id", "int4", "integer", False), column), ("id",))
    row = change_row(schema, "c", None, {"id": 1, "v": value}, pg_source(ts_ms=0, lsn=1), 0)
    message = encoded(schema, row)
    assert message["payload"]["after"]["v"] == json_value
    assert message["schema"]["fields"][1]["fields"][1] == {**field, "optional": True, "field": "v"}
    # and back: with the TableSchema, and by the embedded Connect schema alone
    record = record_from_row(row, schema, database=DATABASE)
    assert decode_value(orjson.dumps(message), schema) == record
    alone = decode_value(orjson.dumps(message))
    assert alone is not None and alone.after is not None
    assert record.after is not None
    typed = record.after["v"]  # the value as Arrow holds it (a float32's double, ...)
    assert alone.after["v"] == (Decimal(typed) if column.data_type == "numeric" else typed)


def test_intervals_with_months_are_approximate() -> None:
    """"Basic types", INTERVAL: microseconds "using the 365.25 / 12.0 formula for days per month
    average": P1Y2M3DT4H5M6.78S = ((14 * 30.4375 + 3) days * 24 + 4) h * 60 + 5) min * 60 + 6.78 s.
    Decoding cannot tell months from days: it gives days and a clock."""
    schema = postgres_table(TableId("public", "t"), (col("id", "int4", "integer", False),
                                                     col("v", "interval")), ("id",))
    row = change_row(schema, "c", None, {"id": 1, "v": "P1Y2M3DT4H5M6.78S"}, pg_source(ts_ms=0, lsn=1), 0)
    message = encoded(schema, row)
    assert message["payload"]["after"]["v"] == 37091106780000
    decoded = decode_value(orjson.dumps(message), schema)
    assert decoded is not None and decoded.after == {"id": 1, "v": "P429DT7H5M6.78S"}


def test_nan_numeric_fails_in_precise_mode_as_in_debezium() -> None:
    """"Decimal types": NaN only with decimal.handling.mode string ("NAN") or double."""
    schema = postgres_table(TableId("public", "t"), (col("id", "int4", "integer", False), NUMERIC), ("id",))
    row = change_row(schema, "c", None, {"id": 1, "v": "NaN"}, pg_source(ts_ms=0, lsn=1), 0)
    with pytest.raises(DebeziumFormatError, match=r"after\.v: cannot encode 'NaN'.*decimal_handling_mode"):
        encoded(schema, row)
    for mode, expected in (("string", "NAN"), ("double", "NaN")):
        message = encoded(schema, row, decimal_handling_mode=mode)
        assert message["payload"]["after"]["v"] == expected
        options = DebeziumOptions(decimal_handling_mode=mode)  # type: ignore[arg-type]
        decoded = decode_value(orjson.dumps(message), schema, options=options)
        assert decoded is not None and decoded.after == {"id": 1, "v": "NaN"}


def test_the_time_precision_mode_option_applies() -> None:
    column = col("v", "time", "time(3) without time zone", typmod=3)
    schema = postgres_table(TableId("public", "t"), (col("id", "int4", "integer", False), column), ("id",))
    row = change_row(schema, "c", None, {"id": 1, "v": dt.timedelta(seconds=1, milliseconds=5)},
                     pg_source(ts_ms=0, lsn=1), 0)
    micro = encoded(schema, row, time_precision_mode="adaptive_time_microseconds")
    assert micro["payload"]["after"]["v"] == 1005000
    assert micro["schema"]["fields"][1]["fields"][1]["name"] == "io.debezium.time.MicroTime"
    connect = encoded(schema, row, time_precision_mode="connect")
    assert connect["payload"]["after"]["v"] == 1005
    assert connect["schema"]["fields"][1]["fields"][1]["name"] == "org.apache.kafka.connect.data.Time"


# NOT NULL columns holding null (key-only before images): Debezium's converter fallbacks
FALLBACKS: list[tuple[Column, Any]] = [
    (col("v", "int4", "integer", False), 0),
    (col("v", "float8", "double precision", False), 0.0),
    (col("v", "bool", "boolean", False), False),
    (col("v", "text", "text", False), ""),
    (col("v", "bytea", "bytea", False), ""),
    (col("v", "numeric", "numeric(10,2)", False, typmod=typmod_numeric(10, 2)), "AA=="),
    (col("v", "numeric", "numeric", False), {"scale": 0, "value": "AA=="}),
    (col("v", "date", "date", False), 0),
    (col("v", "timestamptz", "timestamp with time zone", False), "1970-01-01T00:00:00Z"),
    (col("v", "timetz", "time with time zone", False), "00:00:00Z"),
    (col("v", "interval", "interval", False), 0),
    (postgres_column("v", "_int4", "integer[]", False, category="A", elem="int4"), []),
]


@pytest.mark.parametrize(("column", "json_value"), FALLBACKS, ids=[c.column_type for c, _ in FALLBACKS])
def test_not_null_columns_without_a_value_get_debeziums_fallback(column: Column, json_value: Any) -> None:
    schema = postgres_table(TableId("public", "t"), (col("id", "int4", "integer", False), column), ("id",))
    row = change_row(schema, "d", {"id": 1, "v": None}, None, pg_source(ts_ms=0, lsn=1), 0)
    assert encoded(schema, row)["payload"]["before"]["v"] == json_value


# --- round trip: every type in one table -------------------------------------------------------


def every_type() -> tuple[TableSchema, list[dict[str, Any]]]:
    columns = [col("id", "int4", "integer", False)]
    values: list[dict[str, Any]] = [{"id": 1}, {"id": 2}]
    for i, (column, value, _, _) in enumerate(CASES):
        name = f"c{i}"
        columns.append(Column(name, column.data_type, column.column_type, True, column.precision,
                              column.scale, column.datetime_precision, arrow=column.arrow))
        values[0][name] = value
        values[1][name] = None
    return postgres_table(TableId("public", "every_type"), tuple(columns), ("id",)), values


@pytest.mark.parametrize("op", ["r", "c", "u", "d"])
@pytest.mark.parametrize("schemas_enabled", [True, False])
def test_every_type_round_trips(op: str, schemas_enabled: bool) -> None:
    schema, (full, nulls) = every_type()
    before = {"r": None, "c": None, "u": nulls, "d": full}[op]
    after = {"r": full, "c": full, "u": full, "d": None}[op]
    source = source_block("postgresql", PREFIX, schema.table_id, 1700000000123,
                          "true" if op == "r" else "false",
                          {"schema": "public", "txId": 9, "lsn": 77, "sequence": '["70","77"]'})
    row = change_row(schema, op, before, after, source, 1700000000456)
    record = record_from_row(row, schema, database=DATABASE)
    value = encode_value(record, schema, schemas_enabled=schemas_enabled)
    decoded = decode_value(value, schema)
    assert decoded == record
    assert decoded.before == row["before"] and decoded.after == row["after"]
    kinds = [k for k, _ in decode_changelog(value, schema)]
    assert kinds == {"r": [RowKind.INSERT], "c": [RowKind.INSERT], "d": [RowKind.DELETE],
                     "u": [RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER]}[op]
    key = encode_key(record, schema, schemas_enabled=schemas_enabled)
    assert decode_key(key, schema) == {"id": 1}


def test_records_are_for_their_table() -> None:
    other = postgres_table(TableId("public", "orders"), CUSTOMERS.columns, ("id",))
    row = change_row(CUSTOMERS, "c", None, ANNE, pg_source(ts_ms=0, lsn=1), 0)
    record = record_from_row(row, CUSTOMERS, database=DATABASE)
    assert isinstance(record, ChangeRecord) and record.table_id == TableId("public", "customers")
    with pytest.raises(DebeziumFormatError, match=r"record for public\.customers cannot be encoded"):
        encode_value(record, other, schemas_enabled=False)


@pytest.mark.parametrize(("expr", "default"), [  # pg_get_expr of pg_attrdef
    ("'x'::text", "x"), ("0", "0"), ("'-1'::integer", "-1"), ("(-1.5)", "-1.5"), ("true", "true"),
    ("'2000-01-01'::date", "2000-01-01"), ("'it''s'::character varying", "it's"),
    ("nextval('t_id_seq'::regclass)", None), ("now()", None), (None, None),
])
def test_postgres_defaults_are_read_as_their_values(expr: str | None, default: str | None) -> None:
    from binlog.postgres.types import default_literal

    assert default_literal(expr) == default
