"""Binlog offsets order the way the server writes them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from binlog.mysql.positions import BinlogOffset, ChangePosition, byte_cuts
from binlog.postgres.config import PostgresSourceConfig
from binlog.postgres.dialect import PostgresDialect
from binlog.postgres.positions import LsnOffset
from binlog.postgres.reader import SKIP_COST
from cdc.model.positions import max_offset

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


def _bytes_between(a: BinlogOffset, b: BinlogOffset, sizes: dict[str, int]) -> int:
    files = sorted(sizes, key=lambda f: int(f.rsplit(".", 1)[1]))
    files = files[files.index(a.file):files.index(b.file) + 1]
    return sum((b.pos if f == b.file else sizes[f]) - (a.pos if f == a.file else 0) for f in files)


def test_byte_cuts_shrink_each_piece_by_the_skip_cost_across_files() -> None:
    sizes = {"mysql-bin.000007": 1000, "mysql-bin.000008": 5000, "mysql-bin.000009": 3000, "mysql-bin.000010": 50}
    start, end = BinlogOffset("mysql-bin.000007", 400), BinlogOffset("mysql-bin.000009", 2000)
    cuts = byte_cuts(start, end, sizes, parts=3, min_bytes=100, skip_cost=0.5)
    total = 600 + 5000 + 2000
    points = [start, *cuts, end]
    pieces = [_bytes_between(a, b, sizes) for a, b in itertools.pairwise(points)]
    assert sum(pieces) == total and all(a.is_before(b) for a, b in itertools.pairwise(points))
    assert [round(p / pieces[0], 2) for p in pieces] == [1.0, 0.5, 0.25]  # each reader skips the pieces before
    assert cuts[0].file == "mysql-bin.000008"


@pytest.mark.parametrize(("parts", "min_bytes", "wanted"), [
    (4, 1000, 4),  # pieces 3388, 2710, 2168, 1734
    (4, 3000, 2),  # three would leave a last piece of 2623
    (4, 5001, 1), (1, 1, 1)])
def test_byte_cuts_give_each_piece_at_least_min_bytes(parts: int, min_bytes: int, wanted: int) -> None:
    sizes = {"b.000001": 12000}
    cuts = byte_cuts(BinlogOffset("b.000001", 4), BinlogOffset("b.000001", 10004), sizes, parts, min_bytes, 0.2)
    assert len(cuts) == wanted - 1


def test_byte_cuts_leave_the_slice_whole_when_a_file_is_unknown() -> None:
    sizes = {"b.000001": 12000, "b.000003": 12000}  # b.000002 purged or never listed
    assert byte_cuts(BinlogOffset("b.000001", 4), BinlogOffset("b.000003", 9000), sizes, 2, 10, 0.2) == []


def test_postgres_cuts_are_wal_positions_that_shrink_by_the_skip_cost() -> None:
    """No server is asked: any LSN cuts a Postgres slice (a transaction belongs to the piece its
    commit lies in). Each later piece holds (1 - SKIP_COST) of the one before; none is cut below
    twice ``stream_split_bytes``."""
    d = PostgresDialect(PostgresSourceConfig(hostname="h", username="u", password="p", database="db",
                                             tables=["public\\..*"], stream_split_bytes=1000))

    def no_server() -> None:
        raise AssertionError("the cuts need no connection")

    start = LsnOffset(5 << 32 | 0xFFFFF000)  # the pieces straddle a 4 GiB boundary of the LSN
    assert d.slice_cuts(no_server, start, LsnOffset(start.lsn + 1999), 3) == []
    assert d.slice_cuts(no_server, start, LsnOffset(start.lsn + 10_000), 1) == []
    end = LsnOffset(start.lsn + 10_000)
    cuts = d.slice_cuts(no_server, start, end, 3)
    points = [start, *cuts, end]
    pieces = [b.lsn - a.lsn for a, b in itertools.pairwise(points)]
    assert sum(pieces) == 10_000 and len(pieces) == 3
    assert [round(p / pieces[0], 2) for p in pieces] == [1.0, 1 - SKIP_COST, round((1 - SKIP_COST) ** 2, 2)]
    assert len(d.slice_cuts(no_server, start, LsnOffset(start.lsn + 2_500), 3)) == 1, "no piece under 1000 bytes"


def test_a_postgres_batch_ends_max_bytes_of_wal_on() -> None:
    d = PostgresDialect(PostgresSourceConfig(hostname="h", username="u", password="p", database="db",
                                             tables=["public\\..*"]))
    assert d.max_batch_bytes() == 256 * 1024 * 1024
    start = LsnOffset(7 << 32 | 0xFFFFFF00)
    assert d.capped_end(lambda: None, start, LsnOffset(start.lsn + 1000), 1000) == LsnOffset(start.lsn + 1000)
    assert d.capped_end(lambda: None, start, LsnOffset(start.lsn + 1001), 1000) == LsnOffset(start.lsn + 1000)
    off = PostgresSourceConfig(hostname="h", username="u", password="p", database="db", tables=["public\\..*"],
                               max_batch_bytes=None)
    assert PostgresDialect(off).max_batch_bytes() is None
