"""Single-value conversions of the Debezium JSON format (Python value <-> JSON value).

Pure functions, chosen once per column by ``cdc/debezium_schema.py`` and run once per value.
Decoders check the JSON type and raise :class:`BadValue` without a path; the row decoder adds
the field path (``payload.after.price``) to the message.

Python values are those of ``cdc/events.py``. BIT and spatial values are ``bytes`` in MySQL's
layout: BIT big-endian as ``SELECT`` returns it, spatial as a 4-byte little-endian SRID followed by
the WKB.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import re
import struct
from collections.abc import Callable
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import orjson

Converter = Callable[[Any], Any]


class BadValue(Exception):
    """A JSON value does not fit its field's schema (callers add the field path)."""

    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(expected)
        self.expected = expected
        self.value = value


def same(v: Any) -> Any:
    """The identity: the value travels as it is."""
    return v


def checked(kind: type, expected: str) -> Converter:
    """A decoder that accepts only ``kind`` (never a bool where ``kind`` is int)."""

    def decode(v: Any) -> Any:
        if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
            raise BadValue(expected, v)
        return v

    return decode


dec_int = checked(int, "integer")
dec_str = checked(str, "string")
dec_bool = checked(bool, "boolean")


def dec_float(v: Any) -> float:
    """A JSON number as a float."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BadValue("number", v)
    return float(v)


# --- strings as Jackson escapes them -------------------------------------------------------------
#
# JsonConverter's Jackson writes a character outside the Basic Multilingual Plane (an emoji) as its
# UTF-16 surrogate pair, ``\uD83D\uDE00``, and a control character as ``\u001A`` (upper-case hex);
# orjson writes the four UTF-8 bytes and ``\u001a``. Both are the same JSON text; the bytes differ.

_ASTRAL = re.compile(rb"[\xf0-\xf4][\x80-\xbf]{3}")
_ESCAPE = re.compile(rb"\\(\\|u00[0-9a-f]{2})")  # an escaped backslash, or a \u00xx escape


def _surrogates(m: re.Match[bytes]) -> bytes:
    cp = ord(m.group().decode("utf-8")) - 0x10000
    return b"\\u%04X\\u%04X" % (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))


def _upper_hex(m: re.Match[bytes]) -> bytes:
    return m.group() if m.group(1) == b"\\" else b"\\u" + m.group(1)[1:].upper()


def jackson_escapes(data: bytes) -> bytes:
    """orjson's JSON bytes with Jackson's escapes (see above); unchanged when it has neither (the
    usual case: two scans in C)."""
    if _ASTRAL.search(data):
        data = _ASTRAL.sub(_surrogates, data)
    if b"\\u00" in data:
        data = _ESCAPE.sub(_upper_hex, data)
    return data


# --- numbers as Java writes them --------------------------------------------------------------
#
# Kafka's JsonConverter (Jackson) writes a Connect FLOAT64 with Java's Double.toString and a FLOAT32
# with Float.toString: the shortest digits that read back to the same value, but at least two
# significant digits (``1.0E-300``, ``4.9E-324``, the closest two-digit decimal), plain between 1e-3
# and 1e7 (``0.001``, ``100.0``, ``999.989990234375``) and ``d.dddE<exp>`` outside (``1.6777216E7``,
# ``1.7976931348623157E308``). Python's repr differs (``1e-300``, ``5e-324``, ``16777216.0``), so
# the encoders hand orjson the Java text as a fragment.


def _java_text(x: float, digits: str, exponent: int) -> orjson.Fragment:
    """Java's layout of ``0.<digits> x 10**exponent`` (digits without trailing zeros)."""
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if 1e-3 <= abs(x) < 1e7:
        if exponent <= 0:
            text = "0." + "0" * -exponent + digits
        elif exponent >= len(digits):
            text = digits + "0" * (exponent - len(digits)) + ".0"
        else:
            text = digits[:exponent] + "." + digits[exponent:]
    else:
        text = f"{digits[0]}.{digits[1:] or '0'}E{exponent - 1}"
    return orjson.Fragment(sign + text)


def _decimal_digits(text: str) -> tuple[str, int]:
    """(significant digits without trailing zeros, exponent of ``0.<digits>``) of a decimal text."""
    _, digits, exp = Decimal(text).normalize().as_tuple()
    assert isinstance(exp, int)  # finite
    out = "".join(map(str, digits))
    return out, len(out) + exp


def _java_digits(shortest: str, two_digits: str, reads_back: Callable[[str], bool]) -> tuple[str, int]:
    """The digits Java writes: the shortest that read back to the value; when that is a single
    digit, the closest decimal of one or two digits that reads back (``4.9E-324``, not ``5E-324``)."""
    digits, exponent = _decimal_digits(shortest)
    if len(digits) == 1 and reads_back(two_digits):
        digits, exponent = _decimal_digits(two_digits)
    return digits, exponent


def java_double(v: float) -> orjson.Fragment:
    """A finite double as Java's ``Double.toString`` writes it (``0.0``, ``-0.0``, ``1.0E-300``)."""
    x = float(v)
    if x == 0:
        return orjson.Fragment("-0.0" if math.copysign(1.0, x) < 0 else "0.0")
    return _java_text(x, *_java_digits(repr(x), f"{x:.1e}", lambda t: float(t) == x))


def to_float32(v: float) -> float:
    """``v`` rounded to the nearest single-precision float (as a Python float)."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", v))[0])
    except OverflowError:  # beyond float32's range: infinite, as Java's (float) cast makes it
        return float("inf") if v > 0 else float("-inf")


def java_float(v: float) -> orjson.Fragment:
    """A finite float32 as Java's ``Float.toString`` writes it: the shortest digits that read back
    to the same float32 (``3.14``, not ``3.140000104904175``), laid out as :func:`java_double`."""
    f = to_float32(float(v))
    if f == 0:
        return orjson.Fragment("-0.0" if math.copysign(1.0, f) < 0 else "0.0")
    shortest = next(t for p in range(9) if to_float32(float(t := f"{f:.{p}e}")) == f)
    return _java_text(f, *_java_digits(shortest, f"{f:.1e}", lambda t: to_float32(float(t)) == f))


def enc_float32(v: float) -> orjson.Fragment | float:
    """A FLOAT value (Connect FLOAT32) as JsonConverter writes it (:func:`java_float`); NaN and the
    infinities as Python floats."""
    f = to_float32(float(v))
    return java_float(f) if math.isfinite(f) else f


def enc_double(v: float) -> orjson.Fragment:
    """A DOUBLE value (Connect FLOAT64) as JsonConverter writes it (:func:`java_double`)."""
    return java_double(v)


def dec_float32(v: Any) -> float:
    """A JSON number as the float32 it denotes."""
    return to_float32(dec_float(v))


# --- binary ----------------------------------------------------------------------------------


def b64(v: bytes) -> str:
    """Standard base64 text (what Kafka's JsonConverter writes for Connect ``bytes``)."""
    return base64.b64encode(v).decode("ascii")


def _parse_text(v: Any, parse: Callable[[str], bytes], expected: str) -> bytes:
    if not isinstance(v, str):
        raise BadValue(expected, v)
    try:
        return parse(v)
    except (binascii.Error, ValueError):
        raise BadValue(expected, v) from None


def dec_b64(v: Any) -> bytes:
    """Bytes from standard base64 text."""
    return _parse_text(v, lambda s: base64.b64decode(s, validate=True), "base64 string")


# binary.handling.mode -> (Connect type, encoder, decoder)
BINARY_MODES: dict[str, tuple[str, Converter, Converter]] = {
    "bytes": ("bytes", b64, dec_b64),
    "base64": ("string", b64, dec_b64),
    "base64-url-safe": (
        "string",
        lambda v: base64.urlsafe_b64encode(v).decode("ascii"),
        lambda v: _parse_text(v, base64.urlsafe_b64decode, "base64-url-safe string"),
    ),
    "hex": ("string", bytes.hex, lambda v: _parse_text(v, bytes.fromhex, "hex string")),
}


# --- decimals: Connect Decimal = base64 of the unscaled big-endian two's-complement integer ---


# Wide enough for any MySQL DECIMAL (65 digits): the default context (28 digits) would round.
_EXACT = Context(prec=200)


def unscaled_bytes(value: Any, scale: int) -> bytes:
    """The minimal two's-complement bytes of ``value * 10**scale`` (Java BigInteger layout).

    Raises:
        ValueError: the value has more fractional digits than ``scale``, or is not finite.
    """
    scaled = Decimal(value).scaleb(scale, _EXACT)
    if not scaled.is_finite() or scaled != scaled.to_integral_value(context=_EXACT):
        raise ValueError(f"{value!r} does not fit scale {scale}")
    n = int(scaled)
    bits = n.bit_length() if n >= 0 else (~n).bit_length()
    return n.to_bytes(bits // 8 + 1, "big", signed=True)


def decimal_from_b64(v: Any, scale: int) -> Decimal:
    """A Decimal from a Connect Decimal's base64 unscaled integer."""
    raw = dec_b64(v)
    if not raw:
        raise BadValue("base64 of a non-empty unscaled integer", v)
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, _EXACT)


def decimal_from_text(v: Any) -> Decimal:
    """A Decimal from ``decimal.handling.mode`` string or double values."""
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise BadValue("decimal number", v)
    try:
        d = Decimal(repr(v) if isinstance(v, float) else v)
    except InvalidOperation:
        raise BadValue("decimal number", v) from None
    if not d.is_finite():
        raise BadValue("finite decimal number", v)
    return d


def plain(d: Decimal) -> str:
    """A decimal's text without exponent (Java's BigDecimal.toPlainString)."""
    return format(d, "f")


# --- temporal --------------------------------------------------------------------------------

EPOCH = dt.datetime(1970, 1, 1)
EPOCH_ORDINAL = EPOCH.toordinal()
US = dt.timedelta(microseconds=1)
MS = dt.timedelta(milliseconds=1)


def _from_int(build: Callable[[int], Any], expected: str) -> Converter:
    def decode(v: Any) -> Any:
        n = dec_int(v)
        try:
            return build(n)
        except (OverflowError, ValueError):
            raise BadValue(expected, v) from None

    return decode


def two_digit_year(v: dt.date) -> dt.date:
    """A date or datetime of the years 1-99 moved to 2001-2069 (1-69) or 1970-1999 (70-99), as
    Debezium's MySQL ``enable.time.adjuster`` reads two-digit years (Python has no year 0)."""
    if v.year >= 100:
        return v
    return v.replace(year=v.year + (2000 if v.year <= 69 else 1900))


def enc_date(v: dt.date) -> int:
    """Days since the epoch."""
    return v.toordinal() - EPOCH_ORDINAL


def enc_millis(v: dt.datetime) -> int:
    """Naive datetime -> milliseconds since the epoch (floor)."""
    return (v - EPOCH) // MS


def enc_micros(v: dt.datetime) -> int:
    """Naive datetime -> microseconds since the epoch."""
    return (v - EPOCH) // US


def enc_time_millis(v: dt.timedelta) -> int:
    """TIME -> milliseconds since midnight (Kafka Connect Time: only 00:00:00-23:59:59.999).

    Raises:
        ValueError: the value is negative or a day or more.
    """
    if not dt.timedelta(0) <= v < dt.timedelta(days=1):
        raise ValueError("time.precision.mode=connect holds only 00:00:00-23:59:59.999; use "
                         "adaptive_time_microseconds")
    return v // MS


dec_date = _from_int(lambda n: dt.date.fromordinal(n + EPOCH_ORDINAL), "epoch day in range")
dec_millis = _from_int(lambda n: EPOCH + n * MS, "epoch milliseconds in range")
dec_micros = _from_int(lambda n: EPOCH + n * US, "epoch microseconds in range")
dec_time_micros = _from_int(lambda n: n * US, "microseconds")
dec_time_millis = _from_int(lambda n: n * MS, "milliseconds")


def zoned_timestamp(value: dt.datetime, fsp: int) -> str:
    """ISO-8601 in UTC as Debezium's ZonedTimestamp writes it.

    With ``fsp`` > 0 the fraction has exactly ``fsp`` digits; with 0 it has only the digits
    needed (none for whole seconds), as Java's ISO_OFFSET_DATE_TIME does.
    """
    v = value.astimezone(dt.timezone.utc)
    text = v.strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{v.microsecond:06d}000"
    if fsp > 0:
        text += "." + digits[:fsp]
    elif v.microsecond:
        text += "." + digits.rstrip("0")
    return text + "Z"


_ZONED = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?(Z|[+-]\d\d:\d\d)$"
)


def parse_zoned_timestamp(v: Any) -> dt.datetime:
    """A UTC-aware datetime from ISO-8601 text with an offset (microsecond resolution)."""
    m = _ZONED.match(v) if isinstance(v, str) else None
    if m is None:
        raise BadValue("ISO-8601 timestamp with offset", v)
    year, month, day, hour, minute, second, frac, zone = m.groups()
    tz = dt.timezone.utc
    if zone != "Z":
        offset = dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
        tz = dt.timezone(-offset if zone[0] == "-" else offset)
    try:
        local = dt.datetime(int(year), int(month), int(day), int(hour), int(minute),
                            int(second or 0), int((frac or "0").ljust(6, "0")[:6]), tzinfo=tz)
        return local.astimezone(dt.timezone.utc)
    except (OverflowError, ValueError):
        raise BadValue("ISO-8601 timestamp with offset", v) from None


# --- BIT(n > 1): little-endian bytes on the wire, big-endian in Python --------------------------


def bits_codec(n: int) -> tuple[Converter, Converter]:
    """Encoder and decoder of a BIT(n) value (n > 1) as ``io.debezium.data.Bits``."""
    size = (n + 7) // 8

    def encode(v: bytes) -> str:
        return b64(bytes(v)[::-1].ljust(size, b"\x00"))

    def decode(v: Any) -> bytes:
        raw = dec_b64(v)
        if len(raw) > size:
            raise BadValue(f"at most {size} bytes for BIT({n})", v)
        return raw[::-1].rjust(size, b"\x00")

    return encode, decode


# --- spatial: io.debezium.data.geometry.Point / Geometry structs ------------------------------


def enc_point(v: bytes) -> dict[str, Any]:
    """MySQL POINT bytes -> Debezium Point struct (x, y, wkb, srid; SRID 0 is null, as Debezium has it)."""
    srid, wkb = int.from_bytes(v[:4], "little"), v[4:]
    x, y = struct.unpack(("<" if wkb[:1] == b"\x01" else ">") + "dd", wkb[5:21])
    return {"x": java_double(x), "y": java_double(y), "wkb": b64(wkb), "srid": srid or None}


def enc_geometry(v: bytes) -> dict[str, Any]:
    """MySQL geometry bytes -> Debezium Geometry struct (wkb, srid; SRID 0 is null)."""
    return {"wkb": b64(v[4:]), "srid": int.from_bytes(v[:4], "little") or None}


def dec_spatial(v: Any) -> bytes:
    """A Point or Geometry struct -> MySQL geometry bytes (SRID + WKB)."""
    if not isinstance(v, dict) or not isinstance(v.get("wkb"), str):
        raise BadValue("geometry struct with wkb", v)
    srid = v.get("srid") or 0
    if not isinstance(srid, int) or isinstance(srid, bool) or not 0 <= srid < 1 << 32:
        raise BadValue("geometry struct with an unsigned 32-bit srid", v)
    return srid.to_bytes(4, "little") + dec_b64(v["wkb"])


# --- PostgreSQL ---------------------------------------------------------------------------------

# Kafka's JsonConverter (Jackson) writes non-finite doubles as these strings.
_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def enc_special_float(v: float) -> orjson.Fragment | str:
    """A double (:func:`java_double`); NaN and the infinities as Jackson writes them (``"NaN"``,
    ``"Infinity"``)."""
    f = float(v)
    if math.isfinite(f):
        return java_double(f)
    return "NaN" if math.isnan(f) else ("Infinity" if f > 0 else "-Infinity")


def enc_special_float32(v: float) -> orjson.Fragment | str:
    """A float32 as :func:`java_float` writes it; NaN and the infinities as strings."""
    f = float(v)
    return java_float(f) if math.isfinite(f) else enc_special_float(f)


def dec_special_float(v: Any) -> float:
    """A JSON number, or ``"NaN"``/``"Infinity"``/``"-Infinity"``, as a float."""
    if isinstance(v, str) and v in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[v]
    return dec_float(v)


def dec_special_float32(v: Any) -> float:
    """:func:`dec_special_float`, as the float32 it denotes."""
    return to_float32(dec_special_float(v))


# numeric's special values: Debezium writes SpecialValueDecimal's names in string mode.
_PG_SPECIAL_NAMES = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}
_PG_SPECIAL_TEXTS = {name: text for text, name in _PG_SPECIAL_NAMES.items()}


def finite_decimal(v: Any) -> Decimal:
    """``v`` as a finite Decimal.

    Raises:
        ValueError: NaN or an infinity (decimal.handling.mode=precise cannot express them; nor
            can Debezium, which fails the same way).
    """
    d = Decimal(v)
    if not d.is_finite():
        raise ValueError("NaN and Infinity have no Connect Decimal (Debezium fails too); use "
                         "decimal_handling_mode string or double")
    return d


def enc_pg_decimal_string(v: Any) -> str:
    """decimal.handling.mode=string: the plain text; NaN/Infinity as ``NAN``/``POSITIVE_INFINITY``."""
    if isinstance(v, str) and v in _PG_SPECIAL_NAMES:
        return _PG_SPECIAL_NAMES[v]
    return plain(Decimal(v))


def dec_pg_decimal_text(v: Any, text: bool) -> Any:
    """The inverse of :func:`enc_pg_decimal_string`: a str (``text`` columns) or a Decimal."""
    if text and isinstance(v, str) and v in _PG_SPECIAL_TEXTS:
        return _PG_SPECIAL_TEXTS[v]
    d = decimal_from_text(v)
    return plain(d) if text else d


def enc_pg_decimal_double(v: Any) -> orjson.Fragment | str:
    """decimal.handling.mode=double: a double (NaN/Infinity as Jackson writes them)."""
    return enc_special_float(float(Decimal(v)))


def dec_pg_decimal_double(v: Any, text: bool) -> Any:
    """The inverse of :func:`enc_pg_decimal_double` (lossy beyond 15-17 digits)."""
    if text and isinstance(v, str) and v in _SPECIAL_FLOATS:
        return {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}[v]
    d = decimal_from_text(dec_float(v))
    return plain(d) if text else d


def enc_variable_scale(v: Any) -> dict[str, Any]:
    """io.debezium.data.VariableScaleDecimal ``{scale, value}``: trailing fraction zeros stripped
    and never a negative scale (Debezium: stripTrailingZeros, then setScale(0) if negative).

    Raises:
        ValueError: NaN or an infinity (see :func:`finite_decimal`).
    """
    sign, digits, exponent = finite_decimal(v).as_tuple()
    assert isinstance(exponent, int)  # finite
    n = int("".join(map(str, digits)) or "0")
    scale = max(0, -exponent)
    n *= 10 ** max(0, exponent)
    while scale > 0 and n % 10 == 0:
        n //= 10
        scale -= 1
    if n == 0:
        scale = 0
    n = -n if sign else n
    bits = n.bit_length() if n >= 0 else (~n).bit_length()
    return {"scale": scale, "value": b64(n.to_bytes(bits // 8 + 1, "big", signed=True))}


def dec_variable_scale(v: Any) -> Decimal:
    """A Decimal from a VariableScaleDecimal struct."""
    if not isinstance(v, dict):
        raise BadValue("VariableScaleDecimal struct {scale, value}", v)
    scale = v.get("scale")
    if not isinstance(scale, int) or isinstance(scale, bool):
        raise BadValue("VariableScaleDecimal struct {scale, value}", v)
    return decimal_from_b64(v.get("value"), scale)


# PostgreSQL's iso_8601 interval output: P1Y2M3DT4H5M6.5S, each part optional and signed.
_INTERVAL = re.compile(r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?"
                       r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+)(?:\.(\d+))?S)?)?$")
_DAYS_PER_MONTH_AVG = 365.25 / 12.0  # Debezium's MicroDuration.DAYS_PER_MONTH_AVG
_US_PER_DAY = 86_400_000_000


def enc_micro_duration(v: str) -> int:
    """An interval (PostgreSQL's ISO 8601 text) as Debezium's io.debezium.time.MicroDuration:
    approximate microseconds, a month being 365.25/12 days, computed in doubles and truncated
    exactly as MicroDuration.durationMicros does (from PGInterval's fields).

    Raises:
        ValueError: not an ISO 8601 interval.
    """
    m = _INTERVAL.match(v)
    if m is None or v in ("P", "PT"):
        raise ValueError(f"{v!r} is not an ISO 8601 interval (IntervalStyle iso_8601)")
    years, months, days, hours, minutes, whole = (int(g or 0) for g in m.groups()[:6])
    frac = m.group(7) or ""
    micros = int((frac + "000000")[:6]) if frac else 0
    if m.group(6) is not None and m.group(6).startswith("-"):
        micros = -micros
    seconds = whole + micros / 1_000_000  # PGInterval.getSeconds()
    number_of_days = (years * 12 + months) * _DAYS_PER_MONTH_AVG + days
    number_of_seconds = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + seconds
    return int(number_of_seconds * 1e6)  # Java's (long) cast truncates toward zero


def dec_micro_duration(v: Any) -> str:
    """MicroDuration microseconds as PostgreSQL's ISO 8601 text of days and a clock (lossy: months
    and years came as 30.4375 days; exact for intervals of days, hours < 24, minutes, seconds)."""
    n = dec_int(v)
    sign = "-" if n < 0 else ""
    days, rest = divmod(abs(n), _US_PER_DAY)
    hours, rest = divmod(rest, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, micros = divmod(rest, 1_000_000)
    clock = "".join(f"{sign}{x}{unit}" for x, unit in ((hours, "H"), (minutes, "M")) if x)
    if seconds or micros:
        clock += f"{sign}{seconds}" + (f".{micros:06d}".rstrip("0") if micros else "") + "S"
    text = "P" + (f"{sign}{days}D" if days else "") + ("T" + clock if clock else "")
    return "PT0S" if text == "P" else text


def enc_array(element: Converter) -> Converter:
    """A Connect array of ``element``-encoded values (None stays null)."""
    return lambda v: [None if x is None else element(x) for x in v]


def dec_array(element: Converter) -> Converter:
    """The inverse of :func:`enc_array`."""

    def decode(v: Any) -> list[Any]:
        if not isinstance(v, list):
            raise BadValue("array", v)
        return [None if x is None else element(x) for x in v]

    return decode
