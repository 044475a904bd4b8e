"""The mirror's MERGE as deletion vectors: its cost follows the changed rows, not the table.

Copy-on-write rewrites every file that holds a changed key; with keys spread over the table that
is every file, so a MERGE of 1,000 random keys rewrote the whole 2M-row TPC-DS SF100 mirror and
the mirror trailed the changelog by seconds (minutes at SF1000). With ``sink.deletion_vectors``
a batch instead:

1. reads the key column(s) of the files whose key range may hold a changed key (each file once:
   later MERGEs find them in memory, :mod:`sinks.delta.key_index`), and finds the positions of
   the changed keys' current rows (rows an earlier deletion vector already hides are skipped: the
   positions this module's last commit left, or the table's deletion vectors when another writer
   committed since);
2. writes the changed keys' new rows (not the deleted keys') to new files, in key order, or
   (:meth:`DeletionVectorMerge.merge_staged`) adds the files of them that the stream's tasks
   wrote (:func:`sinks.delta.files.write_mirror_effects`): the driver then reads key columns
   alone, and a row of a key that a later task's file changes again is hidden in its own file;
3. writes one deletion-vector file holding, for every touched file, its old deleted positions
   plus the new ones (Delta's format: a 64-bit portable RoaringBitmap per file, framed with its
   size and CRC-32);
4. commits, in one ``_delta_log/<version>.json`` created only if absent: per touched file a
   ``remove`` of it with its old deletion vector and an ``add`` of it with the new one, the new
   files, and the batch's app transaction (``txn``), as delta-rs's MERGE would.

delta-rs writes no deletion vectors (its MERGE and DELETE copy-on-write even on tables that have
the feature, 1.6), so this module writes the commit itself; delta-rs, DuckDB, Polars and Spark
read it (``tests/test_deletion_vectors.py``). The table gets the ``deletionVectors`` reader and
writer features (``delta.enableDeletionVectors``), which delta-rs's pyarrow reader
(``DeltaTable.to_pyarrow_table``) refuses: read such a mirror with ``DeltaTable.scan()``,
DuckDB, Polars or Spark. delta-rs's compaction (:mod:`sinks.delta.maintenance`) applies the
deletion vectors and writes files without them; its VACUUM keeps the deletion-vector files, and
:func:`unused_files` finds the ones to delete with it: used by no live file and by no version
within the retention.

It needs a primary key (a table without one copy-on-writes as before), and a local table: the
commit is created with ``O_EXCL``, and object stores need delta-rs's log store for a put-if-absent
(the config refuses ``sink.deletion_vectors`` with an object-store ``sink.path``).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import struct
import time
import uuid
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pyroaring
from deltalake import DeltaTable

from cdc.model.schema import TableSchema
from sinks.changes import DELETE_FLAG, last_of_each_key
from sinks.delta.commits import MissingCommit, read_actions
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.conflicts import CommitConflict
from sinks.delta.files import (
    MIRROR_UPSERTS,
    READ_THREADS,
    StagedFile,
    check_staged,
    discard_files,
    local_dir,
    write_file,
    write_table_file,
)
from sinks.delta.key_index import KeyIndex, sorted_union
from sinks.delta.rewrite import UPSERT_FILE_ROWS, KeyRanges

log = logging.getLogger(__name__)

PROP_ENABLED = "delta.enableDeletionVectors"
MAGIC = 1681511377  # Delta's RoaringBitmapArray format
FILE_PREFIX = "deletion_vector_"
CHECKPOINT_EVERY = 100  # versions: readers replay at most this many JSON commits
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    """ZeroMQ's Base85 (Z85) of ``data`` (a multiple of 4 bytes), as Delta encodes UUIDs."""
    out: list[str] = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        digits = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            digits.append(_Z85[digit])
        out.extend(reversed(digits))
    return "".join(out)


def serialize(positions: np.ndarray) -> bytes:
    """Row positions as Delta's RoaringBitmapArray: the magic number, then a 64-bit portable
    RoaringBitmap (one bucket: a Parquet file's row positions fit 32 bits)."""
    bitmap = pyroaring.BitMap(positions.astype(np.uint32))
    return struct.pack("<iqI", MAGIC, 1, 0) + bitmap.serialize()


def enabled(table: DeltaTable) -> bool:
    """Whether this module writes the table's MERGEs (the property, and a local table)."""
    return table.metadata().configuration.get(PROP_ENABLED) == "true" and local_dir(table.table_uri) is not None


def enable(table: DeltaTable) -> None:
    """Give ``table`` the deletion-vector features (a protocol and metadata commit; call it while
    nothing else writes the table)."""
    if table.metadata().configuration.get(PROP_ENABLED) != "true":
        table.alter.set_table_properties({PROP_ENABLED: "true"}, raise_if_not_exists=False)


class DeletionVectorMerge:
    """Applies change batches to mirrors with deletion vectors (one instance per sink: it
    remembers the deletion vector it last committed for each file).

    Args:
        config: the sink configuration (where new files go).
    """

    def __init__(self, config: DeltaSinkConfig) -> None:
        self.config = config
        self._descriptors: dict[str, dict[str, dict[str, Any]]] = {}  # table URI -> path -> its DV
        self.keys = KeyIndex()  # where each key lies in the data files, read once per file
        # table URI -> (the version this merger committed, the positions each live file hides then)
        self._hidden: dict[str, tuple[int, dict[str, np.ndarray]]] = {}

    def merge(self, schema: TableSchema, table: DeltaTable, source: pa.Table, storage: pa.Schema,
              app: str, batch_id: int) -> None:
        """Apply ``source`` (one row per changed key: :func:`sinks.changes.mirror_changes`) in one
        commit carrying ``(app, batch_id)``.

        Raises:
            CommitConflict: another writer took the version.
        """
        key = schema.primary_key
        assert key
        keys = source.select(list(key)).cast(pa.schema([storage.field(k) for k in key]))
        upserts = source.filter(pc.invert(source[DELETE_FLAG])).drop_columns([DELETE_FLAG]).cast(storage)
        upserts = upserts.take(pc.sort_indices(upserts, sort_keys=[(k, "ascending") for k in key]))

        def write(pool: concurrent.futures.ThreadPoolExecutor) -> list[tuple[StagedFile, np.ndarray]]:
            return [(f, _EMPTY) for f in pool.map(
                lambda at: write_table_file(self.config, schema, "mirror", upserts.slice(at, UPSERT_FILE_ROWS)),
                range(0, upserts.num_rows, UPSERT_FILE_ROWS))]

        self._apply(schema, table, keys, write, app, batch_id)

    def merge_staged(self, schema: TableSchema, table: DeltaTable, files: list[StagedFile], storage: pa.Schema,
                     app: str, batch_id: int) -> None:
        """Apply the tasks' reduction of the batches (:func:`sinks.delta.files.write_mirror_effects`:
        ``files``, in stream order) in one commit carrying ``(app, batch_id)``: the upsert files
        are added as they are, and only key columns are read.

        Each file is reduced within itself, but a key may recur in a later piece (the next task's
        slice, the next batch of a coalesced merge): its row in an earlier upsert file is then
        hidden by a deletion vector on that new file, as the last state wins.

        Raises:
            CommitConflict: another writer took the version.
        """
        key = schema.primary_key
        assert key
        root = local_dir(table.table_uri)
        assert root is not None
        check_staged(table.table_uri, files, batch_id)
        key_schema = pa.schema([storage.field(k) for k in key])
        with concurrent.futures.ThreadPoolExecutor(min(len(files), READ_THREADS)) as pool:
            parts = list(pool.map(lambda f: pq.read_table(os.path.join(root, f.path), columns=list(key))
                                  .cast(key_schema), files))
        keys, superseded = pa.concat_tables(parts), [_EMPTY] * len(files)
        if len(files) > 1:  # the last occurrence of each key wins; earlier ones are superseded
            last = last_of_each_key(keys).to_numpy()
            lost = np.setdiff1d(np.arange(keys.num_rows), last, assume_unique=True)  # sorted
            starts = np.cumsum([0] + [p.num_rows for p in parts])
            superseded = [rows - start for rows, start in
                          zip(np.split(lost, np.searchsorted(lost, starts[1:-1])), starts[:-1], strict=True)]
            keys = keys.take(pa.array(last))  # each key once
        new = [(f, hide) for f, hide in zip(files, superseded, strict=True) if f.stream == MIRROR_UPSERTS]
        self._apply(schema, table, keys, lambda _: new, app, batch_id)
        discard_files(self.config, schema, [f for f in files if f.stream != MIRROR_UPSERTS])

    def _apply(self, schema: TableSchema, table: DeltaTable, keys: pa.Table,
               new_files: Callable[[concurrent.futures.ThreadPoolExecutor], list[tuple[StagedFile, np.ndarray]]],
               app: str, batch_id: int) -> None:
        """Hide the current rows of ``keys`` (each key once) and add the files ``new_files``
        gives (with the positions each must hide itself), in one commit.

        ``new_files`` runs in the thread pool that finds the keys' positions, beside it."""
        began = time.perf_counter()
        key = schema.primary_key
        root = local_dir(table.table_uri)
        assert root is not None and key
        files = pa.table(table.get_add_actions(flatten=True)).to_pydict()
        paths: list[str] = files.get("path", [])
        files["num_records"] = [n if n is not None else pq.ParquetFile(os.path.join(root, unquote(p))).metadata.num_rows
                                for p, n in zip(paths, files.get("num_records", []), strict=True)]
        hidden = self._hidden_rows(table, root)
        ranges = KeyRanges(keys, key[0], files)
        full = [os.path.join(root, unquote(p)) for p in paths]
        self.keys.retain(root, set(full))
        reads = self.keys.reads

        def positions(i: int) -> tuple[int, np.ndarray] | None:
            wanted = ranges.of_file(i)
            if wanted.num_rows == 0:
                return None
            found = self.keys.positions(full[i], key, wanted)
            new = np.setdiff1d(found, hidden.get(paths[i], _EMPTY), assume_unique=True)
            return (i, new) if new.size else None

        with concurrent.futures.ThreadPoolExecutor(max(1, min(len(paths), os.cpu_count() or 1))) as pool:
            found = pool.map(positions, range(len(paths)))
            added = new_files(pool)
            found_list = [f for f in found if f is not None]
        deletes = {paths[i]: sorted_union(hidden.get(paths[i], _EMPTY), new) for i, new in found_list}
        own = {f.path: hide for f, hide in added if hide.size}  # rows of a new file a later piece replaced
        vectors = self._write_vectors(root, {**deletes, **own})
        old = self._current(table, root, {p: len(hidden[p]) for p in deletes if p in hidden})
        now = int(time.time() * 1000)
        actions: list[dict[str, Any]] = [
            {"commitInfo": {"timestamp": now, "operation": "MERGE", "clientVersion": "spark-cdc",
                            "operationParameters": {"predicate": "deletion vectors",
                                                    "deletionVectors": str(len(vectors))}}},
            {"txn": {"appId": app, "version": batch_id, "lastUpdated": now}},
        ]
        position = {p: i for i, p in enumerate(paths)}
        for path in deletes:
            i = position[path]
            actions.append(remove_action(path, files["size_bytes"][i], old.get(path), now, data_change=True))
            actions.append({"add": {"path": path, "partitionValues": {}, "size": files["size_bytes"][i],
                                    "modificationTime": now, "dataChange": True, "stats": _wide_stats(files, i),
                                    "deletionVector": vectors[path]}})
        for f, _ in added:
            add = add_action(f)
            if f.path in own:
                add.update(stats=json.dumps({**json.loads(f.stats), "tightBounds": False}),
                           deletionVector=vectors[f.path])
            actions.append({"add": add})
        version = commit_next(table, root, actions)
        self._descriptors.setdefault(table.table_uri, {}).update(vectors)
        self._hidden[table.table_uri] = (version, {**hidden, **deletes, **own})
        log.info("mirror of %s: batch %d as deletion vectors: %d rows hidden in %d of %d files (%d key columns "
                 "read from disk), %d rows in %d new files (%d of them hidden: replaced in a later piece); %.2f s",
                 schema.table_id, batch_id,
                 sum(int(vectors[p]["cardinality"]) for p in deletes) - sum(len(hidden.get(p, _EMPTY)) for p in deletes),
                 len(deletes), len(paths), self.keys.reads - reads, sum(f.num_records for f, _ in added), len(added),
                 sum(len(h) for h in own.values()), time.perf_counter() - began)

    def _hidden_rows(self, table: DeltaTable, root: str) -> dict[str, np.ndarray]:
        """:func:`hidden_rows`, or what this merger's last commit left when the table is still at
        that version (any other writer's commit, a compaction or a purge, moves it on)."""
        kept = self._hidden.pop(table.table_uri, None)
        if kept is not None and kept[0] == table.version():
            return kept[1]
        return hidden_rows(table, root)

    def _write_vectors(self, root: str, deletes: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
        """One deletion-vector file holding every touched file's vector; their descriptors."""
        if not deletes:
            return {}
        ident = uuid.uuid4()
        blob, out = bytearray(b"\x01"), {}
        for path, positions in deletes.items():
            data = serialize(positions)
            out[path] = {"storageType": "u", "pathOrInlineDv": z85(ident.bytes), "offset": len(blob),
                         "sizeInBytes": len(data), "cardinality": int(positions.size)}
            blob += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
        with open(os.path.join(root, f"{FILE_PREFIX}{ident}.bin"), "wb") as f:
            f.write(blob)
        return out

    def _current(self, table: DeltaTable, root: str, cardinality: dict[str, int]) -> dict[str, dict[str, Any]]:
        """The deletion-vector descriptors the live ``add`` actions of these files carry (a
        ``remove`` must name the same one): remembered from this process's commits when the
        cardinality still matches, else read back from the log."""
        known = self._descriptors.get(table.table_uri, {})
        out = {p: known[p] for p, n in cardinality.items() if p in known and int(known[p]["cardinality"]) == n}
        missing = set(cardinality) - set(out)
        if missing:
            out.update(descriptors_in_log(root, table.version(), missing))
        return out


_EMPTY = np.zeros(0, dtype=np.int64)


def hidden_rows(table: DeltaTable, root: str) -> dict[str, np.ndarray]:
    """Each live file's positions that its deletion vector hides (files without one: absent)."""
    out: dict[str, np.ndarray] = {}
    prefix = root.rstrip("/") + "/"
    for batch in table.deletion_vectors():
        rows = pa.record_batch(batch)
        for uri, keep in zip(rows["filepath"].to_pylist(), rows["selection_vector"], strict=True):
            mask = np.asarray(keep.values.to_numpy(zero_copy_only=False), dtype=bool)
            full = local_dir(uri) or unquote(uri)  # delta-rs encodes the whole URI, the table's folder too
            path = full.removeprefix(prefix)
            out[path] = np.flatnonzero(~mask).astype(np.int64)
    return out


def purge(table: DeltaTable, fraction: float = 0.5) -> int:
    """Rewrite, without their hidden rows, the files whose deletion vector hides ``fraction`` of
    their rows or more (Delta's ``REORG ... APPLY (PURGE)``), in one commit that changes no data;
    the number of files rewritten. Compaction leaves them: they are not small.

    A file is rewritten once it is mostly hidden, so with changes spread over the table the files
    come due one by one, not all at once.
    """
    root = local_dir(table.table_uri)
    assert root is not None
    hidden = hidden_rows(table, root)
    files = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    rows_of = {p: n for p, n in zip(files.get("path", []), files.get("num_records", []), strict=True)}
    size_of = {p: n for p, n in zip(files.get("path", []), files.get("size_bytes", []), strict=True)}
    due = sorted(p for p, h in hidden.items() if rows_of.get(p) and len(h) >= fraction * rows_of[p])
    if not due:
        return 0
    old = descriptors_in_log(root, table.version(), set(due))
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [{"commitInfo": {"timestamp": now, "operation": "REORG", "clientVersion": "spark-cdc",
                                                     "operationParameters": {"applyPurge": "true"}}}]
    for path in due:
        rows = pq.read_table(os.path.join(root, unquote(path)))
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[hidden[path]] = False
        written = write_file(table.table_uri, {}, "", "mirror", rows.filter(pa.array(keep)))
        actions.append(remove_action(path, size_of[path], old.get(path), now, data_change=False))
        actions.append({"add": {**add_action(written), "dataChange": False}})
    commit_next(table, root, actions)
    return len(due)


def commit_rewrite(table: DeltaTable, staged: list[StagedFile], old: list[tuple[str, int]], app: str,
                   batch_id: int) -> None:
    """Commit ``staged`` in place of every file of ``old`` (path, size: the live files of
    ``table``'s version) as ``table``'s next version, with the batch's app transaction
    (:func:`sinks.delta.rewrite.rewrite_all`).

    Raises:
        CommitConflict: another writer took the version (:func:`sinks.delta.conflicts.replanning`
            plans the batch again).
    """
    root = local_dir(table.table_uri)
    assert root is not None
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [
        {"commitInfo": {"timestamp": now, "operation": "MERGE", "clientVersion": "spark-cdc",
                        "operationParameters": {"predicate": "every file rewritten"}}},
        {"txn": {"appId": app, "version": batch_id, "lastUpdated": now}},
    ]
    actions += [remove_action(path, size, None, now, data_change=True) for path, size in old]
    actions += [{"add": add_action(f)} for f in staged]
    commit_next(table, root, actions)


def _wide_stats(files: dict[str, list[Any]], i: int) -> str:
    """The file's statistics, marked wide (its deletion vector hides rows): numRecords counts
    every row in the file; min, max and null counts of the JSON-representable columns."""
    stats: dict[str, Any] = {"numRecords": files["num_records"][i], "tightBounds": False}
    for prefix, name in (("min.", "minValues"), ("max.", "maxValues"), ("null_count.", "nullCount")):
        values = {c[len(prefix):]: v[i] for c, v in files.items() if c.startswith(prefix) and (
            isinstance(v[i], (int, str)) or (isinstance(v[i], float) and np.isfinite(v[i])))}
        if values:
            stats[name] = _nest(values)
    return json.dumps(stats)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}`` (statistics of nested columns)."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        *parents, leaf = dotted.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def add_action(f: StagedFile) -> dict[str, Any]:
    return {"path": f.path, "partitionValues": {}, "size": f.size, "modificationTime": f.modification_time,
            "dataChange": True, "stats": f.stats}


def remove_action(path: str, size: int, vector: dict[str, Any] | None, now: int, *, data_change: bool) -> dict[str, Any]:
    """The ``remove`` of a live file, naming the deletion vector it carries (a logical file is
    its path and its vector)."""
    return {"remove": {"path": path, "deletionTimestamp": now, "dataChange": data_change, "extendedFileMetadata": True,
                       "partitionValues": {}, "size": size, **({"deletionVector": vector} if vector else {})}}


def commit_next(table: DeltaTable, root: str, actions: list[dict[str, Any]]) -> int:
    """Commit ``actions`` as ``table``'s next version, then write a checkpoint when the log has
    grown ``CHECKPOINT_EVERY`` versions past the last one (delta-rs checkpoints its own commits
    at multiples of its interval only: one of ours landing there, or a run of them, would leave
    every reader replaying an ever longer log)."""
    version = table.version() + 1
    _commit(root, version, actions)
    table.update_incremental()
    if version - _last_checkpoint(root) >= CHECKPOINT_EVERY:
        table.create_checkpoint()
    return version


def _commit(root: str, version: int, actions: list[dict[str, Any]]) -> None:
    """Create ``_delta_log/<version>.json`` holding ``actions``, only if no one else did."""
    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise CommitConflict(f"another writer committed version {version} of the Delta table {root} first",
                             uri=root, version=version) from None
    with os.fdopen(fd, "wb") as f:
        f.write(b"\n".join(json.dumps(a, separators=(",", ":")).encode() for a in actions) + b"\n")


def descriptors_in_log(root: str, newest: int, paths: set[str]) -> dict[str, dict[str, Any]]:
    """The deletion vector of the newest ``add`` of each of ``paths``: JSON commits newest first,
    then the checkpoint they start after."""
    found: dict[str, dict[str, Any]] = {}
    fs = _log_fs(root)
    for version in range(newest, -1, -1):
        try:
            actions = read_actions(fs, version)
        except MissingCommit:
            break
        for add in (a["add"] for a in actions if "add" in a):
            if unquote(add["path"]) in paths and add.get("deletionVector"):
                found.setdefault(unquote(add["path"]), add["deletionVector"])
        if set(found) >= paths:
            return found
    for add in _checkpoint(root, ("add",))[1].get("add", []):
        if add["path"] in paths and add.get("deletionVector"):
            found.setdefault(add["path"], {k: v for k, v in add["deletionVector"].items() if v is not None})
    return found

def unused_files(table: DeltaTable, retention_hours: float) -> list[str]:
    """The deletion-vector files a VACUUM with this retention may delete: older than it, used by
    no live file, and by no file removed within it (older versions still read those). The log is
    replayed from its last checkpoint (which keeps the removes within the retention).
    """
    root = local_dir(table.table_uri)
    if root is None:
        return []
    names = [n for n in os.listdir(root) if n.startswith(FILE_PREFIX) and n.endswith(".bin")]
    if not names:
        return []
    cutoff = time.time() - retention_hours * 3600
    live: dict[tuple[str, str], str] = {}  # (path, deletion vector) -> its file's id
    kept: set[str] = set()
    for kind, action in _replay(root, table.version()):
        dv = action.get("deletionVector") or {}
        ident = str(dv.get("pathOrInlineDv", ""))[-20:] if dv.get("storageType") == "u" else ""
        entry = (unquote(action["path"]), f"{ident}@{dv.get('offset')}")
        if kind == "add":
            live[entry] = ident
        else:
            live.pop(entry, None)
            if ident and int(action.get("deletionTimestamp") or 0) >= cutoff * 1000:
                kept.add(ident)
    kept |= set(live.values())
    out = []
    for name in names:
        path = os.path.join(root, name)
        try:
            ident = z85(uuid.UUID(name[len(FILE_PREFIX):-4]).bytes)
        except ValueError:
            continue  # not a name this module gives
        if ident not in kept and os.path.getmtime(path) < cutoff:
            out.append(path)
    return out


def _replay(root: str, newest: int) -> list[tuple[str, dict[str, Any]]]:
    """The file actions from the last checkpoint (its adds and removes) to version ``newest``,
    in order: ("add" | "remove", action)."""
    at, checkpoint = _checkpoint(root, ("add", "remove"))
    out = [(kind, a) for kind, actions in checkpoint.items() for a in actions]
    fs = _log_fs(root)
    for version in range(at + 1, newest + 1):
        out += [(kind, a[kind]) for a in read_actions(fs, version) for kind in ("add", "remove") if kind in a]
    return out


def _last_checkpoint(root: str) -> int:
    """The version of the table's last checkpoint (``_delta_log/_last_checkpoint``); -1: none."""
    marker = os.path.join(root, "_delta_log", "_last_checkpoint")
    if not os.path.exists(marker):
        return -1
    with open(marker, "rb") as f:
        return int(json.loads(f.read())["version"])


def _checkpoint(root: str, kinds: tuple[str, ...]) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """The last checkpoint's version (-1: none) and its actions of these kinds."""
    at = _last_checkpoint(root)
    if at < 0:
        return -1, {}
    table = pq.read_table(os.path.join(root, "_delta_log", f"{at:020d}.checkpoint.parquet"))
    return at, {k: [a for a in table[k].to_pylist() if a is not None] for k in kinds if k in table.column_names}


def _log_fs(root: str) -> pafs.FileSystem:
    return pafs.SubTreeFileSystem(root, pafs.LocalFileSystem())
