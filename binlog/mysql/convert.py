"""Typed row values from mysql-replication's decoded binlog rows.

mysql-replication decodes each rows event into ``{column name: value}`` dicts. Most values are
already what ``cdc/schema.py``'s Arrow mapping wants (int, float, Decimal, str, bytes, date,
naive datetime, timedelta); this module fixes the rest, per column, so a binlog change carries the
same Python values a snapshot ``SELECT`` (session time zone UTC) yields:

==================  =================================  ==================================
column              mysql-replication gives            we emit
==================  =================================  ==================================
TIMESTAMP           naive datetime in UTC              UTC-aware datetime
TIMESTAMP 0000-...  ``1970-01-01 00:00:00`` (epoch 0)  None, as the snapshot reads it
DATE 2024-02-30     ValueError (kills the stream)      None, as the snapshot reads it
YEAR                ``1900`` for the zero year 0000    0
SET                 ``set`` (unordered), None if empty  ``'a,c'`` in definition order, ``''``
BIT(n)              ``'0101...'`` string               big-endian bytes, (n + 7) // 8 long
BINARY(n)           bytes without trailing ``\\x00``    bytes right-padded to n
BINARY, BLOB empty  ``''`` (str: the library "decodes")  ``b''``
TIME(n>0) negative  wrong fraction: -00:00:01.1 as -1.9   the value (fraction mirrored back)
DECIMAL(p > 38)     Decimal                            plain-notation str (Arrow string)
JSON (MySQL)        parsed Python objects              JSON text
INET6, UUID         16 raw bytes (MariaDB)             their text form
text, rare charset  bytes (charset unknown to Python)  str
==================  =================================  ==================================

TIMESTAMP is decoded from the epoch seconds stored in the binlog with ``utcfromtimestamp``, so
the result is correct whatever the server's or this machine's time zone. The zero TIMESTAMP is
stored as epoch second 0, which no real TIMESTAMP can hold (the range starts at 00:00:01 UTC).

A DATE (or old-format DATETIME) the calendar lacks, storable under ``ALLOW_INVALID_DATES``, makes
the library's decoder raise ``ValueError`` in the middle of a rows event; :func:`tolerate_invalid_dates`
(applied on import) makes it return None instead, as the library already does for DATETIME2.

Known gaps: a MySQL JSON document that is the bare literal ``null`` arrives as SQL NULL (the
library does not tell them apart); MySQL JSON text is re-serialized, so number formatting may
differ from the server's; columns in ``utf16``/``utf32`` are mis-decoded by the library.

Conversion runs once per value of the few column types above and mutates the library's fresh
row dicts in place, to stay cheap on the hot path.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pymysql.charset import charset_by_name
from pymysqlreplication.constants import NONE_SOURCE
from pymysqlreplication.row_event import RowsEvent

from binlog.mysql.types import STRING_TYPES
from cdc.model.schema import Column, TableSchema

Converter = Callable[[Any], Any]
Row = dict[str, Any]

_UTC = dt.timezone.utc
_ZERO_TIME = dt.timedelta(0)
_SECOND_US = 1_000_000
_ZERO_TIMESTAMP = dt.datetime(1970, 1, 1)  # what the library decodes '0000-00-00 00:00:00' to
_QUOTED = re.compile(r"'((?:[^']|'')*)'")
_LENGTH = re.compile(r"\((\d+)\)")
_TEXT_ONLY = STRING_TYPES - {"enum", "set", "json"}
_BYTE_STRINGS = frozenset({"varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
# MySQL charsets whose Python codec name differs from what pymysql knows.
_CODECS = {"ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be"}


def value_converter(column: Column) -> Converter | None:
    """The function that turns the library's value for ``column`` into ours (None: keep it).

    The function is only called with non-NULL values.
    """
    t = column.data_type
    if t == "timestamp":
        return _utc
    if t == "year":
        return _year
    if t == "time" and (column.datetime_precision or 0) > 0:
        return _negative_time
    if t == "set":
        return _set_text(column)
    if t == "bit":
        return _bits
    if t == "json":
        return _json_text
    if t in ("decimal", "numeric") and pa.types.is_string(column.arrow):
        return _decimal_text
    if t == "binary":
        return _padded(_declared_length(column))
    if t in _BYTE_STRINGS:
        return _bytes
    if t == "inet6":
        return _inet6
    if t == "uuid":
        return _uuid
    if t in _TEXT_ONLY and not _python_decodes(column.charset):
        return _text(_CODECS.get(column.charset or "", "utf-8"))
    return None


class RowConverter:
    """Types the rows of one table, given its schema (the binlog's column names must match it).

    Args:
        schema: the table's columns, in the order the binlog lists them.
        version: the schema history's version of ``schema`` (docs/concepts/schema-evolution.md).
    """

    def __init__(self, schema: TableSchema, version: int = 0) -> None:
        self.schema = schema
        self.version = version
        self.names = tuple(schema.column_names)
        self._steps = tuple(
            (c.name, fn) for c in schema.columns if (fn := value_converter(c)) is not None
        )
        self._sets = tuple(c.name for c in schema.columns if c.data_type == "set")

    def __call__(self, values: Row, none_sources: dict[str, str]) -> Row:
        """Convert one decoded row in place and return it.

        Args:
            values: the library's ``values``/``before_values``/``after_values`` dict.
            none_sources: the matching ``none_sources`` dict (why a value is None).
        """
        for name, fn in self._steps:
            v = values[name]
            if v is not None:
                values[name] = fn(v)
        for name in self._sets:
            if values[name] is None and none_sources.get(name) == NONE_SOURCE.EMPTY_SET:
                values[name] = ""
        return values


def _utc(v: dt.datetime) -> dt.datetime | None:
    return None if v == _ZERO_TIMESTAMP else v.replace(tzinfo=_UTC)


def _negative_time(v: dt.timedelta) -> dt.timedelta:
    """Undo the library's misreading of a negative TIME with a fraction.

    MySQL stores -12:34:56.1 as the integer part -12:34:57 plus the fraction +0.9 (a packed
    two's-complement number); the library negates the integer part's magnitude and subtracts the
    fraction read as -0.1, giving -(12:34:57 - 0.1) = -12:34:56.9. With ``m`` that result's
    magnitude, the value is -(whole seconds of m + (1 s - fraction of m)).
    """
    if v >= _ZERO_TIME or not v.microseconds:
        return v
    magnitude = -v
    fraction = magnitude.microseconds
    return -(magnitude + dt.timedelta(microseconds=_SECOND_US - 2 * fraction))


def _year(v: int) -> int:
    return 0 if v == 1900 else v  # YEAR is 1901..2155 or 0000, stored as v - 1900


def _set_text(column: Column) -> Converter:
    members = set_members(column.column_type)

    def convert(v: set[str]) -> str:
        return ",".join(m for m in members if m in v)

    return convert


def set_members(column_type: str) -> tuple[str, ...]:
    """The members of ``set('a','b')`` / ``enum(...)`` in definition order."""
    return tuple(m.replace("''", "'") for m in _QUOTED.findall(column_type))


def _bits(v: str) -> bytes:
    return int(v, 2).to_bytes((len(v) + 7) // 8, "big")


def _json_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return json.dumps(_plain_json(v), ensure_ascii=False)


def _plain_json(v: Any) -> Any:
    if isinstance(v, dict):
        return {_plain_json(k): _plain_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain_json(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (dt.date, dt.time, dt.timedelta)):
        return str(v)
    return v


def _decimal_text(v: Decimal) -> str:
    return format(v, "f")


def _declared_length(column: Column) -> int:
    m = _LENGTH.search(column.column_type)
    return int(m.group(1)) if m else 1


def _bytes(v: bytes | str) -> bytes:
    # The library decodes binary strings with the unknown codec "binary": a LookupError keeps the
    # bytes, but Python decodes b"" without a codec lookup, so an empty value arrives as "".
    return v if isinstance(v, bytes) else v.encode("utf-8")


def _padded(length: int) -> Converter:
    def convert(v: bytes | str) -> bytes:
        return _bytes(v).ljust(length, b"\x00")

    return convert


def _inet6(v: bytes | str) -> str:
    if isinstance(v, str):
        return v
    addr = ipaddress.IPv6Address(v.ljust(16, b"\x00"))
    mapped = addr.ipv4_mapped
    return f"::ffff:{mapped}" if mapped is not None else str(addr)


def _uuid(v: bytes | str) -> str:
    if isinstance(v, str):
        return v
    return str(uuid.UUID(bytes=v.ljust(16, b"\x00")))


def _python_decodes(charset: str | None) -> bool:
    """True when mysql-replication can decode this charset (pymysql knows a Python codec)."""
    if charset is None:
        return True
    if charset in _CODECS:
        return False
    known = charset_by_name(charset)
    codec = known.encoding if known else charset
    try:
        b"".decode(codec)
    except LookupError:
        return False
    return True


def _text(codec: str) -> Converter:
    def convert(v: str | bytes) -> str:
        return v if isinstance(v, str) else v.decode(codec, "replace")

    return convert


def tolerate_invalid_dates() -> None:
    """Make mysql-replication read a DATE/DATETIME the calendar lacks as None, not raise.

    Its DATE and old-format DATETIME decoders consume the value's bytes, then build a
    ``datetime.date``; ``2024-02-30`` raises ``ValueError`` and aborts the whole rows event. The
    wrapped decoders return None for such a value (the bytes are already consumed, so the rest of
    the row decodes normally). Idempotent.
    """
    for name in ("_RowsEvent__read_date", "_RowsEvent__read_datetime"):
        original = getattr(RowsEvent, name, None)
        if original is None or getattr(original, "_spark_cdc_tolerant", False):
            continue
        setattr(RowsEvent, name, _returning_none_on_value_error(original))


def _returning_none_on_value_error(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def tolerant(event: Any) -> Any:
        try:
            return decode(event)
        except ValueError:
            return None

    tolerant._spark_cdc_tolerant = True  # type: ignore[attr-defined]
    return tolerant


tolerate_invalid_dates()
