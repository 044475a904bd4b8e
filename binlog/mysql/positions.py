"""MySQL binlog positions: the dialect's offsets (``cdc.model.positions``'s protocols).

Two kinds of position, both comparable:

* :class:`BinlogOffset` is a point *between* transactions, as ``SHOW MASTER STATUS`` reports it
  (file, pos, and the GTID set executed up to there). Watermarks (LW, HW) and the bounds of a
  stream slice are BinlogOffsets. A reader can start at one.
* :class:`ChangePosition` identifies one row change: the rows event's start position in a file
  plus the row's index inside the event. Debezium calls these ``file``, ``pos`` and ``row``.

A change at position ``c`` lies in the half-open slice ``(lo, hi]`` of BinlogOffsets when
``lo <= c < hi`` in (file, pos) order: it was written after ``lo`` was reported and before ``hi``
was. Both conventions are the same thing said twice: an offset is the end of what it covers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# Walking over a rows event without decoding it costs about this much of decoding it and turning
# it into change rows (benchmarks/binlog_event_rows.py: 0.2 of decoding alone; 0.05-0.15 of a task in
# a 2M-update catch-up, which also writes files): later pieces of a split slice are smaller by
# this factor each, so that its tasks finish together.
SKIP_COST = 0.15

_FILE_INDEX = re.compile(r"^(?P<base>.*)\.(?P<index>\d+)$")


def _file_key(file: str) -> tuple[str, int]:
    m = _FILE_INDEX.match(file)
    if not m:
        raise ValueError(f"binlog file name {file!r} does not end in .<number>")
    return m.group("base"), int(m.group("index"))


def _compare(a_file: str, a_pos: int, b_file: str, b_pos: int) -> int:
    a_base, a_index = _file_key(a_file)
    b_base, b_index = _file_key(b_file)
    if a_base != b_base:
        raise ValueError(f"cannot order positions in differently named binlogs: {a_file!r} vs {b_file!r}")
    a, b = (a_index, a_pos), (b_index, b_pos)
    return (a > b) - (a < b)


@dataclass(frozen=True)
class BinlogOffset:
    """A position between transactions in the binlog (what ``SHOW MASTER STATUS`` reports).

    Attributes:
        file: binlog file name, e.g. ``mysql-bin.000003``.
        pos: byte position inside ``file`` where the next event will start.
        gtid: the GTID set executed up to here (MySQL ``Executed_Gtid_Set``, MariaDB
            ``gtid_binlog_pos``), or None when unknown. Informational: ordering and equality use
            file/pos only.
    """

    file: str
    pos: int
    gtid: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _file_key(self.file)
        if self.pos < 0:
            raise ValueError(f"binlog position must be >= 0, got {self.pos}")

    def compare(self, other: BinlogOffset) -> int:
        """-1, 0 or 1 as self is before, at, or after ``other``."""
        return _compare(self.file, self.pos, other.file, other.pos)

    def is_before(self, other: BinlogOffset) -> bool:
        return self.compare(other) < 0

    def is_at_or_after(self, other: BinlogOffset) -> bool:
        return self.compare(other) >= 0

    def covers(self, change: ChangePosition) -> bool:
        """True when ``change`` was written before this offset (it lies at or below it)."""
        return _compare(change.file, change.pos, self.file, self.pos) < 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "pos": self.pos}
        if self.gtid:
            d["gtid"] = self.gtid
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinlogOffset:
        try:
            return cls(file=str(d["file"]), pos=int(d["pos"]), gtid=d.get("gtid") or None)
        except KeyError as exc:
            raise ValueError(f"binlog offset {d!r} lacks field {exc.args[0]!r}") from None

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" + (f" (gtid {self.gtid})" if self.gtid else "")


class ChangePosition(NamedTuple):
    """Where one row change sits: rows event start ``pos`` in ``file``, and ``row`` inside it."""

    file: str
    pos: int
    row: int

    def in_slice(self, lo: BinlogOffset, hi: BinlogOffset) -> bool:
        """True when the change lies in ``(lo, hi]``: written after ``lo`` and before ``hi``."""
        return not lo.covers(self) and hi.covers(self)

    def sort_key(self) -> tuple[int, int, int]:
        return (_file_key(self.file)[1], self.pos, self.row)


def byte_cuts(start: BinlogOffset, end: BinlogOffset, sizes: dict[str, int], parts: int, min_bytes: int,
              skip_cost: float) -> list[BinlogOffset]:
    """Where to cut the slice ``(start, end]`` so that ``parts`` readers finish it together.

    Every reader starts at ``start`` (only there does it know the table maps) and walks over
    the events before its piece without decoding them, which costs ``skip_cost`` of decoding
    them. So piece ``k`` gets ``(1 - skip_cost) ** k`` times the bytes of the first piece. The
    cuts are byte positions, usually inside an event (see ``MySqlBinlogReader.read_event_rows``).

    Args:
        start: the slice start.
        end: the slice end.
        sizes: the server's binlog files and their sizes (``SHOW BINARY LOGS``).
        parts: the most pieces wanted.
        min_bytes: the least bytes a piece must hold to be worth its own reader.
        skip_cost: the cost of walking over a byte relative to decoding it (0 to 1).

    Returns:
        The ``n - 1`` inner cuts of ``n`` pieces, in order; empty when the slice stays whole
        (too small, or a file of it is not in ``sizes``).
    """
    files = _files_between(start, end, sizes)
    if files is None:
        return []
    spans = [(f, start.pos if f == start.file else 0, end.pos if f == end.file else sizes[f]) for f in files]
    total = sum(max(0, hi - lo) for _, lo, hi in spans)
    n = min(parts, total // max(1, min_bytes))
    while n >= 2 and total * (1.0 - skip_cost) ** (n - 1) / _weight(n, skip_cost) < min_bytes:
        n -= 1  # the last piece, the smallest, would be too small
    if n < 2:
        return []
    weights = [(1.0 - skip_cost) ** k for k in range(n)]
    cuts, done = [], 0.0
    for w in weights[:-1]:
        done += w
        cuts.append(_at_byte(spans, int(total * done / sum(weights))))
    return cuts


def _weight(n: int, skip_cost: float) -> float:
    return sum((1.0 - skip_cost) ** k for k in range(n))


def _files_between(start: BinlogOffset, end: BinlogOffset, sizes: dict[str, int]) -> list[str] | None:
    base, first = _file_key(start.file)
    last = _file_key(end.file)[1]
    files = {idx: name for name in sizes for b, idx in [_file_key(name)] if b == base and first <= idx <= last}
    if set(files) != set(range(first, last + 1)):
        return None  # a file is missing: the reader will say why
    return [files[i] for i in range(first, last + 1)]


def _at_byte(spans: list[tuple[str, int, int]], offset: int) -> BinlogOffset:
    for file, lo, hi in spans:
        if offset < hi - lo:
            return BinlogOffset(file, lo + offset)
        offset -= max(0, hi - lo)
    file, _, hi = spans[-1]
    return BinlogOffset(file, hi)
