"""Log positions as every layer sees them: comparable offsets, the watermarks of the snapshot.

Each dialect has its own position type (MySQL: binlog file, position and GTID set; Postgres: an
LSN). The layers above the dialects only compare them, store them in the offset log as JSON and
ask whether a change lies in a slice, through these two protocols (Flink CDC's ``Offset``):

* an :class:`Offset` is a point *between* transactions (what the server reports as its current
  position). Watermarks (LW, HW) and the bounds of a stream slice are offsets; a reader can start
  at one.
* a :class:`LogPosition` identifies one row change. A change at ``c`` lies in the half-open slice
  ``(lo, hi]`` of offsets when it was written after ``lo`` was reported and before ``hi`` was.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar


class Offset(Protocol):
    """A comparable point between transactions in a source's log (picklable, JSON-able)."""

    def compare(self, other: Any) -> int:
        """-1, 0 or 1 as self is before, at, or after ``other`` (an offset of the same source)."""
        ...

    def is_before(self, other: Any) -> bool:
        ...

    def is_at_or_after(self, other: Any) -> bool:
        ...

    def to_dict(self) -> dict[str, Any]:
        """The offset as JSON (the dialect's ``offset_from_dict`` reads it back)."""
        ...


class LogPosition(Protocol):
    """Where one row change sits in the log."""

    def in_slice(self, lo: Any, hi: Any) -> bool:
        """True when the change lies in ``(lo, hi]``: written after ``lo`` and before ``hi``."""
        ...

    def sort_key(self) -> tuple[int, ...]:
        """A key that orders changes of one source as the log does."""
        ...


OffsetT = TypeVar("OffsetT", bound=Offset)


def max_offset(a: OffsetT, b: OffsetT) -> OffsetT:
    return a if a.is_at_or_after(b) else b


def min_offset(a: OffsetT, b: OffsetT) -> OffsetT:
    return a if a.is_before(b) else b
