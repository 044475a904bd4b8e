"""PostgreSQL text values -> Arrow by Arrow kernels, a column at a time (executor; no I/O).

Each kernel takes a column of texts in the session's output form (:data:`types.SESSION_SETTINGS`)
and returns ``(values, rest)``: the converted column, and a mask of the values the kernel did not
convert (they are null in ``values``). :func:`types.to_arrow` converts ``rest`` value by value with
the same parser as ever, so a kernel only has to be exact on the forms it accepts: each accepts
one regular form (``YYYY-MM-DD``, ``HH:MM:SS[.f]``...) and leaves the rest (``infinity``, BC
dates, years past 9999) to the per-value parser.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Kernel = Callable[[pa.Array, pa.DataType], tuple[pa.Array, pa.Array]]

_DATE = r"^\d{4}-\d\d-\d\d$"
_TIME = r"^\d\d:\d\d:\d\d(\.\d{1,6})?$"
_TIMESTAMP = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?$"
_TIMESTAMPTZ = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?\+00$"
_NUMERIC = r"^-?\d+(\.\d+)?$"
_MONEY = r"^-?\$?[\d,]+(\.\d+)?$"
_BYTEA = r"^\\x([0-9a-fA-F]{2})*$"
_ARRAY = r'^\{[^"{}\\]*\}$'  # one dimension, no quoted element, no escape, no explicit bounds

_HEX = np.full(256, 0, np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint8)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint8)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def _split(texts: pa.Array, pattern: str) -> tuple[pa.Array, pa.Array]:
    """The texts matching ``pattern`` (others null), and the mask of non-null texts that do not."""
    ok = pc.fill_null(pc.match_substring_regex(texts, pattern), False)
    rest = pc.and_(pc.is_valid(texts), pc.invert(ok))
    return pc.if_else(ok, texts, pa.scalar(None, texts.type)), rest


def _cast(pattern: str) -> Kernel:
    def kernel(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
        good, rest = _split(texts, pattern)
        return good.cast(t), rest
    return kernel


def _timestamptz(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    good, rest = _split(texts, _TIMESTAMPTZ)  # TimeZone=UTC: every value ends in +00
    return pc.utf8_slice_codeunits(good, 0, -3).cast(pa.timestamp("us")).cast(t), rest


def _time(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """``HH:MM:SS[.ffffff]`` (``24:00:00`` included) -> microseconds since midnight."""
    good, rest = _split(texts, _TIME)

    def part(start: int, stop: int) -> pa.Array:
        return pc.utf8_slice_codeunits(good, start, stop).cast(pa.int64())

    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(good, 9, 15), 6, "0").cast(pa.int64())
    micros = pc.add(pc.multiply(pc.add(pc.add(pc.multiply(part(0, 2), 3600), pc.multiply(part(3, 5), 60)),
                                       part(6, 8)), 1_000_000), fraction)
    return micros.cast(t), rest


def _numeric(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """``numeric(p, s)``: NaN and +-Infinity are left to the per-value parser (null)."""
    good, rest = _split(texts, _NUMERIC)
    return good.cast(t), rest


def _money(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """``-$1,234.50`` (``lc_monetary=C``) -> decimal."""
    good, rest = _split(texts, _MONEY)
    value = pc.replace_substring_regex(good, r"[^0-9.]", "").cast(t)
    return pc.if_else(pc.starts_with(good, "-"), pc.negate(value), value), rest


def _bytea(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """``\\x00ff`` (``bytea_output=hex``) -> bytes: the hex digits pairwise, by a lookup table."""
    good, rest = _split(texts, _BYTEA)
    hexes = pc.utf8_slice_codeunits(good, 2, None)
    if not isinstance(hexes, pa.StringArray):
        hexes = hexes.combine_chunks()
    offsets = np.frombuffer(hexes.buffers()[1], np.int32, len(hexes) + 1, hexes.offset * 4).astype(np.int64)
    data = np.frombuffer(hexes.buffers()[2] or b"", np.uint8)[offsets[0]:offsets[-1]]
    nibbles = _HEX[data]
    out = (nibbles[0::2] << 4) | nibbles[1::2]
    new_offsets = ((offsets - offsets[0]) // 2).astype(np.int32)
    validity = None if hexes.null_count == 0 else pc.is_valid(hexes).buffers()[1]
    return pa.BinaryArray.from_buffers(t, len(hexes), [validity, pa.py_buffer(new_offsets), pa.py_buffer(out)]), rest


def array_kernel(element: Callable[[pa.Array], pa.Array]) -> Kernel:
    """One-dimensional arrays whose elements are unquoted (``{1,NULL,3}``): split on commas, the
    elements converted as a column of their own by ``element``; quoted elements are left over."""
    def kernel(texts: pa.Array, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
        good, rest = _split(texts, _ARRAY)
        inner = pc.utf8_slice_codeunits(good, 1, -1)
        some = pc.fill_null(pc.not_equal(inner, ""), False)  # '{}': no element
        parts = pc.split_pattern(pc.if_else(some, inner, pa.scalar(None, pa.string())), ",")
        counts = pc.fill_null(pc.list_value_length(parts), 0).to_numpy(zero_copy_only=False)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        raw = pc.utf8_trim_whitespace(pc.list_flatten(parts))
        values = element(pc.if_else(pc.equal(raw, "NULL"), pa.scalar(None, pa.string()), raw))
        return pa.ListArray.from_arrays(pa.array(offsets), values, type=t, mask=pc.is_null(good)), rest
    return kernel


def kernel_for(t: pa.DataType, typname: str) -> Kernel | None:
    """The kernel converting a column of ``typname`` to ``t``, or None (value by value)."""
    if typname == "money":
        return _money
    if typname == "timetz":
        return None
    if pa.types.is_decimal(t):
        return _numeric
    if pa.types.is_binary(t):
        return _bytea
    if pa.types.is_date(t):
        return _cast(_DATE)
    if pa.types.is_duration(t):
        return _time
    if pa.types.is_timestamp(t):
        return _timestamptz if t.tz else _cast(_TIMESTAMP)
    return None
