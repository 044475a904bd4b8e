"""Numba kernels that decode binlog row images (used by ``binlog/rows_decode.py``).

A rows event's body is a sequence of row images. Each image is a NULL bitmap (one bit per column,
``binlog_row_image=FULL``) followed by the non-NULL values, each either fixed-width or prefixed by
a 1-4 byte little-endian length. An UPDATE row is two images, before then after.

:func:`locate` walks the images once and records, per column and image, where each value starts
(-1 for NULL) and how long it is; the other kernels turn one column's values into the buffers of
an Arrow array (integers, packed temporal and DECIMAL values, strings). Every kernel is compiled on
first use and cached on disk (``cache=True``), so later processes load it in milliseconds.

Formats (MySQL's ``sql/rpl_record.cc``, ``my_time.cc`` and ``decimal.c`` describe them): integers
little-endian; DATE 3 bytes little-endian ``y << 9 | m << 5 | d``; DATETIME2, TIMESTAMP2 and TIME2
big-endian with 0-3 fraction bytes; DECIMAL packed groups of 9 digits in 4 big-endian bytes, the
first byte's top bit set for non-negative values and every byte inverted for negative ones.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

FIXED = 0  # layout kind: ``width`` bytes
PREFIXED = 1  # layout kind: ``width``-byte little-endian length, then that many bytes

_DIG2BYTES = np.array([0, 1, 1, 2, 2, 3, 3, 4, 4, 4], dtype=np.int64)
_POW10 = np.array([10**k for k in range(10)], dtype=np.int64)
_DATETIME_US = 86_400_000_000

Array = Any  # numpy arrays; numba kernels are not typed for mypy
Int = Any  # a numba integer scalar (np.int64 inside kernels)


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a packed DECIMAL(precision, scale) value."""
    intg = precision - scale
    return int(_DIG2BYTES[intg % 9] + 4 * (intg // 9) + 4 * (scale // 9) + _DIG2BYTES[scale % 9])


@numba.njit(cache=True)
def _image(buf: Array, pos: int, end: int, kinds: Array, widths: Array, starts: Array,
           lens: Array, slot: int) -> int:
    """Walk one row image at ``pos``; record starts/lengths in column ``slot`` if ``slot >= 0``."""
    ncol = kinds.shape[0]
    nulls = pos
    pos += (ncol + 7) // 8
    if pos > end:
        raise ValueError("binlog rows event truncated inside a NULL bitmap")
    for c in range(ncol):
        if (buf[nulls + (c >> 3)] >> (c & 7)) & 1:
            if slot >= 0:
                starts[c, slot] = -1
                lens[c, slot] = 0
            continue
        width = widths[c]
        length = width
        if kinds[c] == PREFIXED:
            if pos + width > end:
                raise ValueError("binlog rows event truncated inside a length prefix")
            length = 0
            for k in range(width):
                length |= np.int64(buf[pos + k]) << (8 * k)
            pos += width
        if pos + length > end:
            raise ValueError("binlog rows event truncated inside a value")
        if slot >= 0:
            starts[c, slot] = pos
            lens[c, slot] = length
        pos += length
    return pos


@numba.njit(cache=True)
def locate(buf: Array, ends: Array, kinds: Array, widths: Array,
           images: int) -> tuple[Array, Array, Array]:
    """Find every value of the rows of consecutive events concatenated in ``buf``.

    Args:
        buf: uint8 bytes of the rows (no event headers, no checksums).
        ends: int64 end offset in ``buf`` of each event's rows.
        kinds, widths: per column, FIXED/PREFIXED and the byte or prefix width.
        images: 1 (write, delete) or 2 (update: before, after).

    Returns:
        ``starts`` and ``lens``, int64 ``(columns, images * rows)`` with image ``i`` of row ``r``
        in slot ``i * rows + r`` (start -1 for NULL), and the int64 row count of each event.
    """
    empty = np.empty((0, 0), np.int64)
    counts = np.zeros(ends.shape[0], np.int64)
    pos = 0
    for e in range(ends.shape[0]):
        while pos < ends[e]:
            for _ in range(images):
                pos = _image(buf, pos, ends[e], kinds, widths, empty, empty, -1)
            counts[e] += 1
        if pos != ends[e]:
            raise ValueError("binlog rows event does not end at a row boundary")
    total = counts.sum()
    starts = np.empty((kinds.shape[0], images * total), np.int64)
    lens = np.empty((kinds.shape[0], images * total), np.int64)
    pos, row = 0, 0
    for e in range(ends.shape[0]):
        while pos < ends[e]:
            for i in range(images):
                pos = _image(buf, pos, ends[e], kinds, widths, starts, lens, i * total + row)
            row += 1
    return starts, lens, counts


@numba.njit(cache=True)
def int_le(buf: Array, starts: Array, width: int, signed: bool) -> Array:
    """Little-endian integers of ``width`` bytes as int64 (0 for NULL; 8-byte unsigned wraps)."""
    out = np.zeros(starts.shape[0], np.int64)
    for i in range(starts.shape[0]):
        s = starts[i]
        if s < 0:
            continue
        v = np.int64(0)
        for k in range(width):
            v |= np.int64(buf[s + k]) << (8 * k)
        if signed and width < 8 and (v >> (8 * width - 1)) & 1:
            v -= np.int64(1) << (8 * width)
        out[i] = v
    return out


@numba.njit(cache=True)
def gather_fixed(buf: Array, starts: Array, width: int) -> Array:
    """The ``width`` bytes of each value, back to back (zeros for NULL)."""
    out = np.zeros(starts.shape[0] * width, np.uint8)
    for i in range(starts.shape[0]):
        s = starts[i]
        if s >= 0:
            out[i * width:(i + 1) * width] = buf[s:s + width]
    return out


@numba.njit(cache=True)
def gather_var(buf: Array, starts: Array, lens: Array, pad_to: int,
               first_mask: int) -> tuple[Array, Array]:
    """Arrow binary/string buffers (int32 offsets, data) of variable-length values.

    Values shorter than ``pad_to`` are right-padded with zero bytes (BINARY(n)); the first byte
    of each value is ANDed with ``first_mask`` (BIT(n), whose unused high bits are dropped).
    NULL values are empty.
    """
    n = starts.shape[0]
    offsets = np.zeros(n + 1, np.int32)
    total = 0
    for i in range(n):
        if starts[i] >= 0:
            total += max(lens[i], pad_to)
        offsets[i + 1] = total
    data = np.zeros(total, np.uint8)
    for i in range(n):
        s = starts[i]
        if s >= 0:
            o = offsets[i]
            data[o:o + lens[i]] = buf[s:s + lens[i]]
            if lens[i] > 0:
                data[o] &= first_mask
    return offsets, data


@numba.njit(cache=True)
def _be(buf: Array, pos: Int, width: Int) -> Int:
    v = np.int64(0)
    for k in range(width):
        v = (v << 8) | np.int64(buf[pos + k])
    return v


@numba.njit(cache=True)
def _days(y: Int, m: Int, d: Int) -> Int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    y -= 1 if m <= 2 else 0
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


@numba.njit(cache=True)
def _valid_date(y: Int, m: Int, d: Int) -> bool:
    if y < 1 or y > 9999 or m < 1 or m > 12 or d < 1:
        return False
    if m == 2:
        leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
        return d <= (29 if leap else 28)
    return d <= (30 if m in (4, 6, 9, 11) else 31)


@numba.njit(cache=True)
def _fraction(buf: Array, pos: int, fsp: int) -> int:
    """Microseconds of the 0-3 big-endian fraction bytes of a DATETIME2/TIMESTAMP2."""
    width = (fsp + 1) // 2
    if width == 0:
        return 0
    v = _be(buf, pos, width)
    if fsp % 2:
        v //= 10
    return v * _POW10[6 - fsp]


@numba.njit(cache=True)
def date32(buf: Array, starts: Array) -> tuple[Array, Array]:
    """DATE as days since the epoch; invalid for zero, zero-part and calendar-less dates."""
    out = np.zeros(starts.shape[0], np.int32)
    valid = np.zeros(starts.shape[0], np.bool_)
    for i in range(starts.shape[0]):
        s = starts[i]
        if s < 0:
            continue
        v = np.int64(buf[s]) | np.int64(buf[s + 1]) << 8 | np.int64(buf[s + 2]) << 16
        y, m, d = v >> 9, (v >> 5) & 15, v & 31
        if _valid_date(y, m, d):
            out[i] = _days(y, m, d)
            valid[i] = True
    return out, valid


@numba.njit(cache=True)
def datetime2(buf: Array, starts: Array, fsp: int) -> tuple[Array, Array]:
    """DATETIME2 as epoch microseconds of the wall clock; invalid dates and times are NULL."""
    out = np.zeros(starts.shape[0], np.int64)
    valid = np.zeros(starts.shape[0], np.bool_)
    for i in range(starts.shape[0]):
        s = starts[i]
        if s < 0:
            continue
        v = _be(buf, s, 5)
        ym, d = (v >> 22) & 0x1FFFF, (v >> 17) & 31
        y, m = ym // 13, ym % 13
        hh, mi, ss = (v >> 12) & 31, (v >> 6) & 63, v & 63
        if not _valid_date(y, m, d) or hh > 23 or mi > 59 or ss > 59:
            continue
        seconds = _days(y, m, d) * 86400 + hh * 3600 + mi * 60 + ss
        out[i] = seconds * 1_000_000 + _fraction(buf, s + 5, fsp)
        valid[i] = True
    return out, valid


@numba.njit(cache=True)
def timestamp2(buf: Array, starts: Array, fsp: int) -> tuple[Array, Array]:
    """TIMESTAMP2 as epoch microseconds (UTC); the zero timestamp (epoch 0) is NULL."""
    out = np.zeros(starts.shape[0], np.int64)
    valid = np.zeros(starts.shape[0], np.bool_)
    for i in range(starts.shape[0]):
        s = starts[i]
        if s < 0:
            continue
        us = _be(buf, s, 4) * 1_000_000 + _fraction(buf, s + 4, fsp)
        if us != 0:
            out[i] = us
            valid[i] = True
    return out, valid


@numba.njit(cache=True)
def time2(buf: Array, starts: Array, fsp: int) -> Array:
    """TIME2 as signed microseconds (MySQL's packed time: 24-bit integer part, fraction)."""
    out = np.zeros(starts.shape[0], np.int64)
    for i in range(starts.shape[0]):
        s = starts[i]
        if s < 0:
            continue
        intpart = _be(buf, s, 3) - 0x800000
        if fsp == 0:
            packed = intpart << 24
        elif fsp <= 2:
            frac = _be(buf, s + 3, 1)  # negative values: stored as 0x100 - fraction
            if intpart < 0 and frac != 0:
                intpart += 1
                frac -= 0x100
            packed = (intpart << 24) + frac * 10000
        elif fsp <= 4:
            frac = _be(buf, s + 3, 2)
            if intpart < 0 and frac != 0:
                intpart += 1
                frac -= 0x10000
            packed = (intpart << 24) + frac * 100
        else:
            packed = _be(buf, s, 6) - 0x800000000000
        negative = packed < 0
        if negative:
            packed = -packed
        hms, us = packed >> 24, packed & 0xFFFFFF
        value = (((hms >> 12) & 1023) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)) * 1_000_000 + us
        out[i] = -value if negative else value
    return out


@numba.njit(cache=True)
def _decimal_groups(buf: Array, s: int, precision: int, scale: int,
                    digits: Array) -> tuple[bool, int]:
    """Unpack a DECIMAL at ``s`` into digit groups, most significant first.

    ``digits[g]`` is group g's value and ``digits[g + 16]`` its number of digits. Returns
    (negative, number of groups).
    """
    intg = precision - scale
    negative = (buf[s] & 0x80) == 0
    flip = np.int64(0xFF) if negative else np.int64(0)
    lead, trail = intg % 9, scale % 9
    part_groups = (1 if lead else 0, intg // 9, scale // 9, 1 if trail else 0)
    part_digits = (lead, 9, 9, trail)
    pos, count = s, 0
    for part in range(4):
        width = _DIG2BYTES[part_digits[part]]
        for _ in range(part_groups[part]):
            v = np.int64(0)
            for k in range(width):
                b = np.int64(buf[pos + k]) ^ flip
                if pos + k == s:
                    b ^= 0x80
                v = (v << 8) | b
            digits[count] = v
            digits[count + 16] = part_digits[part]
            count += 1
            pos += width
    return negative, count


@numba.njit(cache=True)
def decimal128(buf: Array, starts: Array, precision: int, scale: int) -> Array:
    """DECIMAL(p <= 38, s) as Arrow decimal128 words: uint64 ``(rows, 2)``, low word first."""
    out = np.zeros((starts.shape[0], 2), np.uint64)
    digits = np.zeros(32, np.int64)
    mask32 = np.uint64(0xFFFFFFFF)
    for i in range(starts.shape[0]):
        if starts[i] < 0:
            continue
        negative, count = _decimal_groups(buf, starts[i], precision, scale, digits)
        lo, hi = np.uint64(0), np.uint64(0)
        for g in range(count):
            m = np.uint64(_POW10[digits[g + 16]])
            p0 = (lo & mask32) * m
            p1 = (lo >> np.uint64(32)) * m
            mid = (p0 >> np.uint64(32)) + (p1 & mask32)
            lo = (p0 & mask32) | ((mid & mask32) << np.uint64(32))
            hi = hi * m + (p1 >> np.uint64(32)) + (mid >> np.uint64(32))
            before = lo
            lo = lo + np.uint64(digits[g])
            if lo < before:
                hi += np.uint64(1)
        if negative:
            lo = ~lo + np.uint64(1)
            hi = ~hi + (np.uint64(1) if lo == np.uint64(0) else np.uint64(0))
        out[i, 0] = lo
        out[i, 1] = hi
    return out


@numba.njit(cache=True)
def decimal_text(buf: Array, starts: Array, precision: int, scale: int) -> tuple[Array, Array]:
    """DECIMAL as plain text (``-12.50``): Arrow string buffers (int32 offsets, data)."""
    n = starts.shape[0]
    offsets = np.zeros(n + 1, np.int32)
    data = np.zeros(n * (precision + 3), np.uint8)
    digits = np.zeros(32, np.int64)
    text = np.zeros(precision + 9, np.uint8)
    at = 0
    for i in range(n):
        if starts[i] >= 0:
            negative, count = _decimal_groups(buf, starts[i], precision, scale, digits)
            length = 0
            for g in range(count):
                width = digits[g + 16]
                for k in range(width - 1, -1, -1):
                    text[length + k] = 48 + (digits[g] // _POW10[width - 1 - k]) % 10
                length += width
            int_digits = precision - scale
            lead = 0
            while lead < int_digits - 1 and text[lead] == 48:
                lead += 1
            if negative:
                data[at] = 45
                at += 1
            if int_digits == 0:
                data[at] = 48
                at += 1
            for k in range(lead, int_digits):
                data[at] = text[k]
                at += 1
            if scale > 0:
                data[at] = 46
                at += 1
                for k in range(int_digits, length):
                    data[at] = text[k]
                    at += 1
        offsets[i + 1] = at
    return offsets, data[:at]


@numba.njit(cache=True)
def set_text(masks: Array, valid: Array, members: Array,
             member_offsets: Array) -> tuple[Array, Array]:
    """SET bit masks as comma-separated members in definition order (Arrow string buffers)."""
    n = masks.shape[0]
    count = member_offsets.shape[0] - 1
    offsets = np.zeros(n + 1, np.int32)
    total = 0
    for i in range(n):
        if valid[i]:
            first = True
            for b in range(count):
                if (masks[i] >> b) & 1:
                    total += member_offsets[b + 1] - member_offsets[b] + (0 if first else 1)
                    first = False
        offsets[i + 1] = total
    data = np.zeros(total, np.uint8)
    for i in range(n):
        if not valid[i]:
            continue
        at, first = offsets[i], True
        for b in range(count):
            if (masks[i] >> b) & 1:
                if not first:
                    data[at] = 44
                    at += 1
                first = False
                size = member_offsets[b + 1] - member_offsets[b]
                data[at:at + size] = members[member_offsets[b]:member_offsets[b + 1]]
                at += size
    return offsets, data


_BUF = numba.types.Array(numba.types.uint8, 1, "C", readonly=True)  # np.frombuffer over event bytes
_INTS = numba.types.Array(numba.types.int64, 1, "C")
_INT = numba.types.int64

# The argument types with which ``rows_decode.py`` calls each kernel from Python (the kernels it
# calls only from other kernels are compiled into those). ``tests/test_binlog_event_rows.py``
# checks that decoding every column type calls none with other types.
ENTRY_SIGNATURES: dict[Any, tuple[tuple[Any, ...], ...]] = {
    locate: ((_BUF, _INTS, _INTS, _INTS, _INT),),
    int_le: ((_BUF, _INTS, _INT, numba.types.boolean),),
    gather_fixed: ((_BUF, _INTS, _INT),),
    gather_var: ((_BUF, _INTS, _INTS, _INT, _INT),),
    date32: ((_BUF, _INTS),),
    datetime2: ((_BUF, _INTS, _INT),),
    timestamp2: ((_BUF, _INTS, _INT),),
    time2: ((_BUF, _INTS, _INT),),
    decimal128: ((_BUF, _INTS, _INT, _INT),),
    decimal_text: ((_BUF, _INTS, _INT, _INT),),
    set_text: ((_INTS, numba.types.Array(numba.types.boolean, 1, "C"), _BUF, _INTS),),
}


def load() -> None:
    """Load every kernel for its :data:`ENTRY_SIGNATURES` from the disk cache, compiling what the
    cache lacks (10-16 s for all of them in a fresh checkout, which ``make setup`` pays).

    The executors' Python daemon calls it before it forks its workers
    (``binlog.mysql.dialect.prepare_worker``): a worker forked afterwards calls the kernels at
    once, where loading NumPy's and numba's first kernels itself took 0.7 CPU s.
    """
    for kernel, signatures in ENTRY_SIGNATURES.items():
        for signature in signatures:
            kernel.compile(signature)
