"""Comparing Debezium's messages with ours byte for byte, after normalising only what must differ.

A message is parsed keeping each JSON number's exact text and each object's key order, the few
fields listed in :data:`NORMALISED` are replaced by a placeholder, and the result is written back
compactly (:func:`canonical`). :func:`assert_self_consistent` first checks that writing back a
parsed message gives its exact bytes, so two canonical forms are equal exactly when the two
messages are equal byte for byte outside the normalised fields.

What is normalised, and why each must differ (docs/sinks/kafka.md, "Debezium, side by side"):

* the envelope's ``ts_ms``/``ts_us``/``ts_ns``: Debezium's are the moment its connector
  processed the change; ours are the change's own time, so that a batch replayed after a crash
  encodes the same bytes (the schema change event's ``ts_ms`` likewise);
* ``source.version``: the software that wrote the message (``3.5.0.Final``, ``spark-cdc-<v>``);
* a snapshot read's position and time (``source.file``/``pos``/``ts_ms``/``ts_us``/``ts_ns``;
  PostgreSQL ``lsn``/``sequence``/``txId``/``ts_*``): Debezium reads the whole table in one
  transaction at the position its snapshot started, we read each chunk at its own high watermark,
  in a transaction of its own, at another moment;
* a snapshot read's ``source.snapshot`` marker (``first``, ``first_in_data_collection``,
  ``last_in_data_collection``, ``last`` or ``true``): it says where the row fell in the order
  the snapshot read rows, and our chunks are read in parallel, in no fixed order;
* the ``__debezium.context.runId`` header: a random id each connector (each job) start draws.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

SNAPSHOT_MARKERS = {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
RUN_ID_HEADER = "__debezium.context.runId"
NORMALISED = ("envelope ts_ms/ts_us/ts_ns", "source.version", "snapshot reads' position and time",
              "snapshot reads' source.snapshot marker", "schema change ts_ms", RUN_ID_HEADER)


class Number(str):
    """A JSON number, kept as the exact text its writer produced."""


def parse(raw: bytes | str) -> Any:
    """A JSON message as Python values, numbers as :class:`Number` (their exact text)."""
    return json.loads(raw, parse_int=Number, parse_float=Number, parse_constant=Number)


_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    """A JSON string as Jackson writes it: short escapes, other control characters as ``\\u001A``
    (upper-case hex), characters beyond the Basic Multilingual Plane as their UTF-16 surrogate
    escapes (``\\uD83D\\uDE00``), everything else as is."""
    out = []
    for ch in text:
        cp = ord(ch)
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif cp < 0x20:
            out.append(f"\\u{cp:04X}")
        elif cp > 0xFFFF:
            cp -= 0x10000
            out.append(f"\\u{0xD800 + (cp >> 10):04X}\\u{0xDC00 + (cp & 0x3FF):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def write(value: Any) -> str:
    """Compact JSON in the parsed key order, numbers as their text, strings escaped as Jackson does:
    what Kafka's JsonConverter writes."""
    if isinstance(value, Number):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_string(k)}:{write(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(write(v) for v in value) + "]"
    if isinstance(value, str):
        return _string(value)
    return json.dumps(value)


@dataclass(frozen=True)
class Message:
    """One message of a topic: key and value bytes (None: no key, or a tombstone), headers."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def assert_self_consistent(messages: Iterable[Message], who: str) -> None:
    """Each key and value is exactly what :func:`write` makes of its parse (so comparing canonical
    forms compares bytes)."""
    for m in messages:
        for part in (m.key, m.value):
            if part is not None:
                text = part.decode("utf-8")
                assert write(parse(part)) == text, f"{who}: the JSON writer's form differs: {text[:300]}"


def _payload(doc: Any, schemas: bool) -> Any:
    return doc["payload"] if schemas else doc


Adjust = Callable[[dict[str, Any]], None]  # edits a parsed change event payload in place


def normalise_value(raw: bytes | None, schemas: bool, adjust: Adjust | None = None) -> str | None:
    """A change event value's canonical form with :data:`NORMALISED` fields replaced, after
    ``adjust`` (the test's known differences) edited its payload."""
    if raw is None:
        return None
    doc = parse(raw)
    payload = _payload(doc, schemas)
    if adjust is not None:
        adjust(payload)
    for f in ("ts_ms", "ts_us", "ts_ns"):
        if f in payload:
            payload[f] = "<processing time>"
    source = payload["source"]
    source["version"] = "<version>"
    if source.get("snapshot") in SNAPSHOT_MARKERS and payload.get("op") == "r":
        source["snapshot"] = "<snapshot marker>"
        for f in ("file", "pos", "ts_ms", "ts_us", "ts_ns", "lsn", "sequence", "txId"):
            if f in source:
                source[f] = "<snapshot position>"
    return write(doc)


def normalise_schema_change(raw: bytes | None, schemas: bool) -> str | None:
    """A schema change event value's canonical form: ``source.version`` and the event's own
    ``ts_ms`` (processing time) replaced."""
    if raw is None:
        return None
    doc = parse(raw)
    payload = _payload(doc, schemas)
    payload["ts_ms"] = "<processing time>"
    payload["source"]["version"] = "<version>"
    return write(doc)


def normalise_headers(headers: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, str], ...]:
    """Headers as (name, text), the run id replaced."""
    return tuple((n, "<run id>" if n == RUN_ID_HEADER else v.decode("utf-8")) for n, v in headers)


Normal = tuple[str | None, str | None, tuple[tuple[str, str], ...]]


def normalise(m: Message, schemas: bool, adjust: Adjust | None = None) -> Normal:
    """A change event message as (key, value, headers) canonical texts."""
    key = None if m.key is None else write(parse(m.key))
    return key, normalise_value(m.value, schemas, adjust), normalise_headers(m.headers)


def normalise_ddl(m: Message, schemas: bool) -> Normal:
    """A schema change event message as (key, value, headers) canonical texts."""
    key = None if m.key is None else write(parse(m.key))
    return key, normalise_schema_change(m.value, schemas), normalise_headers(m.headers)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two parsed JSON values first differ (a path such as ``payload.after.c_u64``), with both
    values; None when equal (key order included)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path or '.'}: keys {list(a)} != {list(b)}"
        for k in a:
            found = first_difference(a[k], b[k], f"{path}.{k}" if path else k)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if type(a) is not type(b) or a != b:
        return f"{path}: {write(a)[:300]} != {write(b)[:300]}"
    return None


def explain(theirs: Normal, ours: Normal) -> str:
    """The first difference of two normalised messages, as Debezium (left) against ours (right)."""
    for part, x, y in zip(("key", "value", "headers"), theirs, ours, strict=True):
        if x == y:
            continue
        if part == "headers" or x is None or y is None:
            return f"{part}: {x!r:.300} != {y!r:.300}"
        return f"{part}: {first_difference(parse(x), parse(y))}"
    return "equal"
