"""Binlog offsets order the way the server writes them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.offsets import BinlogOffset, ChangePosition, max_offset

offsets = st.builds(
    BinlogOffset,
    file=st.integers(1, 999_999).map(lambda i: f"mysql-bin.{i:06d}"),
    pos=st.integers(4, 2**40),
)


def test_orders_by_file_index_then_position() -> None:
    a = BinlogOffset("mysql-bin.000009", 900)
    b = BinlogOffset("mysql-bin.000010", 4)
    assert a.is_before(b) and b.is_at_or_after(a) and not b.is_before(a)
    assert max_offset(a, b) == b
    assert BinlogOffset("mysql-bin.000010", 4).compare(b) == 0


def test_change_lies_in_half_open_slice() -> None:
    lo, hi = BinlogOffset("mysql-bin.000001", 100), BinlogOffset("mysql-bin.000001", 500)
    assert ChangePosition("mysql-bin.000001", 100, 0).in_slice(lo, hi)  # written after lo
    assert ChangePosition("mysql-bin.000001", 499, 3).in_slice(lo, hi)
    assert not ChangePosition("mysql-bin.000001", 99, 0).in_slice(lo, hi)
    assert not ChangePosition("mysql-bin.000001", 500, 0).in_slice(lo, hi)  # at hi: next slice
    assert ChangePosition("mysql-bin.000002", 4, 0).in_slice(lo, BinlogOffset("mysql-bin.000002", 50))


def test_rejects_names_it_cannot_order() -> None:
    with pytest.raises(ValueError, match="does not end in"):
        BinlogOffset("mysql-bin", 4)
    with pytest.raises(ValueError, match="differently named"):
        BinlogOffset("a.000001", 4).compare(BinlogOffset("b.000001", 4))
    with pytest.raises(ValueError, match="lacks field 'pos'"):
        BinlogOffset.from_dict({"file": "mysql-bin.000001"})


@given(offsets, offsets)
def test_comparison_is_antisymmetric_and_round_trips(a: BinlogOffset, b: BinlogOffset) -> None:
    assert a.compare(b) == -b.compare(a)
    assert BinlogOffset.from_dict(a.to_dict()) == a
    assert a.is_before(b) != a.is_at_or_after(b)
