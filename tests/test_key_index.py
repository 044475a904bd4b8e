"""The mirror MERGE's in-memory index of its data files' keys (``sinks/delta/key_index.py``):
the same positions as matching the file's keys on disk, each file read once, memory bounded."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sinks.delta.key_index import KeyColumns, KeyIndex, SortedKeys, file_keys, sorted_union


def _file(tmp_path: Path, name: str, table: pa.Table) -> str:
    path = str(tmp_path / name)
    pq.write_table(table, path)
    return path


def _reference(path: str, key: tuple[str, ...], wanted: pa.Table) -> list[int]:
    """Every position whose key is in ``wanted``, row by row."""
    rows = pq.read_table(path, columns=list(key)).to_pylist()
    keys = {tuple(r[k] for k in key) for r in wanted.to_pylist()}
    return [i for i, r in enumerate(rows) if tuple(r[k] for k in key) in keys]


def test_sorted_integer_keys_find_what_a_scan_of_the_file_finds(tmp_path: Path) -> None:
    rng = random.Random(5)
    for n, file_type, seed in ((1, pa.int32(), 1), (1000, pa.int32(), 2), (5000, pa.int64(), 3), (300, pa.uint64(), 4)):
        values = [*rng.sample(range(0, 4 * n), n), 7, 7]  # unordered, one value twice
        path = _file(tmp_path, f"k{seed}.parquet", pa.table({"id": pa.array(values, file_type)}))
        index = KeyIndex()
        wanted_type = pa.uint64() if file_type == pa.uint64() else pa.int64()
        for take in (0, 1, 17, n):
            wanted = pa.table({"id": pa.array([*rng.sample(range(0, 4 * n), min(take, 4 * n)), 7], wanted_type)})
            assert index.positions(path, ("id",), wanted).tolist() == _reference(path, ("id",), wanted)
        assert index.reads == 1, "read from disk once"
        assert isinstance(file_keys(pq.read_table(path)), SortedKeys)


def test_string_composite_and_nullable_keys_are_matched_in_memory(tmp_path: Path) -> None:
    strings = _file(tmp_path, "s.parquet", pa.table({"code": [f"c{i % 50}" for i in range(200)]}))
    pairs = _file(tmp_path, "p.parquet", pa.table({"a": list(range(100)) * 2, "b": ["x"] * 100 + ["y"] * 100}))
    nulls = _file(tmp_path, "n.parquet", pa.table({"k": pa.array([1, None, 3, 4, None, 6], pa.int64())}))
    index = KeyIndex()
    cases = [(strings, ("code",), pa.table({"code": ["c3", "c49", "nope"]})),
             (pairs, ("a", "b"), pa.table({"a": [3, 3, 99, 500], "b": ["x", "y", "y", "x"]})),
             (nulls, ("k",), pa.table({"k": pa.array([3, 6, 9], pa.int64())}))]
    for path, key, wanted in cases + cases:
        assert index.positions(path, key, wanted).tolist() == _reference(path, key, wanted)
        assert isinstance(file_keys(pq.read_table(path, columns=list(key))), KeyColumns)
    assert index.reads == 3


def test_the_index_keeps_at_most_its_bound_dropping_the_least_recently_used(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(np.arange(1000), pa.int64())})
    paths = []
    for folder in ("a", "b", "c"):
        (tmp_path / folder).mkdir()
        paths.append(_file(tmp_path / folder, "f.parquet", table))
    one = SortedKeys(table.column("id")).nbytes
    index = KeyIndex(max_bytes=2 * one)
    wanted = pa.table({"id": pa.array([5], pa.int64())})
    for path in paths:  # a, b, c: a goes
        assert index.positions(path, ("id",), wanted).tolist() == [5]
    assert index.nbytes == 2 * one and index.reads == 3
    index.positions(paths[2], ("id",), wanted)
    index.positions(paths[1], ("id",), wanted)
    assert index.reads == 3, "b and c are kept"
    index.positions(paths[0], ("id",), wanted)  # a read again; c is now the least recently used
    assert index.reads == 4
    index.positions(paths[1], ("id",), wanted)
    assert index.reads == 4
    index.retain(str(tmp_path / "b"), live=set())  # b left its table
    assert index.nbytes == one
    index.positions(paths[1], ("id",), wanted)
    assert index.reads == 5
    assert KeyIndex(max_bytes=one - 1).positions(paths[0], ("id",), wanted).tolist() == [5], \
        "a file larger than the bound is still answered, just not kept"


def test_sorted_lookup_agrees_with_arrow_on_random_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    for trial in range(20):
        values = rng.integers(-50, 50, size=int(rng.integers(1, 400)))
        wanted = pa.table({"id": pa.array(rng.integers(-60, 60, size=int(rng.integers(0, 30))), pa.int64())})
        column = pa.chunked_array([pa.array(values, pa.int64())])
        expected = np.flatnonzero(pc.is_in(column, value_set=wanted["id"]).to_numpy(zero_copy_only=False))
        assert SortedKeys(column).positions(wanted, ("id",)).tolist() == expected.tolist(), trial


def test_sorted_union_is_the_distinct_positions_ascending() -> None:
    """Sorted or not, overlapping or not, empty or not: what ``np.unique`` of them all gives."""
    rng = np.random.default_rng(7)
    for _ in range(500):
        parts = [rng.integers(0, 60, int(rng.integers(0, 40))) for _ in range(int(rng.integers(1, 4)))]
        parts = [np.sort(p) if rng.random() < 0.7 else p for p in parts]
        got = sorted_union(*parts)
        assert got.dtype == np.int64
        assert got.tolist() == np.unique(np.concatenate(parts)).tolist(), parts
