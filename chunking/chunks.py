"""The snapshot split (one chunk of a table) and the JSON codec of its boundary values.

A :class:`SnapshotSplit` is a half-open key range ``[start, end)`` of one table; ``None`` means
unbounded. The chunks of a table are contiguous: the first is ``(-inf, b1)`` and also holds
the NULL keys (NULL sorts first), the last is ``[bn, +inf)``. Splits are small frozen
values: they travel in Spark partitions (pickled) and in the state directory (as JSON).

Boundary values are encoded as one-key objects (``{"int": "42"}``, ``{"bytes": "<base64>"}``)
so that every supported key type (int, Decimal, float, str, bytes, date, datetime, timedelta)
survives a JSON round trip exactly, big unsigned integers and Decimal digits included.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from cdc.model.schema import TableId

KeyValue = Any  # int | Decimal | float | str | bytes | date | datetime | timedelta | None
SortKey = tuple[Any, ...]


class KeyOrder(Protocol):
    """Maps key values of one column to sort keys whose Python order is the server's order.

    A dialect builds one where it is used (collated string keys may need a connection): NULL
    sorts first, ``(0,)``; other values are ``(1, x)``, so keys of one column are always mutually
    comparable and hashable.
    """

    def sort_keys(self, values: Sequence[KeyValue]) -> list[SortKey]:
        """Sort keys of many values (one server round trip at most, where one is needed)."""
        ...

    def bound_key(self, value: KeyValue) -> SortKey:
        """The sort key of a chunk boundary (cached: boundaries are few and reused)."""
        ...

_ONE_MICRO = dt.timedelta(microseconds=1)


def encode_value(value: KeyValue) -> Any:
    """A key value as a JSON-compatible object (exact round trip through :func:`decode_value`).

    Raises:
        TypeError: the value's type is not a supported key type.
    """
    if value is None:
        return None
    if isinstance(value, bool | int):
        return {"int": str(int(value))}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"timedelta": str(value // _ONE_MICRO)}
    raise TypeError(f"cannot encode a chunk boundary of type {type(value).__name__}: {value!r}")


def decode_value(obj: Any) -> KeyValue:
    """The inverse of :func:`encode_value`.

    Raises:
        ValueError: ``obj`` is not an encoded key value.
    """
    if obj is None:
        return None
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError(f"not an encoded chunk boundary: {obj!r}")
    ((kind, text),) = obj.items()
    decoders: dict[str, Any] = {
        "int": int,
        "decimal": Decimal,
        "float": float,
        "str": str,
        "bytes": base64.b64decode,
        "datetime": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "timedelta": lambda t: dt.timedelta(microseconds=int(t)),
    }
    if kind not in decoders:
        raise ValueError(f"unknown chunk boundary type {kind!r} in {obj!r}")
    return decoders[kind](text)


@dataclass(frozen=True)
class SnapshotSplit:
    """One chunk of a table: the rows whose key lies in ``[start, end)``.

    Attributes:
        table_id: the table.
        split_id: the chunk's number, 0-based per table, in key order.
        key_column: the column the table is split on.
        start: inclusive lower bound; None = -inf (the first chunk, which also holds NULL keys).
        end: exclusive upper bound; None = +inf (the last chunk).
    """

    table_id: TableId
    split_id: int
    key_column: str
    start: KeyValue
    end: KeyValue

    @property
    def split_name(self) -> str:
        """``db.table:<split_id>``, the name used in logs, errors and the state directory."""
        return f"{self.table_id}:{self.split_id}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": str(self.table_id),
            "split_id": self.split_id,
            "key_column": self.key_column,
            "start": encode_value(self.start),
            "end": encode_value(self.end),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SnapshotSplit:
        """Rebuild a split from :meth:`to_dict` output.

        Raises:
            ValueError: a field is missing or malformed.
        """
        try:
            return cls(
                table_id=TableId.parse(d["table"]),
                split_id=int(d["split_id"]),
                key_column=str(d["key_column"]),
                start=decode_value(d["start"]),
                end=decode_value(d["end"]),
            )
        except KeyError as exc:
            raise ValueError(f"snapshot split {d!r} lacks field {exc.args[0]!r}") from None

    def contains(self, key: SortKey, order: KeyOrder) -> bool:
        """True when a key (a sort key from ``order``) lies in this chunk.

        Boundary sort keys are cached in ``order``, so repeated tests cost no query.
        """
        if self.start is not None and key < order.bound_key(self.start):
            return False
        if self.end is None:
            return True
        return key < order.bound_key(self.end)
