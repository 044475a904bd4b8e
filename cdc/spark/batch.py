"""Job wiring: the ``mysql-cdc`` stream into the sinks, one ``foreachBatch`` call per batch.

Runs on the driver. The source is given :meth:`BatchWriter.source_options`, so that:

* snapshot rows (``op='r'``, the bulk of an initial load) never pass through Spark or the
  driver: the emit tasks write them as Parquet files into the mirror and changelog directories
  (cdc/handoff.py, ``sinks.delta.files``) and the batch carries one manifest row per file set;
  the driver commits each table's files in one Delta transaction;
* change rows (c/u/d) skip Spark's row conversion the same way: the stream task writes them as
  changelog files and the driver commits them, tagged with the batch id. The mirror MERGE runs
  behind, in a thread that reads those files and coalesces the batches queued meanwhile
  (``sinks.delta.follower``; ``async_mirror=False`` reads and MERGEs inline).
  :meth:`BatchWriter.close` waits for it; after a crash the mirror catches up from the changelog
  before the first batch.

Both commits are idempotent per (query, batch id), so a batch that Spark replays after a crash
(it committed to Delta but Spark had not yet written its commit log) writes nothing twice. A
replay does rewrite the snapshot Parquet files before the driver sees they are committed; those
orphan files are never referenced and are removed by VACUUM.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cdc.model.errors import ConfigError
from cdc.model.positions import ChangePosition
from cdc.model.schema import TableId, TableSchema
from cdc.spark import faults
from cdc.spark.handoff import MANIFEST_COLUMN
from cdc.spark.state import StateStore
from sinks.base import WriteResult
from sinks.delta.files import (
    StagedFile,
    commit_change_files,
    commit_snapshot_files,
    handoff_options,
    read_change_files,
)
from sinks.delta.follower import MirrorFollower
from sinks.delta.sink import DeltaSink

log = logging.getLogger(__name__)


@dataclass
class BatchRecord:
    """What one ``foreachBatch`` call committed (False everywhere on a replay)."""

    batch_id: int
    snapshot: dict[str, dict[str, bool]] = field(default_factory=dict)  # table -> kind -> committed
    changes: list[WriteResult] = field(default_factory=list)
    snapshot_rows: int = 0
    change_rows: int = 0

    @property
    def wrote(self) -> bool:
        return any(any(k.values()) for k in self.snapshot.values()) or any(
            r.mirror_written or r.changelog_written for r in self.changes)


class BatchWriter:
    """The ``foreachBatch`` function: split a batch by table and write each to the sink.

    Args:
        schemas: the captured tables.
        sink: the sink (keyed by the query's stable identity).
        store: the source's state directory (for fault injection in tests).
    """

    def __init__(self, schemas: dict[TableId, TableSchema], sink: DeltaSink, store: StateStore | None = None,
                 *, async_mirror: bool = True) -> None:
        self.schemas = schemas
        self.sink = sink
        self.store = store
        self.batches: list[BatchRecord] = []
        self.follower: MirrorFollower | None = None
        if async_mirror:
            check = (lambda: faults.check(store, "mirror")) if store is not None else None
            self.follower = MirrorFollower(sink, schemas, before_merge=check)
            self.follower.recover()

    def close(self) -> None:
        """Wait until the mirrors hold every batch written so far (end of a run).

        Raises:
            Exception: a background MERGE failed (the next start recovers the mirror).
        """
        if self.follower is not None:
            self.follower.close()

    def source_options(self) -> dict[str, str]:
        """Options the ``mysql-cdc`` source needs so that its snapshot rows arrive as files."""
        return handoff_options(self.sink.config)

    def __call__(self, df: Any, batch_id: int) -> None:
        if MANIFEST_COLUMN not in df.columns:
            raise ConfigError("the mysql-cdc stream has no snapshot_files column: give the source "
                              "BatchWriter.source_options() so that snapshot rows arrive as files")
        record = BatchRecord(batch_id)
        # One Spark job. With the hand-off every row is a manifest: the tasks wrote the data.
        snapshot, changes = self._manifests(df.toArrow())
        if snapshot:
            if self.follower is not None:
                self.follower.drain()  # the mirror takes every table's rows in batch order
            self._commit_snapshot(snapshot, record)
        for table_id, staged in changes.items():
            schema = self.schemas[table_id]
            written = commit_change_files(self.sink.config, schema, staged, self.sink.query_id, batch_id)
            mirrored = self.follower is None and self.sink.write_mirror(
                schema, read_change_files(self.sink.config, schema, staged), batch_id)
            count = sum(f.num_records for f in staged)
            record.change_rows += count
            record.changes.append(WriteResult(str(table_id), batch_id, mirrored, written, count))
        if self.follower is not None:
            self.follower.submit(batch_id, dict(changes))  # the follower reads the files itself
        self.batches.append(record)
        log.info("batch %d: %d snapshot rows, %d change rows%s", batch_id, record.snapshot_rows,
                 record.change_rows, "" if record.wrote or not (record.snapshot_rows or record.change_rows)
                 else " (replayed: already committed, nothing written)")
        if self.store is not None:
            faults.check(self.store, "after_sink_commit")

    def _manifests(self, manifests: pa.Table) -> tuple[dict[str, list[StagedFile]], dict[TableId, list[StagedFile]]]:
        """The batch's handed-off files: snapshot files per table name, change files per table
        in binlog order (by their first change: the stream tasks of a split slice read disjoint
        pieces, and a task writes its files in order)."""
        snapshot: dict[str, list[StagedFile]] = {}
        changes: dict[TableId, list[tuple[tuple[int, int, int], StagedFile]]] = {}
        for text, source in zip(manifests[MANIFEST_COLUMN].to_pylist(), manifests["source"].to_pylist(), strict=True):
            for f in json.loads(text):
                staged = StagedFile.from_dict(f)
                if staged.stream == "changes":
                    first = ChangePosition(source["file"], source["pos"], source["row"]).sort_key()
                    changes.setdefault(TableId.parse(staged.table), []).append((first, staged))
                else:
                    snapshot.setdefault(staged.table, []).append(staged)
        ordered = {t: [f for _, f in sorted(files, key=lambda pair: pair[0])] for t, files in changes.items()}
        return snapshot, ordered

    def _commit_snapshot(self, by_table: dict[str, list[StagedFile]], record: BatchRecord) -> None:
        """Commit the files the emit tasks wrote, one transaction per table and kind."""
        for name, staged_files in sorted(by_table.items()):
            schema = self.schemas[TableId.parse(name)]
            committed = commit_snapshot_files(self.sink.config, schema, staged_files, self.sink.query_id,
                                              record.batch_id)
            record.snapshot[name] = {str(kind): bool(done) for kind, done in committed.items()}
            record.snapshot_rows += sum(f.num_records for f in staged_files if f.kind == "mirror")
