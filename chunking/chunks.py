"""The snapshot split (one chunk of a table) and the JSON codec of its boundary values.

A :class:`SnapshotSplit` is a half-open key range ``[start, end)`` of one table; ``None`` means
unbounded. The chunks of a table are contiguous: the first is ``(-inf, b1)`` and also holds
the NULL keys (MySQL sorts NULL first), the last is ``[bn, +inf)``. Splits are small frozen
values: they travel in Spark partitions (pickled) and in the state directory (as JSON).

Boundary values are encoded as one-key objects (``{"int": "42"}``, ``{"bytes": "<base64>"}``)
so that every supported key type (int, Decimal, float, str, bytes, date, datetime, timedelta)
survives a JSON round trip exactly, big unsigned integers and Decimal digits included.
"""

from __future__ import annotations

import base64
import datetime as dt
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise
from typing import Any

from binlog.mysql.keys import KeyOrder, KeyValue, SortKey, range_predicate, sql_ident, sql_table
from cdc.model.schema import TableId, TableSchema

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

    @property
    def is_first(self) -> bool:
        return self.start is None

    @property
    def is_last(self) -> bool:
        return self.end is None

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

    def where_clause(self) -> tuple[str, tuple[Any, ...]]:
        """The WHERE fragment selecting this chunk's rows, evaluated by the server.

        Returns:
            ``(sql, params)`` in pymysql's ``%s`` style; always pass ``params`` to ``execute``.
        """
        return range_predicate(self.key_column, self.start, self.end)

    def select_sql(self, schema: TableSchema) -> tuple[str, tuple[Any, ...]]:
        """``SELECT <all columns> FROM <table> WHERE <range>`` for this chunk (no ORDER BY).

        Raises:
            ValueError: ``schema`` describes another table.
        """
        if schema.table_id != self.table_id:
            raise ValueError(f"schema of {schema.table_id} given for split {self.split_name}")
        columns = ", ".join(sql_ident(c) for c in schema.column_names)
        where, params = self.where_clause()
        return f"SELECT {columns} FROM {sql_table(self.table_id)} WHERE {where}", params

    def contains(self, key: SortKey, order: KeyOrder) -> bool:
        """True when a key (a sort key from ``order``) lies in this chunk.

        Boundary sort keys are cached in ``order``, so repeated tests cost no query.
        """
        if self.start is not None and key < order.bound_key(self.start):
            return False
        if self.end is None:
            return True
        return key < order.bound_key(self.end)


class ChunkLocator:
    """Finds the chunk of a key among contiguous chunks of one table (bisect on sort keys).

    The chunks may be any contiguous run (e.g. the chunks emitted so far), not necessarily
    the whole table; keys outside the run have no chunk.

    Args:
        splits: chunks of one table, in split_id order, each ending where the next starts.
        order: the key ordering of the table's chunk key column.

    Raises:
        ValueError: the splits are not contiguous chunks of one table.
    """

    def __init__(self, splits: Sequence[SnapshotSplit], order: KeyOrder) -> None:
        self.splits = list(splits)
        self.order = order
        _check_contiguous(self.splits)
        bounds = [s.start for s in self.splits if s.start is not None]
        tail = [] if not self.splits or self.splits[-1].end is None else [self.splits[-1].end]
        keys = order.sort_keys(bounds + tail)
        self._starts = keys[: len(bounds)]
        self._end = keys[len(bounds)] if tail else None
        self._open_start = bool(self.splits) and self.splits[0].start is None

    def locate(self, key: SortKey) -> SnapshotSplit | None:
        """The chunk holding a sort key, or None when the key is outside these chunks."""
        if not self.splits or (self._end is not None and not key < self._end):
            return None
        i = bisect_right(self._starts, key)
        if self._open_start:
            return self.splits[i]
        return self.splits[i - 1] if i > 0 else None

    def locate_values(self, values: Sequence[KeyValue]) -> list[SnapshotSplit | None]:
        """The chunk of each key value (collated strings: one weight query per batch)."""
        return [self.locate(k) for k in self.order.sort_keys(values)]


def _check_contiguous(splits: list[SnapshotSplit]) -> None:
    for a, b in pairwise(splits):
        if (a.table_id, a.key_column) != (b.table_id, b.key_column):
            raise ValueError(f"splits {a.split_name} and {b.split_name} are of different tables/keys")
        if b.split_id != a.split_id + 1 or a.end is None or a.end != b.start:
            raise ValueError(f"splits {a.split_name} and {b.split_name} are not contiguous")
