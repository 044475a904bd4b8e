"""MySQL chunk keys: which types can be split, the SQL range predicates, and key ordering.

Ordering design. Chunk boundaries must compare the way the server orders the key column,
collation included (``'a' = 'A'`` and ``'a' = 'a '`` under ``utf8mb4_general_ci``), or a row
could land in two chunks or in none. Two places decide membership:

* **On the server.** A chunk's rows are read with ``k >= %s AND k < %s`` (see
  :func:`range_predicate`). The boundary literal takes the column's own collation (the column
  has the lower coercibility), so the server decides, and the half-open predicates of adjacent
  chunks partition the key space exactly for any boundary values.
* **In Python.** The binlog phase must decide which chunk a changed row belongs to without a
  round trip per row. :class:`KeyOrder` maps a key value to a *sort key* whose Python order is
  the server's order:

  - numeric and temporal keys: the value itself (TIMESTAMPs normalized to naive UTC);
  - binary keys (``BINARY``, ``VARBINARY``, ``BLOB``): the raw bytes;
  - collated string keys: the server's ``WEIGHT_STRING(CAST(%s AS CHAR CHARACTER SET cs)
    COLLATE coll)``, computed for many values in one ``SELECT ... UNION ALL SELECT ...`` query,
    then compared as bytes. For PAD SPACE collations (MariaDB/MySQL legacy collations) the
    shorter weight string is padded with the weight of a space before comparing, which is what
    the server's own comparison does (MariaDB's WEIGHT_STRING keeps trailing spaces, so
    ``'a'`` and ``'a '`` have different weight strings but compare equal).
  - NULL sorts first (MySQL's order), before every value; only the first chunk holds NULLs.

Every sort key is a tuple, ``(0,)`` for NULL and ``(1, x)`` otherwise, so keys of one column are
always mutually comparable and hashable.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from binlog.mysql.types import BINARY_TYPES, quote_ident
from cdc.model.schema import Column, TableId
from chunking.chunks import KeyValue, SortKey

# Types whose server-side comparison with a parameter literal is not the order Python (or
# ORDER BY) would give: ENUM/SET order by index but compare as strings, FLOAT reads back as a
# rounded double, BIT/JSON/spatial have no useful range order.
UNSUPPORTED_KEY_TYPES = frozenset({"enum", "set", "json", "float", "bit"}) | (
    BINARY_TYPES - {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
)

_SQL_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_WEIGHT_BATCH = 500
_WEIGHT_BATCH_CHARS = 1 << 20
_BOUND_CACHE = 4096


def sql_ident(name: str) -> str:
    """Quote an identifier for SQL that goes through pymysql's ``%s`` formatting."""
    return quote_ident(name).replace("%", "%%")


def sql_table(table_id: TableId) -> str:
    """The table's quoted name, safe inside SQL run with parameters."""
    return f"{sql_ident(table_id.db)}.{sql_ident(table_id.table)}"


def chunkable(column: Column) -> bool:
    """True when a column's type can be range-split (see :data:`UNSUPPORTED_KEY_TYPES`)."""
    return column.data_type not in UNSUPPORTED_KEY_TYPES


def sql_param(value: KeyValue) -> Any:
    """A key value as a pymysql parameter (TIME values as exact 'HH:MM:SS.ffffff' text).

    pymysql renders negative timedeltas that are not whole hours wrongly, so TIME boundaries
    are formatted here.
    """
    if isinstance(value, dt.timedelta):
        micros = abs(value // dt.timedelta(microseconds=1))
        seconds, micro = divmod(micros, 1_000_000)
        hours, rest = divmod(seconds, 3600)
        sign = "-" if value < dt.timedelta(0) else ""
        return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{micro:06d}"
    return value


def range_predicate(
    key_column: str, start: KeyValue, end: KeyValue
) -> tuple[str, tuple[Any, ...]]:
    """The WHERE fragment selecting ``start <= k < end`` (None = unbounded; NULLs go first).

    Returns:
        ``(sql, params)`` in pymysql's ``%s`` style; always pass ``params`` to ``execute``.
    """
    k = sql_ident(key_column)
    if start is None and end is None:
        return "TRUE", ()
    if start is None:
        return f"({k} < %s OR {k} IS NULL)", (sql_param(end),)
    if end is None:
        return f"{k} >= %s", (sql_param(start),)
    return f"{k} >= %s AND {k} < %s", (sql_param(start), sql_param(end))


class PaddedWeight:
    """A PAD SPACE collation weight: compares as if the shorter were padded with spaces."""

    __slots__ = ("pad", "weight")

    def __init__(self, weight: bytes, pad: bytes) -> None:
        while pad and weight.endswith(pad):
            weight = weight[: -len(pad)]
        self.weight = weight
        self.pad = pad

    def _padded(self, length: int) -> bytes:
        missing = length - len(self.weight)
        if missing <= 0:
            return self.weight
        reps = -(-missing // len(self.pad))
        return self.weight + (self.pad * reps)[:missing]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaddedWeight) and self.weight == other.weight

    def __hash__(self) -> int:
        return hash(self.weight)

    def __lt__(self, other: PaddedWeight) -> bool:
        n = max(len(self.weight), len(other.weight))
        return self._padded(n) < other._padded(n)

    def __le__(self, other: PaddedWeight) -> bool:
        return self == other or self < other

    def __gt__(self, other: PaddedWeight) -> bool:
        return other < self

    def __ge__(self, other: PaddedWeight) -> bool:
        return self == other or other < self

    def __repr__(self) -> str:
        return f"PaddedWeight({self.weight.hex()})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PaddedWeight, (self.weight, self.pad))


class KeyOrder:
    """Maps key values of one column to sort keys whose Python order is the server's order.

    Build it where it is used (driver or executor): collated string keys need an open
    connection, which is not picklable. Other key types need none.

    Args:
        column: the chunk key column.
        conn: an open pymysql connection; required for collated string columns.

    Raises:
        ValueError: a collated string column without a connection, or a malformed collation.
    """

    def __init__(self, column: Column, conn: Any | None = None) -> None:
        self.column = column
        self._conn = conn
        self._pad: bytes | None = None
        self._cast = ""
        self._bounds: OrderedDict[KeyValue, SortKey] = OrderedDict()
        if column.is_collated_string:
            self._init_collation()

    def _init_collation(self) -> None:
        cs, coll = self.column.charset or "", self.column.collation or ""
        if self._conn is None:
            raise ValueError(f"column {self.column.name!r} ({coll}) needs a connection to order keys")
        if not (_SQL_NAME.match(cs) and _SQL_NAME.match(coll)):
            raise ValueError(f"unexpected character set / collation {cs!r} / {coll!r}")
        self._cast = f"WEIGHT_STRING(CAST(%s AS CHAR CHARACTER SET {cs}) COLLATE {coll})"
        probe = f"CAST(%s AS CHAR CHARACTER SET {cs}) COLLATE {coll}"
        with self._conn.cursor() as cur:
            cur.execute(f"SELECT {probe} = {probe}, {self._cast}", ("a", "a ", " "))
            pads, space = cur.fetchone()
        self._pad = bytes(space) if pads and space else None

    @property
    def needs_server(self) -> bool:
        """True when sort keys come from the server (collated string keys)."""
        return self.column.is_collated_string

    def sort_keys(self, values: Sequence[KeyValue]) -> list[SortKey]:
        """Sort keys of many values (collated strings: one query per ~500 distinct values)."""
        if not self.needs_server:
            return [self._local_key(v) for v in values]
        distinct = list(dict.fromkeys(_as_text(v) for v in values if v is not None))
        weights: dict[str, SortKey] = {}
        for batch in _batches(distinct):
            weights.update(zip(batch, self._weights(batch), strict=True))
        return [(0,) if v is None else weights[_as_text(v)] for v in values]

    def sort_key(self, value: KeyValue) -> SortKey:
        """The sort key of one value (a server query for a collated string; prefer sort_keys)."""
        return self.sort_keys([value])[0]

    def bound_key(self, value: KeyValue) -> SortKey:
        """The sort key of a chunk boundary, cached (boundaries are few and reused)."""
        key = self._bounds.get(value)
        if key is not None:
            self._bounds.move_to_end(value)
            return key
        key = self._bounds[value] = self.sort_key(value)
        if len(self._bounds) > _BOUND_CACHE:
            self._bounds.popitem(last=False)
        return key

    def _local_key(self, value: KeyValue) -> SortKey:
        if value is None:
            return (0,)
        t = self.column.data_type
        if t in BINARY_TYPES:
            return (1, value.encode() if isinstance(value, str) else bytes(value))
        if isinstance(value, str) and self.column.data_type in ("decimal", "numeric"):
            return (1, Decimal(value))  # wide DECIMALs travel as strings
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return (1, value.astimezone(dt.timezone.utc).replace(tzinfo=None))
        return (1, value)

    def _weights(self, texts: list[str]) -> list[SortKey]:
        selects = [f"SELECT {i}, {self._cast}" for i in range(len(texts))]
        assert self._conn is not None
        with self._conn.cursor() as cur:
            cur.execute(" UNION ALL ".join(selects), tuple(texts))
            rows = cur.fetchall()
        by_index = {int(i): bytes(w or b"") for i, w in rows}
        pad = self._pad
        return [
            (1, PaddedWeight(by_index[i], pad) if pad else by_index[i]) for i in range(len(texts))
        ]


def _as_text(value: KeyValue) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _batches(texts: list[str]) -> Iterable[list[str]]:
    batch: list[str] = []
    size = 0
    for text in texts:
        if batch and (len(batch) >= _WEIGHT_BATCH or size + len(text) > _WEIGHT_BATCH_CHARS):
            yield batch
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    if batch:
        yield batch
