"""The job's own compaction of a local Delta table, committed only if no other writer committed since
its read (Delta's ``OPTIMIZE``: small files rewritten into files of about a target size, in one
commit that changes no data).

delta-rs's ``optimize.compact()`` does not check that another writer's commit removed the files it
compacted: since delta-rs#3982 a concurrent remove with ``dataChange: false`` passes its conflict
check. Two compactions of the same files (the job's and a platform's ``OPTIMIZE``, Z-order or
``REORG``) then both commit, and every row of those files is in the table twice (delta-rs 1.6.6;
tests/test_shared_lake.py). So on a local table the job compacts as it writes deletion vectors: it
writes the new files, then creates the commit file only if absent, at the version after the one it
read (:func:`sinks.delta.deletion_vectors.commit_next`); another writer's commit there makes it
raise :class:`sinks.delta.conflicts.CommitConflict`, and the maintenance is skipped until next
time (:mod:`sinks.delta.maintenance`). On an object store delta-rs compacts (its log store has no
create-if-absent here).

Bins follow delta-rs's: the files under the target size, oldest first, packed into bins of at most
the target size; a bin of one file is left as it is. Deletion vectors are applied (the rows they
hide are not written). Runs on the driver.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from cdc.model.hooks import NO_HOOKS, Hooks
from sinks.changes import conform
from sinks.delta.deletion_vectors import (
    add_action,
    commit_next,
    descriptors_in_log,
    hidden_rows,
    remove_action,
)
from sinks.delta.files import local_dir, write_file
from sinks.delta.tables import TableKind


def bins(files: dict[str, list[Any]], target_size: int) -> list[list[int]]:
    """The indexes of ``files`` (delta-rs's add actions, flattened) to compact together: the files
    under ``target_size``, oldest first, in consecutive bins of at most that size (two files or more)."""
    small = sorted((i for i, size in enumerate(files.get("size_bytes", [])) if size < target_size),
                   key=lambda i: (files["modification_time"][i], files["path"][i]))
    out: list[list[int]] = [[]]
    total = 0
    for i in small:
        size = files["size_bytes"][i]
        if out[-1] and total + size > target_size:
            out.append([])
            total = 0
        out[-1].append(i)
        total += size
    return [b for b in out if len(b) > 1]


def compact(table: DeltaTable, kind: TableKind, target_size: int, row_group_rows: int,
            hooks: Hooks = NO_HOOKS) -> dict[str, int]:
    """Compact ``table`` (local) in one commit, into files of row groups of ``row_group_rows``;
    delta-rs's metrics (files removed and added).

    ``hooks`` pass ``delta_planned`` after the new files are written, before the commit.

    Raises:
        CommitConflict: another writer committed since the version read (nothing is committed;
            the new files are orphans a VACUUM deletes).
    """
    root = local_dir(table.table_uri)
    assert root is not None, "compact() is for local tables"
    files = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    planned = bins(files, target_size)
    if not planned:
        return {"numFilesRemoved": 0, "numFilesAdded": 0}
    storage = pa.schema(table.schema().to_arrow())
    vectors = "deletionVectors" in (table.protocol().reader_features or [])
    hidden = hidden_rows(table, root) if vectors else {}
    paths = {files["path"][i] for b in planned for i in b}
    old = descriptors_in_log(root, table.version(), paths) if hidden else {}
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [{"commitInfo": {
        "timestamp": now, "operation": "OPTIMIZE", "clientVersion": "spark-cdc",
        "operationParameters": {"targetSize": str(target_size)}}}]
    for b in planned:
        parts = [_live_rows(root, files["path"][i], hidden.get(files["path"][i]), storage) for i in b]
        written = write_file(table.table_uri, {}, "", kind, pa.concat_tables(parts), row_group_rows)
        actions += [remove_action(files["path"][i], files["size_bytes"][i], old.get(files["path"][i]), now,
                                  data_change=False) for i in b]
        actions.append({"add": {**add_action(written), "dataChange": False}})
    hooks.reached("delta_planned")
    commit_next(table, root, actions)
    return {"numFilesRemoved": len(paths), "numFilesAdded": len(planned)}


def _live_rows(root: str, path: str, hidden: np.ndarray | None, storage: pa.Schema) -> pa.Table:
    """A file's rows that its deletion vector does not hide, as the table's schema (a file written
    before an added column lacks it)."""
    rows = pq.read_table(os.path.join(root, unquote(path)))
    if hidden is not None and len(hidden):
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[hidden] = False
        rows = rows.filter(pa.array(keep))
    return conform(rows.select([n for n in rows.column_names if n in storage.names]), storage)
