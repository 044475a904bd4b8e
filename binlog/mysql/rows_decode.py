"""Decode binlog rows events straight into Arrow, column-wise (the fast path of ``read_event_rows``).

:meth:`RowsDecoder.plan` looks once at a table map (the binlog's column types and metadata, as
mysql-replication parsed them) and the table's :class:`~cdc.model.schema.TableSchema`, and either
returns a decoder or says why the table must stay on the per-row path (``binlog/convert.py``).
:meth:`RowsDecoder.decode` then turns the raw rows of one or more consecutive rows events into
one Arrow table per image, typed as ``schema.arrow_schema()``: a numba kernel locates every value
(``binlog/rows_kernels.py``), then each column is assembled from its values in one pass.

The values equal what the per-row path emits (``RowConverter`` output put into Arrow): zero and
calendar-less dates are NULL, the zero TIMESTAMP is NULL, YEAR 0000 is 0, SET is its members in
definition order (``''`` when empty), BIT is big-endian bytes, BINARY(n) is padded to n bytes,
DECIMAL wider than 38 digits is plain text. Text in a charset other than UTF-8/ASCII is decoded
per value the way mysql-replication does it. The rest falls back, per table: MySQL's binary JSON,
pre-5.6 temporal types, MariaDB's INET6/UUID, and any column whose binlog type disagrees with the
schema (DDL between the event and the schema read).
"""

from __future__ import annotations

import codecs
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE as T
from pymysqlreplication.row_event import RowsEvent

from binlog.mysql import rows_kernels as k
from binlog.mysql.convert import value_converter
from binlog.mysql.types import MAX_ARROW_DECIMAL_PRECISION, unsigned
from cdc.model.schema import Column, TableSchema

# (buffer, starts, lens) of one column's values -> its Arrow array
Assemble = Callable[[np.ndarray, np.ndarray, np.ndarray], pa.Array]

_INTEGERS = {"tinyint": (T.TINY, 1), "smallint": (T.SHORT, 2), "mediumint": (T.INT24, 3),
             "int": (T.LONG, 4), "integer": (T.LONG, 4), "bigint": (T.LONGLONG, 8)}
_TEMPORAL = {"datetime": T.DATETIME2, "timestamp": T.TIMESTAMP2, "time": T.TIME2}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
             "multipolygon", "geometrycollection"}
_STRING_TYPES = (T.STRING, T.VARCHAR, T.VAR_STRING)
_UTF8_CODECS = {"utf-8", "ascii"}
_LENGTH = re.compile(r"\((\d+)\)")


class Unsupported(Exception):
    """A column the fast path cannot decode exactly; its table uses the per-row path."""


@dataclass(frozen=True)
class _ColumnPlan:
    kind: int  # rows_kernels.FIXED or PREFIXED
    width: int  # bytes, or length-prefix bytes
    assemble: Assemble


class RowsDecoder:
    """Decodes the rows of one table map into Arrow; build it with :meth:`plan`.

    Args:
        schema: the table's columns (names and order match the table map).
        plans: how each column is laid out and assembled.
    """

    def __init__(self, schema: TableSchema, plans: Sequence[_ColumnPlan]) -> None:
        self.schema = schema
        self.arrow_schema = schema.arrow_schema()
        self._plans = tuple(plans)
        self._kinds = np.array([p.kind for p in plans], np.int64)
        self._widths = np.array([p.width for p in plans], np.int64)

    @classmethod
    def plan(cls, schema: TableSchema, binlog_columns: Sequence[Any]) -> RowsDecoder | str:
        """A decoder for rows of ``schema``'s table, or why there is none (a sentence).

        Args:
            schema: the table's schema; its columns match ``binlog_columns`` by position.
            binlog_columns: mysql-replication's ``TableMapEvent.columns``.
        """
        if len(binlog_columns) != len(schema.columns):
            return (f"the table map has {len(binlog_columns)} columns, "
                    f"the schema {len(schema.columns)}")
        plans = []
        for column, binlog in zip(schema.columns, binlog_columns, strict=True):
            try:
                plans.append(_column_plan(column, binlog))
            except Unsupported as exc:
                return f"column {column.name} ({column.column_type}): {exc}"
        return cls(schema, plans)

    def decode(self, rows: bytes | bytearray | memoryview, ends: np.ndarray,
               images: int) -> tuple[list[pa.Table], np.ndarray]:
        """Decode the rows of consecutive events of this table map.

        Args:
            rows: the events' row bytes back to back (after the columns-present bitmaps,
                without checksums).
            ends: int64 end offset of each event's rows in ``rows``.
            images: 1 for write and delete events, 2 for update events (before, after).

        Returns:
            One table per image (all events' rows in order) and the int64 row count per event.

        Raises:
            ValueError: the bytes do not parse as rows of this table map.
        """
        buf = np.frombuffer(rows, np.uint8)
        starts, lens, counts = k.locate(buf, ends, self._kinds, self._widths, images)
        total = int(counts.sum())
        columns = [plan.assemble(buf, starts[c], lens[c]) for c, plan in enumerate(self._plans)]
        tables = [
            pa.Table.from_arrays([a.slice(i * total, total) for a in columns],
                                 schema=self.arrow_schema)
            for i in range(images)
        ]
        return tables, counts


def _column_plan(column: Column, binlog: Any) -> _ColumnPlan:
    t, kind = column.data_type, binlog.type
    if t in _INTEGERS:
        return _integer_plan(column, binlog)
    if t == "float" and kind == T.FLOAT:
        return _ColumnPlan(k.FIXED, 4, functools.partial(_floats, 4, pa.float32()))
    if t in ("double", "real") and kind == T.DOUBLE:
        return _ColumnPlan(k.FIXED, 8, functools.partial(_floats, 8, pa.float64()))
    if t in ("decimal", "numeric") and kind == T.NEWDECIMAL:
        return _decimal_plan(column, binlog)
    if t == "date" and kind == T.DATE:
        return _ColumnPlan(k.FIXED, 3, _dates)
    if t in _TEMPORAL and kind == _TEMPORAL[t]:
        fsp = int(binlog.fsp)
        width = {"datetime": 5, "timestamp": 4, "time": 3}[t] + (fsp + 1) // 2
        assemble = functools.partial(_temporal, t, fsp, column.arrow_type())
        return _ColumnPlan(k.FIXED, width, assemble)
    if t == "year" and kind == T.YEAR:
        return _ColumnPlan(k.FIXED, 1, _years)
    if t == "enum" and kind == T.ENUM and binlog.enum_values is not None:
        members = pa.array(list(binlog.enum_values), pa.string())
        return _ColumnPlan(k.FIXED, binlog.size, functools.partial(_enums, binlog.size, members))
    if t == "set" and kind == T.SET and binlog.set_values is not None:
        return _set_plan(binlog)
    if t == "bit" and kind == T.BIT:
        first_mask = (1 << (binlog.bits % 8)) - 1 if binlog.bits % 8 else 0xFF
        return _ColumnPlan(k.FIXED, binlog.bytes,
                           functools.partial(_fixed_bytes, first_mask))
    if t in _TEXT | _BYTES | _GEOMETRY:
        return _string_plan(column, binlog)
    raise Unsupported(f"binlog type {kind} is not decoded column-wise")


def _integer_plan(column: Column, binlog: Any) -> _ColumnPlan:
    kind, width = _INTEGERS[column.data_type]
    if binlog.type != kind:
        raise Unsupported(f"the binlog has type {binlog.type}, not {kind}")
    if bool(binlog.unsigned) != unsigned(column):
        raise Unsupported("the binlog's signedness differs from the schema's")
    return _ColumnPlan(k.FIXED, width, functools.partial(
        _integers, width, not unsigned(column), column.arrow))


def _decimal_plan(column: Column, binlog: Any) -> _ColumnPlan:
    precision, scale = int(binlog.precision), int(binlog.decimals)
    if (precision, scale) != (column.precision or 10, column.scale or 0):
        raise Unsupported(f"the binlog says DECIMAL({precision},{scale})")
    size = k.decimal_size(precision, scale)
    if precision > MAX_ARROW_DECIMAL_PRECISION:
        return _ColumnPlan(k.FIXED, size, functools.partial(_decimal_text, precision, scale))
    return _ColumnPlan(k.FIXED, size, functools.partial(
        _decimals, precision, scale, column.arrow_type()))


def _set_plan(binlog: Any) -> _ColumnPlan:
    encoded = [m.encode("utf-8") for m in binlog.set_values]
    if len(encoded) > 64:
        raise Unsupported("a SET has at most 64 members")
    offsets = np.zeros(len(encoded) + 1, np.int64)
    offsets[1:] = np.cumsum([len(m) for m in encoded])
    members = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
    return _ColumnPlan(k.FIXED, binlog.size,
                       functools.partial(_sets, binlog.size, members, offsets))


def _string_plan(column: Column, binlog: Any) -> _ColumnPlan:
    t = column.data_type
    if t in _GEOMETRY:
        if binlog.type != T.GEOMETRY:
            raise Unsupported(f"the binlog has type {binlog.type}, not GEOMETRY")
        return _ColumnPlan(k.PREFIXED, binlog.length_size,
                           functools.partial(_var, pa.binary(), 0))
    if t in ("char", "binary", "varchar", "varbinary"):
        if binlog.type not in _STRING_TYPES:
            raise Unsupported(f"the binlog has type {binlog.type}, not a string type")
        width = 2 if binlog.max_length > 255 else 1
    elif binlog.type != T.BLOB:
        raise Unsupported(f"the binlog has type {binlog.type}, not BLOB")
    else:
        width = binlog.length_size
    if t in _BYTES:
        pad = _declared_length(column) if t == "binary" else 0
        return _ColumnPlan(k.PREFIXED, width, functools.partial(_var, pa.binary(), pad))
    charset = binlog.character_set_name
    if value_converter(column) is None and _codec(charset) in _UTF8_CODECS:
        return _ColumnPlan(k.PREFIXED, width, functools.partial(_var, pa.string(), 0))
    return _ColumnPlan(k.PREFIXED, width, functools.partial(_text_per_value, column, charset))


def _codec(charset: str | None) -> str | None:
    """The normalized Python codec mysql-replication decodes ``charset`` with."""
    try:
        return codecs.lookup(RowsEvent.charset_to_encoding(charset) if charset else "utf-8").name
    except LookupError:
        return None


def _declared_length(column: Column) -> int:
    m = _LENGTH.search(column.column_type)
    return int(m.group(1)) if m else 1


# ---- assembly: one column's values -> an Arrow array ---------------------------------------


def _array(type_: pa.DataType, valid: np.ndarray, *buffers: np.ndarray) -> pa.Array:
    """An Arrow array from numpy buffers and a boolean validity vector."""
    n = valid.shape[0]
    nulls = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(type_, n, [bitmap, *(pa.py_buffer(b) for b in buffers)],
                                 null_count=nulls)


def _integers(width: int, signed: bool, type_: pa.DataType, buf: np.ndarray, starts: np.ndarray,
              lens: np.ndarray) -> pa.Array:
    values = k.int_le(buf, starts, width, signed)
    if pa.types.is_decimal(type_):  # BIGINT UNSIGNED: decimal128(20, 0)
        words = np.zeros((values.shape[0], 2), np.int64)
        words[:, 0] = values
        return _array(type_, starts >= 0, words)
    return _array(type_, starts >= 0, values.astype(type_.to_pandas_dtype()))


def _floats(width: int, type_: pa.DataType, buf: np.ndarray, starts: np.ndarray,
            lens: np.ndarray) -> pa.Array:
    return _array(type_, starts >= 0, k.gather_fixed(buf, starts, width))


def _decimals(precision: int, scale: int, type_: pa.DataType, buf: np.ndarray,
              starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    return _array(type_, starts >= 0, k.decimal128(buf, starts, precision, scale))


def _decimal_text(precision: int, scale: int, buf: np.ndarray, starts: np.ndarray,
                  lens: np.ndarray) -> pa.Array:
    offsets, data = k.decimal_text(buf, starts, precision, scale)
    return _array(pa.string(), starts >= 0, offsets, data)


def _dates(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    days, valid = k.date32(buf, starts)
    return _array(pa.date32(), valid, days)


def _temporal(data_type: str, fsp: int, type_: pa.DataType, buf: np.ndarray,
              starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    if data_type == "time":
        return _array(type_, starts >= 0, k.time2(buf, starts, fsp))
    decode = k.datetime2 if data_type == "datetime" else k.timestamp2
    micros, valid = decode(buf, starts, fsp)
    return _array(type_, valid, micros)


def _years(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    raw = k.int_le(buf, starts, 1, False)
    return _array(pa.int32(), starts >= 0, np.where(raw == 0, 0, raw + 1900).astype(np.int32))


def _enums(width: int, members: pa.Array, buf: np.ndarray, starts: np.ndarray,
           lens: np.ndarray) -> pa.Array:
    index = pa.array(k.int_le(buf, starts, width, False), mask=starts < 0)
    return members.take(index)


def _sets(width: int, members: np.ndarray, offsets: np.ndarray, buf: np.ndarray,
          starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    valid = starts >= 0
    text_offsets, data = k.set_text(k.int_le(buf, starts, width, False), valid, members, offsets)
    return _array(pa.string(), valid, text_offsets, data)


def _fixed_bytes(first_mask: int, buf: np.ndarray, starts: np.ndarray,
                 lens: np.ndarray) -> pa.Array:
    offsets, data = k.gather_var(buf, starts, lens, 0, first_mask)
    return _array(pa.binary(), starts >= 0, offsets, data)


def _var(type_: pa.DataType, pad_to: int, buf: np.ndarray, starts: np.ndarray,
         lens: np.ndarray) -> pa.Array:
    offsets, data = k.gather_var(buf, starts, lens, pad_to, 0xFF)
    array = _array(type_, starts >= 0, offsets, data)
    if type_ == pa.string():
        array.validate(full=True)  # invalid UTF-8 is an error, as in mysql-replication
    return array


def _text_per_value(column: Column, charset: str | None, buf: np.ndarray, starts: np.ndarray,
                    lens: np.ndarray) -> pa.Array:
    """Text in another charset, decoded value by value exactly as the per-row path does."""
    encoding = RowsEvent.charset_to_encoding(charset) if charset else "utf-8"
    convert = value_converter(column)
    values: list[Any] = []
    for s, n in zip(starts.tolist(), lens.tolist(), strict=True):
        if s < 0:
            values.append(None)
            continue
        raw = buf[s:s + n].tobytes()
        try:
            v: Any = raw.decode(encoding)
        except LookupError:
            v = raw
        values.append(convert(v) if convert else v)
    return pa.array(values, pa.string())
