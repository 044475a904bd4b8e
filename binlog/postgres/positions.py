"""PostgreSQL log positions: LSNs (``cdc.model.positions``'s protocols).

* :class:`LsnOffset` is a point between transactions: a WAL position as
  ``pg_current_wal_flush_lsn()`` reports it. Watermarks and stream slice bounds are LsnOffsets.
* :class:`ChangeLsn` identifies one row change: its transaction's commit LSN (the start of the
  commit record, which orders transactions as logical decoding emits them), the change's own
  LSN, and its index in the transaction.

A change lies in the slice ``(lo, hi]`` when ``lo <= commit < hi``: its transaction committed
after ``lo`` was reported and before ``hi`` was. Logical decoding skips exactly the transactions
whose commit LSN is before a slot's confirmed position, so advancing the slot to ``hi`` leaves the
next slice whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> an int.

    Raises:
        ValueError: not an LSN.
    """
    hi, sep, lo = str(text).partition("/")
    if not sep:
        raise ValueError(f"{text!r} is not an LSN like '0/16B3748'")
    return (int(hi, 16) << 32) | int(lo, 16)


def format_lsn(value: int) -> str:
    """An int -> ``'16/B374D848'``."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


@dataclass(frozen=True, order=True)
class LsnOffset:
    """A WAL position between transactions.

    Attributes:
        lsn: the position as an integer.
    """

    lsn: int

    def __post_init__(self) -> None:
        if self.lsn < 0:
            raise ValueError(f"an LSN is >= 0, got {self.lsn}")

    def compare(self, other: LsnOffset) -> int:
        """-1, 0 or 1 as self is before, at, or after ``other``."""
        return (self.lsn > other.lsn) - (self.lsn < other.lsn)

    def is_before(self, other: LsnOffset) -> bool:
        return self.lsn < other.lsn

    def is_at_or_after(self, other: LsnOffset) -> bool:
        return self.lsn >= other.lsn

    def covers(self, change: ChangeLsn) -> bool:
        """True when ``change`` committed before this offset."""
        return change.commit < self.lsn

    def to_dict(self) -> dict[str, Any]:
        return {"lsn": format_lsn(self.lsn)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LsnOffset:
        try:
            return cls(parse_lsn(d["lsn"]))
        except KeyError:
            raise ValueError(f"LSN offset {d!r} lacks field 'lsn'") from None

    @classmethod
    def parse(cls, text: str) -> LsnOffset:
        return cls(parse_lsn(text))

    def __str__(self) -> str:
        return format_lsn(self.lsn)


class ChangeLsn(NamedTuple):
    """Where one row change sits: its transaction's commit LSN, its own LSN, its index."""

    commit: int
    lsn: int
    row: int

    def in_slice(self, lo: LsnOffset, hi: LsnOffset) -> bool:
        """True when the change lies in ``(lo, hi]``: ``lo <= commit < hi``."""
        return not lo.covers(self) and hi.covers(self)

    def sort_key(self) -> tuple[int, int]:
        return (self.commit, self.row)
