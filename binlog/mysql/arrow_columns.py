"""How each column of a chunk SELECT is read and turned into its Arrow type.

One :class:`ColumnRead` per column says three things, shared by every fetch backend:

* ``expr``: the SQL select expression. Most columns are selected as they are; a few are wrapped
  so that every backend receives a value it can represent exactly:

  - ``FLOAT`` as ``(c + 0e0)``: MariaDB's text protocol prints FLOAT with 6 significant digits
    (16777216 reads back as 16777200); the exact float32 widened to DOUBLE prints exactly.
  - ``DATE``/``DATETIME``/``TIMESTAMP`` as ``(c + INTERVAL 0 DAY)``: the server turns every value
    that is not a real calendar date in years 1-9999 into NULL (zero dates, zero month or day,
    ``2024-02-30`` under ALLOW_INVALID_DATES, year 0). Spark cannot hold them either; Debezium
    also emits NULL for zero dates.
  - ``TIME`` as text (``-838:59:59.000000`` and times over 24 hours have no Python or chrono
    equivalent), parsed into ``duration[us]`` with Arrow compute.
  - ``DECIMAL`` wider than connectorx's 28 digits or with scale above 10 as text, cast to
    ``decimal128`` by Arrow (or kept as text above Spark's 38 digits, see cdc/schema.py).
  - ``JSON`` (MySQL) as text, exactly as the server prints it.

* ``raw_type``: the Arrow type a backend must deliver for that expression.
* :meth:`ColumnRead.finish`: the vectorized step from ``raw_type`` to the schema's type.

TIMESTAMP values are read in a session whose ``time_zone`` is ``+00:00``, so the naive wall clock
the server sends is the UTC instant; ``finish`` labels it ``timestamp[us, tz=UTC]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from binlog.mysql.types import quote_ident
from cdc.model.schema import Column, TableSchema

# connectorx reads DECIMAL through rust_decimal (28 digits) into decimal128(38, 10).
NATIVE_DECIMAL_MAX_PRECISION = 28
NATIVE_DECIMAL_MAX_SCALE = 10

_TIME_PATTERN = r"^(?P<sign>-?)(?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,6}))?$"
_TEMPORAL_DATES = frozenset({"date", "datetime", "timestamp"})


class ColumnValueError(ValueError):
    """A value the server sent does not have the shape its column type promises."""


@dataclass(frozen=True)
class ColumnRead:
    """How one column is selected and converted.

    Attributes:
        column: the column as information_schema describes it.
        expr: the SQL select expression (without alias).
        raw_type: the Arrow type backends deliver for ``expr``.
        target: the Arrow type of the column in ``TableSchema.arrow_schema()``.
        time_text: ``expr`` yields TIME text that :func:`parse_time` turns into ``target``.
    """

    column: Column
    expr: str
    raw_type: pa.DataType
    target: pa.DataType
    time_text: bool = False

    def select_item(self) -> str:
        """``<expr> AS `name```, ready for a select list."""
        return f"{self.expr} AS {quote_ident(self.column.name)}"

    def finish(self, raw: pa.Array) -> pa.Array:
        """Convert a ``raw_type`` array to the column's target type (vectorized).

        Raises:
            ColumnValueError: a TIME value is not ``[-]H:MM:SS[.ffffff]``.
            pyarrow.ArrowInvalid: a value does not fit the target type (never for server data).
        """
        if self.time_text:
            return parse_time(raw)
        if raw.type == self.target:
            return raw
        return raw.cast(self.target)


def column_reads(schema: TableSchema) -> tuple[ColumnRead, ...]:
    """The read plan of every column of ``schema``, in column order."""
    return tuple(column_read(c) for c in schema.columns)


def column_read(col: Column) -> ColumnRead:
    """The read plan of one column (see the module docstring for the wrapped types)."""
    name = quote_ident(col.name)
    target = col.arrow_type()
    t = col.data_type
    if t == "float":
        return ColumnRead(col, f"({name} + 0e0)", pa.float64(), target)
    if t in _TEMPORAL_DATES:
        raw = pa.date32() if t == "date" else pa.timestamp("us")
        return ColumnRead(col, f"({name} + INTERVAL 0 DAY)", raw, target)
    if t == "time":
        return ColumnRead(col, f"CAST({name} AS CHAR)", pa.string(), target, time_text=True)
    if t in ("decimal", "numeric") and not decimal_is_native(col):
        return ColumnRead(col, f"CAST({name} AS CHAR)", pa.string(), target)
    if t == "json":
        return ColumnRead(col, f"CAST({name} AS CHAR)", pa.string(), target)
    return ColumnRead(col, name, target, target)


def decimal_is_native(col: Column) -> bool:
    """True when a DECIMAL column travels as a number (not as text) to every backend."""
    precision, scale = col.precision or 10, col.scale or 0
    return precision <= NATIVE_DECIMAL_MAX_PRECISION and scale <= NATIVE_DECIMAL_MAX_SCALE


def select_list(reads: tuple[ColumnRead, ...]) -> str:
    """The comma-separated select list of ``reads``."""
    return ", ".join(r.select_item() for r in reads)


def parse_time(text: pa.Array) -> pa.Array:
    """MySQL TIME text (``-838:59:59.5``, ``100:00:00``) as ``duration[us]``, nulls kept.

    Raises:
        ColumnValueError: a non-null value does not look like a MySQL TIME.
    """
    text = text.cast(pa.string())
    parts = pc.extract_regex(text, _TIME_PATTERN)
    if parts.null_count != text.null_count:
        bad = pc.filter(text, pc.and_(pc.is_valid(text), pc.is_null(parts)))
        raise ColumnValueError(f"not a MySQL TIME value: {bad[0].as_py()!r}")

    def field(name: str) -> pa.Array:
        return pc.struct_field(parts, name).cast(pa.int64())

    fraction = pc.utf8_rpad(pc.struct_field(parts, "f"), 6, "0")
    fraction = fraction.cast(pa.int64())
    seconds = pc.add(
        pc.add(pc.multiply(field("h"), 3600), pc.multiply(field("m"), 60)), field("s")
    )
    micros = pc.add(pc.multiply(seconds, 1_000_000), fraction)
    negative = pc.equal(pc.struct_field(parts, "sign"), "-")
    micros = pc.if_else(negative, pc.negate(micros), micros)
    return micros.cast(pa.duration("us"))
