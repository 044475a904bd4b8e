"""Job wiring: the ``mysql-cdc`` stream into the sinks, one ``foreachBatch`` call per batch.

Runs on the driver, except the snapshot writer (:func:`_write_snapshot_partition`), which runs
on executors:

* snapshot rows (``op='r'``, the bulk of an initial load) never pass through the driver:
  executors write them as Parquet files into the mirror and changelog directories, the driver
  commits each table's files in one Delta transaction (``sinks.delta_files``);
* change rows (c/u/d) are collected on the driver and MERGEd into the mirror, appended to the
  changelog (``sinks.delta``).

Both commits are idempotent per (query, batch id), so a batch that Spark replays after a crash
(it committed to Delta but Spark had not yet written its commit log) writes nothing twice. A
replay does rewrite the snapshot Parquet files before the driver sees they are committed; those
orphan files are never referenced and are removed by VACUUM.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from cdc import faults
from cdc.schema import TableId, TableSchema
from cdc.state import StateStore
from cdc.stream_layout import StreamLayout
from sinks.base import WriteResult
from sinks.delta import DeltaSink, DeltaSinkConfig
from sinks.delta_files import StagedFile, commit_snapshot_files, write_snapshot_files

log = logging.getLogger(__name__)

_FILE_SCHEMA = "file binary"
_FLUSH_ROWS = 131_072  # snapshot rows buffered per executor task before a Parquet file is written


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

    def __init__(self, schemas: dict[TableId, TableSchema], sink: DeltaSink, store: StateStore | None = None) -> None:
        self.schemas = schemas
        self.layout = StreamLayout(list(schemas.values()))
        self.sink = sink
        self.store = store
        self.batches: list[BatchRecord] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        record = BatchRecord(batch_id)
        df = df.persist()  # the source is read once; both passes below use the cached rows
        try:
            self._write_snapshot(df.where("op = 'r'"), record)
            changes = df.where("op != 'r'").toArrow()
            record.change_rows = changes.num_rows
            for table_id, schema in self.schemas.items():
                rows = self.layout.from_stream(table_id, changes)
                if rows.num_rows:
                    record.changes.append(self.sink.write_batch(schema, rows, batch_id))
        finally:
            df.unpersist()
        self.batches.append(record)
        log.info("batch %d: %d snapshot rows, %d change rows%s", batch_id, record.snapshot_rows,
                 record.change_rows, "" if record.wrote or not (record.snapshot_rows or record.change_rows)
                 else " (replayed: already committed, nothing written)")
        if self.store is not None:
            faults.check(self.store, "after_sink_commit")

    def _write_snapshot(self, reads: Any, record: BatchRecord) -> None:
        """Executors write snapshot rows as Parquet; the driver commits them per table."""
        writer = partial(_write_snapshot_partition, self.sink.config, self.layout, self.schemas)
        files = [pickle.loads(r.file) for r in reads.mapInArrow(writer, _FILE_SCHEMA).collect()]
        by_table: dict[str, list[StagedFile]] = {}
        for f in files:
            by_table.setdefault(f.table, []).append(f)
        for name, staged in sorted(by_table.items()):
            schema = self.schemas[TableId.parse(name)]
            committed = commit_snapshot_files(self.sink.config, schema, staged, self.sink.query_id, record.batch_id)
            record.snapshot[name] = {str(kind): bool(done) for kind, done in committed.items()}
            record.snapshot_rows += sum(f.num_records for f in staged if f.kind == "mirror")


def _write_snapshot_partition(config: DeltaSinkConfig, layout: StreamLayout, schemas: dict[TableId, TableSchema],
                              batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor: write one task's snapshot rows to Parquet, yield the staged-file descriptions."""
    pending: list[pa.RecordBatch] = []
    buffered = 0
    for batch in batches:
        pending.append(batch)
        buffered += batch.num_rows
        if buffered >= _FLUSH_ROWS:
            yield _flush(config, layout, schemas, pending)
            pending, buffered = [], 0
    if pending:
        yield _flush(config, layout, schemas, pending)


def _flush(config: DeltaSinkConfig, layout: StreamLayout, schemas: dict[TableId, TableSchema],
           batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    rows = pa.Table.from_batches(batches)
    staged: list[StagedFile] = []
    for table_id, schema in schemas.items():
        mine = layout.from_stream(table_id, rows)
        if mine.num_rows:
            staged.extend(write_snapshot_files(config, schema, mine))
    return pa.RecordBatch.from_pydict({"file": pa.array([pickle.dumps(f) for f in staged], pa.binary())})
