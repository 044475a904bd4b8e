"""Where each key lies in a mirror's data files, kept in memory between MERGEs (driver).

A deletion-vector MERGE (:mod:`sinks.delta.deletion_vectors`) finds the rows of the changed keys
in every file whose key range may hold one. With keys spread over the table that is every file,
every batch: a MERGE of 1,000 random keys read all 12M keys of a TPC-DS SF1000 mirror from disk
each time (0.85 s of its 1.03 s). A data file never changes once written (later versions add new
files and hide rows with deletion vectors), so what its first MERGE learns of its keys stays
right for as long as the file is live:

* a single integer key (the common case) is kept sorted, with each value's position: a MERGE
  then looks its keys up by binary search, in time that follows the changed keys, not the file;
* other keys (strings, several columns) keep their columns, and a MERGE matches them in memory.

The index is bounded (:data:`MAX_BYTES` per sink, the least recently used files go first), so a
table whose keys do not fit reads the rest from disk as before. Files that leave a table (a
compaction, a purge) are dropped at the next MERGE of that table (:meth:`KeyIndex.retain`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Set

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def sorted_union(*parts: np.ndarray) -> np.ndarray:
    """The distinct values of ``parts`` (row positions), ascending, as int64.

    The parts are usually sorted already, and a stable sort (timsort) merges sorted runs in
    linear time: for 75k positions 0.1-0.3 ms, against 12-22 ms for ``np.union1d`` and
    ``np.unique``, which hash every value in NumPy 2.4 (a MERGE of 300k changed keys into 4
    files spent 0.1-0.2 s in them, measured 2026-12-02)."""
    joined = np.sort(np.concatenate(parts), kind="stable")
    if joined.size > 1:
        joined = joined[np.concatenate(([True], joined[1:] != joined[:-1]))]
    return joined.astype(np.int64, copy=False)


# 256 MiB: 22M integer keys (12 bytes each), a TPC-DS SF1000 mirror's 12M with room to spare.
MAX_BYTES = 256 * 2**20


class SortedKeys:
    """One file's single integer key column, sorted, with each value's row position."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        values = column.to_numpy()
        self.order = np.argsort(values, kind="stable").astype(np.int32 if len(values) < 2**31 else np.int64)
        self.sorted = values[self.order]
        self.nbytes = self.order.nbytes + self.sorted.nbytes

    def positions(self, wanted: pa.Table, key: tuple[str, ...]) -> np.ndarray:
        """The sorted row positions whose key is among ``wanted``'s."""
        values = wanted[key[0]].to_numpy()
        lo, hi = np.searchsorted(self.sorted, values, "left"), np.searchsorted(self.sorted, values, "right")
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            return np.zeros(0, dtype=np.int64)
        firsts = np.repeat(lo, counts)
        steps = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        return sorted_union(self.order[firsts + steps])


class KeyColumns:
    """One file's key columns as read (string keys, several columns, or nulls in the column)."""

    def __init__(self, rows: pa.Table) -> None:
        self.rows = rows
        self.nbytes = rows.nbytes

    def positions(self, wanted: pa.Table, key: tuple[str, ...]) -> np.ndarray:
        """The sorted row positions whose key is among ``wanted``'s."""
        if len(key) == 1:
            column = self.rows[key[0]].cast(wanted[key[0]].type)
            return np.flatnonzero(pc.is_in(column, value_set=wanted[key[0]]).to_numpy(zero_copy_only=False))
        rows = self.rows.cast(wanted.schema).append_column("__position", pa.array(np.arange(self.rows.num_rows)))
        return np.sort(rows.join(wanted, keys=list(key), join_type="inner")["__position"].to_numpy())


def file_keys(rows: pa.Table) -> SortedKeys | KeyColumns:
    """The index of a file's key columns ``rows``: sorted when it is one integer column without nulls."""
    if rows.num_columns == 1 and pa.types.is_integer(rows.schema.types[0]) and rows.column(0).null_count == 0:
        return SortedKeys(rows.column(0))
    return KeyColumns(rows)


class KeyIndex:
    """Each data file's keys as its first MERGE read them (one instance per sink; its methods may
    be called from the MERGE's thread pool).

    Args:
        max_bytes: the most the kept files may hold; past it the least recently used go.
    """

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._files: OrderedDict[tuple[str, tuple[str, ...]], SortedKeys | KeyColumns] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.reads = 0  # files read from disk (for the log and the tests)

    def positions(self, path: str, key: tuple[str, ...], wanted: pa.Table) -> np.ndarray:
        """The sorted row positions of the Parquet file at ``path`` whose ``key`` is among
        ``wanted``'s (its key columns, cast to the table's types)."""
        with self._lock:
            kept = self._files.get((path, key))
            if kept is not None:
                self._files.move_to_end((path, key))
        if kept is None:
            kept = file_keys(pq.read_table(path, columns=list(key)))
            with self._lock:
                self.reads += 1
                self._put((path, key), kept)
        return kept.positions(wanted, key)

    def retain(self, directory: str, live: Set[str]) -> None:
        """Forget the files under ``directory`` (a table's root) that are not in ``live``."""
        prefix = directory.rstrip("/") + "/"
        with self._lock:
            for name in [n for n in self._files if n[0].startswith(prefix) and n[0] not in live]:
                self._bytes -= self._files.pop(name).nbytes

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _put(self, name: tuple[str, tuple[str, ...]], keys: SortedKeys | KeyColumns) -> None:
        old = self._files.pop(name, None)
        self._bytes -= old.nbytes if old is not None else 0
        if keys.nbytes > self.max_bytes:
            return
        self._files[name] = keys
        self._bytes += keys.nbytes
        while self._bytes > self.max_bytes:
            self._bytes -= self._files.popitem(last=False)[1].nbytes
