"""Debezium's Kafka Connect schemas: each column as a field schema plus its converters, and the
key, value (``Envelope``) and ``source`` struct schemas built from them.

The table's connector (:attr:`TableSchema.connector`) picks the column table: :data:`_SPECS`
(MySQL/MariaDB, by ``information_schema`` type) or :data:`_PG_SPECS` (PostgreSQL, by
``pg_type.typname``, following Debezium's PostgreSQL connector, see the section at the end of the
column tables), and the ``source`` block's fields (:func:`source_fields`).

One table, :data:`_SPECS`, maps a column's ``data_type`` to a :class:`Spec` (Connect type, schema
name, version, parameters, encoder, decoder), following the Debezium MySQL connector's defaults
(``decimal.handling.mode=precise``, ``time.precision.mode=adaptive_time_microseconds``,
``binary.handling.mode=bytes``) and the choices :class:`DebeziumOptions` exposes.

Two deliberate differences from Debezium's defaults, both because of our Arrow types:

* ``BIGINT UNSIGNED`` defaults to ``bigint.unsigned.handling.mode=precise`` (Connect ``Decimal``,
  scale 0), not Debezium's ``long``: our Arrow type is ``decimal(20,0)``, and ``long`` wraps values
  above 2**63-1 to negative numbers. ``long`` is an option (and decodes back).
* ``TINYINT(1)`` is a Connect ``boolean`` (our Arrow type is bool), as Debezium's
  ``TinyIntOneToBooleanConverter`` makes it; decoding accepts 0/1 integers too.

Schema names are not adjusted (Debezium's ``schema.name.adjustment.mode=none``, its default since
2.0). Column default values (Connect ``default``) are not produced.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal, NamedTuple

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from cdc.model.debezium import values as v
from cdc.model.schema import Column, TableSchema

Converter = v.Converter


class DebeziumOptions(BaseModel):
    """The Debezium connector properties that change how values are encoded.

    Attributes:
        decimal_handling_mode: ``decimal.handling.mode``: precise (Connect Decimal: base64 of the
            unscaled two's-complement integer), string, or double (lossy).
        time_precision_mode: ``time.precision.mode``: adaptive (TIME and TIMESTAMP/DATETIME with
            up to 3 fraction digits in milliseconds, else microseconds), adaptive_time_microseconds
            (the same but every TIME in microseconds), or connect (Kafka Connect logical types:
            milliseconds, lossy). None (the default): the connector's default, as Debezium has it:
            adaptive_time_microseconds for MySQL/MariaDB, adaptive for PostgreSQL.
        bigint_unsigned_handling_mode: ``bigint.unsigned.handling.mode``: precise (our default,
            see the module docstring) or long (Debezium's default; values above 2**63-1 wrap).
        binary_handling_mode: ``binary.handling.mode``: bytes (Debezium's default; base64 in
            JSON), base64, base64-url-safe or hex (Connect strings).
        enable_time_adjuster: MySQL/MariaDB ``enable.time.adjuster``: DATE and DATETIME values of
            the years 0-99 become 2000-2069 and 1970-1999 (Debezium's default: on; off here, the
            Kafka sink turns it on).
        replace_null_with_default: Kafka Connect JsonConverter's ``replace.null.with.default``
            (its default: on): a null in a column that has a default is written as the default.
            Off here; the Kafka sink turns it on.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    time_precision_mode: Literal["adaptive", "adaptive_time_microseconds", "connect"] | None = None
    bigint_unsigned_handling_mode: Literal["precise", "long"] = "precise"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"
    enable_time_adjuster: bool = False
    replace_null_with_default: bool = False


DEFAULT_OPTIONS = DebeziumOptions()


class Spec(NamedTuple):
    """How one column travels: Connect type, schema name/version/parameters, converters."""

    connect_type: str
    encode: Converter
    decode: Converter
    name: str | None = None
    version: int | None = None
    parameters: dict[str, str] | None = None
    fields: tuple[dict[str, Any], ...] | None = None  # struct members (spatial types)
    items: dict[str, Any] | None = None  # the element schema of an array
    doc: str | None = None
    zero: Any = None  # the JSON value of a zero date in a NOT NULL column (Debezium: the epoch)
    encode_default: Converter | None = None  # a column default's encoder, when not ``encode``


class FieldCodec(NamedTuple):
    """A column's Connect field schema (JSON-ready) and its value converters."""

    column: str
    schema: dict[str, Any]
    encode: Converter
    decode: Converter
    zero: Any = None  # what a null becomes (NOT NULL temporal columns: the epoch), else None


_NO_DEFAULT = object()


def field_schema(spec: Spec, *, field: str | None, optional: bool, default: Any = _NO_DEFAULT) -> dict[str, Any]:
    """A Connect JSON field schema, keys in the order Kafka's JsonConverter writes them;
    ``default``: the column's default value, encoded (Connect's ``default``)."""
    out: dict[str, Any] = {"type": spec.connect_type}
    if spec.items is not None:
        out["items"] = spec.items
    if spec.fields is not None:
        out["fields"] = list(spec.fields)
    out["optional"] = optional
    for key in ("name", "version", "doc", "parameters"):
        if getattr(spec, key) is not None:
            out[key] = getattr(spec, key)
    if default is not _NO_DEFAULT:
        out["default"] = default
    if field is not None:
        out["field"] = field
    return out


def spec_for(column: Column, options: DebeziumOptions, connector: str = "mysql") -> Spec:
    """Look the column's data type up in :data:`_SPECS`, or :data:`_PG_SPECS` for PostgreSQL
    (bytes or string when unknown)."""
    if connector == POSTGRESQL:
        return _pg_spec(column, options)
    build = _SPECS.get(column.data_type)
    if build is None:
        build = _binary if pa.types.is_binary(column.arrow) else _string
    return build(column, options)


@lru_cache(maxsize=256)
def table_codecs(schema: TableSchema, options: DebeziumOptions) -> tuple[FieldCodec, ...]:
    """The codecs of a table's columns, in column order (cached per schema and options).

    A column's default value (:attr:`Column.default`) is the schema's ``default``, and what a null
    in a NOT NULL column becomes (as Debezium's converters do); without one, the type's fallback
    (:attr:`Spec.zero`: 0, the epoch, ...)."""
    return tuple(_field_codec(c, spec_for(c, options, schema.connector), options) for c in schema.columns)


def _field_codec(c: Column, s: Spec, options: DebeziumOptions) -> FieldCodec:
    default = default_value(c)
    if default is None:
        return FieldCodec(c.name, field_schema(s, field=c.name, optional=c.nullable), s.encode, s.decode,
                          None if c.nullable else s.zero)
    try:
        encoded = (s.encode_default or s.encode)(default)
    except (TypeError, ValueError, ArithmeticError):  # a default the type's encoder cannot take: none
        return _field_codec(replace(c, default=None), s, options)
    null = encoded if options.replace_null_with_default or not c.nullable else None
    return FieldCodec(c.name, field_schema(s, field=c.name, optional=c.nullable, default=encoded), s.encode,
                      s.decode, null)


_UTC = dt.timezone.utc
_TIME = re.compile(r"(-)?(\d+):(\d\d)(?::(\d\d)(?:\.(\d{1,6}))?)?$")


def default_value(column: Column) -> Any:
    """The column's default (:attr:`Column.default`, a literal's text) as the Python value its
    encoder takes; None when it has none or the text is not a value of its type (``0000-00-00``)."""
    text, t = column.default, column.arrow
    if text is None:
        return None
    try:
        if text.startswith(("b'", "B'")) and pa.types.is_binary(t):  # BIT: big-endian bytes
            bits = text[2:-1] or "0"
            return int(bits, 2).to_bytes((_bit_length(column) + 7) // 8, "big")
        return _DEFAULT_PARSERS[_arrow_kind(t)](text, t)
    except (KeyError, ValueError, ArithmeticError, OverflowError):
        return None


def _bit_length(c: Column) -> int:
    m = re.match(r"bit\((\d+)\)", c.column_type)
    return int(m.group(1)) if m else 1


def _arrow_kind(t: pa.DataType) -> str:
    for kind, test in (("int", pa.types.is_integer), ("float", pa.types.is_floating),
                       ("decimal", pa.types.is_decimal), ("bool", pa.types.is_boolean),
                       ("date", pa.types.is_date), ("timestamp", pa.types.is_timestamp),
                       ("duration", pa.types.is_duration), ("binary", pa.types.is_binary),
                       ("string", pa.types.is_string)):
        if test(t):
            return kind
    return "other"


def _parse_timestamp(text: str, t: pa.DataType) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=_UTC) if getattr(t, "tz", None) else value


def _parse_time(text: str, t: pa.DataType) -> dt.timedelta:
    m = _TIME.match(text)
    if m is None:
        raise ValueError(text)
    sign, h, mi, sec, frac = m.groups()
    value = dt.timedelta(hours=int(h), minutes=int(mi), seconds=int(sec or 0),
                         microseconds=int((frac or "0").ljust(6, "0")))
    return -value if sign else value


_DEFAULT_PARSERS: dict[str, Callable[[str, pa.DataType], Any]] = {
    "int": lambda x, t: int(x), "float": lambda x, t: float(x), "decimal": lambda x, t: Decimal(x),
    "bool": lambda x, t: x.lower() in ("1", "t", "true"), "date": lambda x, t: dt.date.fromisoformat(x),
    "timestamp": _parse_timestamp, "duration": _parse_time, "binary": lambda x, t: x.encode(),
    "string": lambda x, t: x,
}


@lru_cache(maxsize=256)
def key_codecs(schema: TableSchema, options: DebeziumOptions) -> tuple[FieldCodec, ...]:
    """The codecs of the primary-key columns, in key order (never optional)."""
    by_name = {c.column: c for c in table_codecs(schema, options)}
    return tuple(
        by_name[name]._replace(schema={**by_name[name].schema, "optional": False})
        for name in (schema.column(n).name for n in schema.primary_key)
    )


# --- the column table ------------------------------------------------------------------------


def _plain(connect_type: str, name: str | None = None) -> Callable[[Column, DebeziumOptions], Spec]:
    decode = {"float": v.dec_float, "double": v.dec_float, "string": v.dec_str}.get(
        connect_type, v.dec_int
    )
    encode = v.enc_double if connect_type == "double" else v.same
    return lambda c, o: Spec(connect_type, encode, decode, name, 1 if name else None)


def _signed_or_wider(signed: str, unsigned: str) -> Callable[[Column, DebeziumOptions], Spec]:
    return lambda c, o: Spec(unsigned if _unsigned(c) else signed, v.same, v.dec_int)


def _unsigned(c: Column) -> bool:
    return "unsigned" in c.column_type


def _float(c: Column, o: DebeziumOptions) -> Spec:
    """FLOAT is Connect FLOAT32, written as Java's Float.toString does (shortest round-trip
    decimal). FLOAT(M,D) is FLOAT64 (Debezium's mapping) holding the float32 the server stores,
    as Debezium writes it (``999.989990234375`` for 999.99 in FLOAT(5,2))."""
    if re.match(r"float\(\d+,\d+\)", c.column_type) is None:
        return Spec("float", v.enc_float32, v.dec_float32)
    return Spec("double", lambda x: v.java_double(v.to_float32(x)), v.dec_float)


def _tinyint(c: Column, o: DebeziumOptions) -> Spec:
    return Spec("int16", v.same, v.dec_int)  # Debezium: TINYINT -> INT16, signed or not


_TWO_64 = 1 << 64


def _bigint(c: Column, o: DebeziumOptions) -> Spec:
    if not _unsigned(c):
        return Spec("int64", v.same, v.dec_int)
    if o.bigint_unsigned_handling_mode == "long":  # Java long: wraps above 2**63-1
        return Spec("int64", lambda x: int(x) - _TWO_64 if x >= _TWO_64 >> 1 else int(x),
                    lambda x: n + _TWO_64 if (n := v.dec_int(x)) < 0 else n)
    return _decimal_spec(20, 0, "precise", text=False)._replace(
        decode=lambda x: int(v.decimal_from_b64(x, 0)))


def _decimal_spec(precision: int, scale: int, mode: str, *, text: bool) -> Spec:
    """``text``: our Python value is a str (a DECIMAL wider than Arrow's 38 digits)."""
    out: Converter = v.plain if text else v.same
    if mode == "string":
        return Spec("string", lambda x: v.plain(Decimal(x)),
                    lambda x: out(v.decimal_from_text(x)))
    if mode == "double":
        return Spec("double", lambda x: v.java_double(float(Decimal(x))),
                    lambda x: out(v.decimal_from_text(x)))
    return Spec("bytes", lambda x: v.b64(v.unscaled_bytes(x, scale)),
                lambda x: out(v.decimal_from_b64(x, scale)),
                "org.apache.kafka.connect.data.Decimal", 1,
                {"scale": str(scale), "connect.decimal.precision": str(precision)})


def _decimal(c: Column, o: DebeziumOptions) -> Spec:
    precision, scale = c.precision or 10, c.scale or 0
    text = bool(pa.types.is_string(c.arrow))  # wider than Arrow's 38 digits: travels as text
    return _decimal_spec(precision, scale, o.decimal_handling_mode, text=text)


def _adjusted(encode: Converter, o: DebeziumOptions) -> Converter:
    """``encode`` after Debezium's ``enable.time.adjuster`` when it is on: a year 0-69 is read as
    2000-2069 and 70-99 as 1970-1999 (as MySQL reads two-digit years), ``0001-01-01`` too."""
    return (lambda x: encode(v.two_digit_year(x))) if o.enable_time_adjuster else encode


def _date(c: Column, o: DebeziumOptions) -> Spec:
    connect = o.time_precision_mode == "connect"
    name = "org.apache.kafka.connect.data.Date" if connect else "io.debezium.time.Date"
    return Spec("int32", _adjusted(v.enc_date, o), v.dec_date, name, 1, zero=0)


def _datetime(c: Column, o: DebeziumOptions) -> Spec:
    if o.time_precision_mode == "connect":
        return Spec("int64", _adjusted(v.enc_millis, o), v.dec_millis,
                    "org.apache.kafka.connect.data.Timestamp", 1, zero=0)
    if (c.datetime_precision or 0) <= 3:
        return Spec("int64", _adjusted(v.enc_millis, o), v.dec_millis, "io.debezium.time.Timestamp", 1, zero=0)
    return Spec("int64", _adjusted(v.enc_micros, o), v.dec_micros, "io.debezium.time.MicroTimestamp", 1, zero=0)


def _time(c: Column, o: DebeziumOptions) -> Spec:
    if o.time_precision_mode == "connect":
        return Spec("int32", v.enc_time_millis, v.dec_time_millis,
                    "org.apache.kafka.connect.data.Time", 1)
    if o.time_precision_mode == "adaptive" and (c.datetime_precision or 0) <= 3:
        return Spec("int32", lambda x: x // v.MS, v.dec_time_millis, "io.debezium.time.Time", 1)
    return Spec("int64", lambda x: x // v.US, v.dec_time_micros, "io.debezium.time.MicroTime", 1)


def _timestamp(c: Column, o: DebeziumOptions) -> Spec:
    """ZonedTimestamp with the column's fraction digits; a default value with only the digits it
    needs (``1970-01-01T00:00:00Z`` in TIMESTAMP(3)), as Debezium writes defaults."""
    fsp = c.datetime_precision or 0
    return Spec("string", lambda x: v.zoned_timestamp(x, fsp), v.parse_zoned_timestamp,
                "io.debezium.time.ZonedTimestamp", 1, zero="1970-01-01T00:00:00Z",
                encode_default=lambda x: v.zoned_timestamp(x, 0))


def _bit(c: Column, o: DebeziumOptions) -> Spec:
    m = re.match(r"bit\((\d+)\)", c.column_type)
    n = int(m.group(1)) if m else 1
    if n == 1:
        return Spec("boolean", any, lambda x: b"\x01" if v.dec_bool(x) else b"\x00")
    encode, decode = v.bits_codec(n)
    return Spec("bytes", encode, decode, "io.debezium.data.Bits", 1, {"length": str(n)})


_QUOTED = re.compile(r"'((?:[^']|'')*)'")


def allowed_values(column_type: str) -> str:
    """The ``allowed`` parameter of an ENUM or SET: its members, comma-separated."""
    return ",".join(m.replace("''", "'") for m in _QUOTED.findall(column_type))


def _enum(c: Column, o: DebeziumOptions) -> Spec:
    name = "io.debezium.data.EnumSet" if c.data_type == "set" else "io.debezium.data.Enum"
    return Spec("string", v.same, v.dec_str, name, 1, {"allowed": allowed_values(c.column_type)})


def _string(c: Column, o: DebeziumOptions) -> Spec:
    return Spec("string", v.same, v.dec_str)


def _binary(c: Column, o: DebeziumOptions) -> Spec:
    connect_type, encode, decode = v.BINARY_MODES[o.binary_handling_mode]
    return Spec(connect_type, encode, decode)


_POINT_FIELDS = ({"type": "double", "optional": False, "field": "x"},
                 {"type": "double", "optional": False, "field": "y"},
                 {"type": "bytes", "optional": True, "field": "wkb"},
                 {"type": "int32", "optional": True, "field": "srid"})
_GEOMETRY_FIELDS = ({"type": "bytes", "optional": False, "field": "wkb"},
                    {"type": "int32", "optional": True, "field": "srid"})


def _spatial(c: Column, o: DebeziumOptions) -> Spec:
    if c.data_type == "point":
        return Spec("struct", v.enc_point, v.dec_spatial, "io.debezium.data.geometry.Point", 1,
                    fields=_POINT_FIELDS, doc="Geometry (POINT)")
    return Spec("struct", v.enc_geometry, v.dec_spatial, "io.debezium.data.geometry.Geometry", 1,
                fields=_GEOMETRY_FIELDS, doc="Geometry")


_SPATIAL = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
            "multipolygon", "geometrycollection")

_SPECS: dict[str, Callable[[Column, DebeziumOptions], Spec]] = {
    "tinyint": _tinyint,
    "smallint": _signed_or_wider("int16", "int32"),
    "mediumint": _plain("int32"),
    "int": _signed_or_wider("int32", "int64"),
    "integer": _signed_or_wider("int32", "int64"),
    "bigint": _bigint,
    "float": _float,
    "double": _plain("double"),
    "real": _plain("double"),
    "decimal": _decimal,
    "numeric": _decimal,
    "date": _date,
    "datetime": _datetime,
    "timestamp": _timestamp,
    "time": _time,
    "year": _plain("int32", "io.debezium.time.Year"),
    "bit": _bit,
    "enum": _enum,
    "set": _enum,
    "json": _plain("string", "io.debezium.data.Json"),
    **dict.fromkeys(_SPATIAL, _spatial),
}




# --- PostgreSQL --------------------------------------------------------------------------------
#
# Debezium's PostgreSQL connector (PostgresValueConverter) with its defaults: decimal.handling.mode
# precise, time.precision.mode adaptive, binary.handling.mode bytes, interval.handling.mode
# numeric, money.fraction.digits 2. Python values are those binlog/postgres/types.py gives
# (docs/sources/types.md, PostgreSQL). A NOT NULL column whose value is null (the non-key columns of a
# REPLICA IDENTITY DEFAULT before image) gets the converter's fallback, as in Debezium
# (JdbcValueConverters.convertValue): 0, "", false, the epoch, an empty array.

POSTGRESQL = "postgresql"
_ENUM_TYPE = re.compile(r"enum\(.*\)(\[\])?$", re.DOTALL)


def _pg_fsp(c: Column) -> int:
    return 6 if c.datetime_precision is None else c.datetime_precision


def _pg_numeric(c: Column, o: DebeziumOptions) -> Spec:
    """numeric(p, s): Connect Decimal (scale s, precision p); unconstrained numeric:
    VariableScaleDecimal (precise) or the same string/double as Debezium. Our value is a Decimal
    (p <= 38) or the server's text (wider or unconstrained; 'NaN' and infinities included)."""
    text = not pa.types.is_decimal(c.arrow)
    out: Converter = v.same if not text else v.plain
    if o.decimal_handling_mode == "string":
        return Spec("string", v.enc_pg_decimal_string,
                    lambda x: v.dec_pg_decimal_text(x, text), zero="0" if c.scale is None else
                    v.plain(Decimal(0).scaleb(-c.scale)))
    if o.decimal_handling_mode == "double":
        return Spec("double", v.enc_pg_decimal_double, lambda x: v.dec_pg_decimal_double(x, text),
                    zero=0.0)
    if c.precision is None or c.scale is None:  # no scale constraint: VariableScaleDecimal
        return Spec("struct", v.enc_variable_scale, lambda x: out(v.dec_variable_scale(x)),
                    "io.debezium.data.VariableScaleDecimal", 1, fields=_VARIABLE_SCALE_FIELDS,
                    doc="Variable scaled decimal", zero={"scale": 0, "value": "AA=="})
    scale = c.scale
    return Spec("bytes", lambda x: v.b64(v.unscaled_bytes(v.finite_decimal(x), scale)),
                lambda x: out(v.decimal_from_b64(x, scale)),
                "org.apache.kafka.connect.data.Decimal", 1,
                {"scale": str(scale), "connect.decimal.precision": str(c.precision)}, zero="AA==")


_VARIABLE_SCALE_FIELDS = ({"type": "int32", "optional": False, "field": "scale"},
                          {"type": "bytes", "optional": False, "field": "value"})


def _pg_money(c: Column, o: DebeziumOptions) -> Spec:
    """money: Connect Decimal of scale money.fraction.digits (2), no precision parameter."""
    if o.decimal_handling_mode == "string":
        return Spec("string", lambda x: v.plain(Decimal(x)), lambda x: v.decimal_from_text(x),
                    zero="0.00")
    if o.decimal_handling_mode == "double":
        return Spec("double", lambda x: v.java_double(float(x)), lambda x: v.decimal_from_text(x), zero=0.0)
    return Spec("bytes", lambda x: v.b64(v.unscaled_bytes(x, 2)), lambda x: v.decimal_from_b64(x, 2),
                "org.apache.kafka.connect.data.Decimal", 1, {"scale": "2"}, zero="AA==")


def _pg_time(c: Column, o: DebeziumOptions) -> Spec:
    mode = o.time_precision_mode or "adaptive"
    if mode == "connect":
        return Spec("int32", v.enc_time_millis, v.dec_time_millis,
                    "org.apache.kafka.connect.data.Time", 1, zero=0)
    if mode == "adaptive" and _pg_fsp(c) <= 3:
        return Spec("int32", lambda x: x // v.MS, v.dec_time_millis, "io.debezium.time.Time", 1,
                    zero=0)
    return Spec("int64", lambda x: x // v.US, v.dec_time_micros, "io.debezium.time.MicroTime", 1,
                zero=0)


def _pg_timestamp(c: Column, o: DebeziumOptions) -> Spec:
    mode = o.time_precision_mode or "adaptive"
    if mode == "connect":
        return Spec("int64", v.enc_millis, v.dec_millis, "org.apache.kafka.connect.data.Timestamp", 1,
                    zero=0)
    if _pg_fsp(c) <= 3:
        return Spec("int64", v.enc_millis, v.dec_millis, "io.debezium.time.Timestamp", 1, zero=0)
    return Spec("int64", v.enc_micros, v.dec_micros, "io.debezium.time.MicroTimestamp", 1, zero=0)


def _pg_timestamptz(c: Column, o: DebeziumOptions) -> Spec:
    """ZonedTimestamp with exactly the column's fraction digits (6 when unconstrained), as
    Debezium formats it with the column's scale."""
    fsp = _pg_fsp(c)
    return Spec("string", lambda x: v.zoned_timestamp(x, fsp), v.parse_zoned_timestamp,
                "io.debezium.time.ZonedTimestamp", 1, zero="1970-01-01T00:00:00Z")


def _pg_date(c: Column, o: DebeziumOptions) -> Spec:
    connect = o.time_precision_mode == "connect"
    name = "org.apache.kafka.connect.data.Date" if connect else "io.debezium.time.Date"
    return Spec("int32", v.enc_date, v.dec_date, name, 1, zero=0)


def _pg_plain(connect_type: str, encode: Converter, decode: Converter, zero: Any,
              name: str | None = None) -> Callable[[Column, DebeziumOptions], Spec]:
    return lambda c, o: Spec(connect_type, encode, decode, name, 1 if name else None, zero=zero)


def _pg_binary(c: Column, o: DebeziumOptions) -> Spec:
    connect_type, encode, decode = v.BINARY_MODES[o.binary_handling_mode]
    return Spec(connect_type, encode, decode, zero="")


def _pg_enum(c: Column, o: DebeziumOptions) -> Spec:
    """An enum: ``allowed`` = its labels in ``enumsortorder`` (the dialect writes them into
    ``column_type`` as ``enum('a','b')``)."""
    return Spec("string", v.same, v.dec_str, "io.debezium.data.Enum", 1,
                {"allowed": allowed_values(c.column_type)}, zero="")


_PG_SCALARS: dict[str, Callable[[Column, DebeziumOptions], Spec]] = {
    "int2": _pg_plain("int16", v.same, v.dec_int, 0),
    "int4": _pg_plain("int32", v.same, v.dec_int, 0),
    "int8": _pg_plain("int64", v.same, v.dec_int, 0),
    "oid": _pg_plain("int64", v.same, v.dec_int, 0),
    "float4": _pg_plain("float", v.enc_special_float32, v.dec_special_float32, 0.0),
    "float8": _pg_plain("double", v.enc_special_float, v.dec_special_float, 0.0),
    "bool": _pg_plain("boolean", v.same, v.dec_bool, False),
    "numeric": _pg_numeric,
    "money": _pg_money,
    "bytea": _pg_binary,
    "date": _pg_date,
    "time": _pg_time,
    "timetz": _pg_plain("string", v.same, v.dec_str, "00:00:00Z", "io.debezium.time.ZonedTime"),
    "timestamp": _pg_timestamp,
    "timestamptz": _pg_timestamptz,
    "interval": _pg_plain("int64", v.enc_micro_duration, v.dec_micro_duration, 0,
                          "io.debezium.time.MicroDuration"),
    "uuid": _pg_plain("string", v.same, v.dec_str, "", "io.debezium.data.Uuid"),
    "json": _pg_plain("string", v.same, v.dec_str, "", "io.debezium.data.Json"),
    "jsonb": _pg_plain("string", v.same, v.dec_str, "", "io.debezium.data.Json"),
    "xml": _pg_plain("string", v.same, v.dec_str, "", "io.debezium.data.Xml"),
}
_PG_STRING = _pg_plain("string", v.same, v.dec_str, "")


def _pg_scalar(typname: str, c: Column, o: DebeziumOptions) -> Spec:
    if _ENUM_TYPE.match(c.column_type):
        return _pg_enum(c, o)
    build = _PG_SCALARS.get(typname)
    if build is None:  # text types, inet, cidr, macaddr, citext, ... and unknown types: text
        build = _pg_binary if pa.types.is_binary(c.arrow) else _PG_STRING
    return build(c, o)


def _pg_spec(c: Column, o: DebeziumOptions) -> Spec:
    """A PostgreSQL column's spec; one-dimensional arrays are Connect arrays of the element's
    schema (optional elements, except enums, as Debezium builds them)."""
    if not pa.types.is_list(c.arrow):
        return _pg_scalar(c.data_type, c, o)
    element = _pg_scalar(c.data_type.removeprefix("_"), _element_column(c), o)
    items = field_schema(element, field=None, optional=element.name != "io.debezium.data.Enum")
    return Spec("array", v.enc_array(element.encode), v.dec_array(element.decode),
                items=items, zero=[])


def _element_column(c: Column) -> Column:
    """The array column as its element: the element's Arrow type; precision, scale and fraction
    digits are the array column's (as Debezium's createArrayConverter takes them)."""
    return Column(c.name, c.data_type.removeprefix("_"), c.column_type.removesuffix("[]"),
                  True, c.precision, c.scale, c.datetime_precision, arrow=c.arrow.value_type)


# --- key, value (Envelope) and source struct schemas ------------------------------------------

# The source block, in Debezium's order: (field, Connect type, optional).
SOURCE_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("version", "string", False), ("connector", "string", False), ("name", "string", False),
    ("ts_ms", "int64", False), ("snapshot", "string", True), ("db", "string", False),
    ("sequence", "string", True), ("ts_us", "int64", True), ("ts_ns", "int64", True),
    ("table", "string", True), ("server_id", "int64", False), ("gtid", "string", True),
    ("file", "string", False), ("pos", "int64", False), ("row", "int32", False),
    ("thread", "int64", True), ("query", "string", True),
)
# PostgreSQL's (Debezium 3.5's PostgresSourceInfoStructMaker): the common fields, then schema,
# table (required), txId, lsn, xmin, and the replication origin of the change (origin, origin_lsn:
# null unless the change was replayed by logical replication from another server).
POSTGRES_SOURCE_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("version", "string", False), ("connector", "string", False), ("name", "string", False),
    ("ts_ms", "int64", False), ("snapshot", "string", True), ("db", "string", False),
    ("sequence", "string", True), ("ts_us", "int64", True), ("ts_ns", "int64", True),
    ("schema", "string", False), ("table", "string", False), ("txId", "int64", True),
    ("lsn", "int64", True), ("xmin", "int64", True), ("origin", "string", True), ("origin_lsn", "int64", True),
)


def source_fields(connector: str) -> tuple[tuple[str, str, bool], ...]:
    """The ``source`` block's fields of a connector, in Debezium's order."""
    return POSTGRES_SOURCE_FIELDS if connector == POSTGRESQL else SOURCE_FIELDS


# io.debezium.connector.SnapshotRecord, lower-cased (Debezium 2.x/3.x).
SNAPSHOT_VALUES = ("true", "first", "first_in_data_collection", "last_in_data_collection",
                   "last", "false", "incremental")
_SNAPSHOT_FIELD = {"type": "string", "optional": True, "name": "io.debezium.data.Enum",
                   "version": 1, "parameters": {"allowed": ",".join(SNAPSHOT_VALUES)},
                   "default": "false", "field": "snapshot"}
_TRANSACTION_FIELD = {"type": "struct", "fields": [
    {"type": "string", "optional": False, "field": "id"},
    {"type": "int64", "optional": False, "field": "total_order"},
    {"type": "int64", "optional": False, "field": "data_collection_order"},
], "optional": True, "name": "event.block", "version": 1, "field": "transaction"}


def source_schema(connector: str) -> dict[str, Any]:
    """The ``source`` struct schema (``io.debezium.connector.<connector>.Source``)."""
    fields = [_SNAPSHOT_FIELD if name == "snapshot" else
              {"type": kind, "optional": optional, "field": name}
              for name, kind, optional in source_fields(connector)]
    return {"type": "struct", "fields": fields, "optional": False,
            "name": f"io.debezium.connector.{connector}.Source", "version": 1, "field": "source"}


def _prefix(server: str, schema: TableSchema) -> str:
    return f"{server}.{schema.table_id.db}.{schema.table_id.table}"


def key_schema(schema: TableSchema, options: DebeziumOptions, server: str) -> dict[str, Any]:
    """The key struct schema, ``<server>.<db>.<table>.Key``."""
    return {"type": "struct", "fields": [c.schema for c in key_codecs(schema, options)],
            "optional": False, "name": f"{_prefix(server, schema)}.Key"}


def envelope_schema(
    schema: TableSchema, options: DebeziumOptions, server: str, connector: str
) -> dict[str, Any]:
    """The value schema: ``<server>.<db>.<table>.Envelope`` with before, after, source,
    transaction, op, ts_ms, ts_us, ts_ns (Debezium 3.5's order)."""
    row = {"type": "struct", "fields": [c.schema for c in table_codecs(schema, options)],
           "optional": True, "name": f"{_prefix(server, schema)}.Value"}
    ts = [{"type": "int64", "optional": True, "field": f} for f in ("ts_ms", "ts_us", "ts_ns")]
    fields = [{**row, "field": "before"}, {**row, "field": "after"}, source_schema(connector),
              _TRANSACTION_FIELD, {"type": "string", "optional": False, "field": "op"}, *ts]
    return {"type": "struct", "fields": fields, "optional": False,
            "name": f"{_prefix(server, schema)}.Envelope", "version": 2}


# --- decoding by an embedded Connect schema (no TableSchema at hand) --------------------------

_BY_NAME: dict[str, Converter] = {
    "io.debezium.time.Date": v.dec_date,
    "org.apache.kafka.connect.data.Date": v.dec_date,
    "io.debezium.time.Timestamp": v.dec_millis,
    "org.apache.kafka.connect.data.Timestamp": v.dec_millis,
    "io.debezium.time.MicroTimestamp": v.dec_micros,
    "io.debezium.time.ZonedTimestamp": v.parse_zoned_timestamp,
    "io.debezium.time.MicroTime": v.dec_time_micros,
    "org.apache.kafka.connect.data.Time": v.dec_time_millis,
    "io.debezium.data.geometry.Point": v.dec_spatial,
    "io.debezium.data.geometry.Geometry": v.dec_spatial,
    "io.debezium.time.Time": v.dec_time_millis,
    "io.debezium.time.MicroDuration": v.dec_micro_duration,
    "io.debezium.data.VariableScaleDecimal": v.dec_variable_scale,
}
_BY_TYPE: dict[str, Converter] = {
    "int8": v.dec_int, "int16": v.dec_int, "int32": v.dec_int, "int64": v.dec_int,
    "float": v.dec_special_float32, "double": v.dec_special_float, "boolean": v.dec_bool,
    "string": v.dec_str, "bytes": v.dec_b64,
}


def decoder_for_schema(schema: dict[str, Any]) -> Converter:
    """A value decoder chosen by a Connect field schema's name, then by its type.

    Decimals come back as :class:`~decimal.Decimal` (BIGINT UNSIGNED too: the schema cannot tell
    it from a DECIMAL(20,0)); types it does not know come back as raw JSON values.
    """
    name, params = schema.get("name"), schema.get("parameters") or {}
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = int(params.get("scale", 0))
        return lambda x: v.decimal_from_b64(x, scale)
    if name == "io.debezium.data.Bits":
        return v.bits_codec(int(params.get("length", 8)))[1]
    if schema.get("type") == "array":
        return v.dec_array(decoder_for_schema(schema.get("items") or {}))
    return _BY_NAME.get(name or "") or _BY_TYPE.get(schema.get("type", ""), v.same)
