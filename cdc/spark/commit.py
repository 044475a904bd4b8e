"""The ``foreachBatch`` function: commit each micro-batch to every sink, exactly once.

Runs on the driver. The stream's rows are manifests (cdc/spark/layout.py): every one says what a
sink's writer staged on an executor (:class:`sinks.base.Staged`). This module groups them by sink
and table (log changes in log order) and calls each sink's :meth:`~sinks.base.Sink.commit`, in
the job's ``sink:`` order. Each sink records what it committed by (job, batch id) on its own, so
a batch that Spark replays after a crash (committed to the sinks, but Spark had not yet written
its commit log), or a crash between two sinks' commits, commits each sink exactly once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cdc.model.errors import ConfigError
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from cdc.spark.layout import MANIFEST_COLUMN
from sinks.base import Committed, Sink, Staged, TableBatch

log = logging.getLogger(__name__)


@dataclass
class BatchRecord:
    """What one ``foreachBatch`` call did.

    Attributes:
        batch_id: the micro-batch id.
        committed: per sink (in the job's order), what it committed for each table.
        snapshot_rows: snapshot rows in the batch.
        change_rows: log change rows in the batch.
        tables: per table (``db.table``), its snapshot rows and log change rows in the batch.
            Counted from the writers' manifests (each knows how many rows it staged), so no
            row passes through the driver.
        committed_ms: when every sink had committed the batch (epoch milliseconds).
    """

    batch_id: int
    committed: list[list[Committed]] = field(default_factory=list)
    snapshot_rows: int = 0
    change_rows: int = 0
    tables: dict[str, tuple[int, int]] = field(default_factory=dict)
    committed_ms: int = 0

    @property
    def wrote(self) -> bool:
        """False when every sink already held the batch (a replay) or it was empty."""
        return any(c.snapshot or c.changes for per_sink in self.committed for c in per_sink)


class BatchCommitter:
    """The ``foreachBatch`` function of a job.

    Args:
        schemas: the captured tables.
        sinks: the job's sinks, in ``sink:`` order (opened by the caller).
        hooks: crash points for tests (``between_sinks``, ``after_sink_commit``).
        on_commit: called with each batch's record once every sink committed it (the job's
            progress counters); it must not raise.
    """

    def __init__(self, schemas: dict[TableId, TableSchema], sinks: Sequence[Sink], hooks: Hooks = NO_HOOKS,
                 on_commit: Callable[[BatchRecord], None] | None = None) -> None:
        self.schemas = schemas
        self.sinks = list(sinks)
        self.hooks = hooks
        self.on_commit = on_commit
        self.batches: list[BatchRecord] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        if MANIFEST_COLUMN not in df.columns:
            raise ConfigError("the stream carries rows, not manifests of staged rows: build the source "
                              "with the sinks' writers (SourceSpec.writers)")
        record = BatchRecord(batch_id)
        per_sink = self.group(df.toArrow(), record)  # one Spark job; the rows stayed on the executors
        for i, sink in enumerate(self.sinks):
            if i:
                self.hooks.reached("between_sinks")
            record.committed.append(sink.commit(batch_id, per_sink[i]))
        record.committed_ms = int(time.time() * 1000)
        self.batches.append(record)
        if self.on_commit is not None:
            self.on_commit(record)
        log.info("batch %d: %d snapshot rows, %d change rows%s", batch_id, record.snapshot_rows,
                 record.change_rows, "" if record.wrote or not (record.snapshot_rows or record.change_rows)
                 else " (replayed: already committed, nothing written)")
        self.hooks.reached("after_sink_commit")

    def group(self, manifests: pa.Table, record: BatchRecord) -> list[list[TableBatch]]:
        """The batch's staged sets per sink and table; changes in log order (the tasks of a cut
        slice stage disjoint pieces, each in order). The snapshot rows of a table that joined
        again travel as changes (:attr:`sinks.base.Staged.reads`) and are counted as snapshot
        rows in ``record``."""
        staged = [Staged.from_dict(s) for text in manifests[MANIFEST_COLUMN].to_pylist() for s in json.loads(text)]
        out: list[dict[str, TableBatch]] = [{} for _ in self.sinks]
        reads: dict[str, int] = {}
        for s in sorted(staged, key=lambda s: (s.stream != "snapshot", s.first)):
            batch = out[s.sink].setdefault(s.table, TableBatch(self.schemas[TableId.parse(s.table)]))
            if s.stream == "snapshot":
                batch.snapshot.extend(s.items)
                batch.snapshot_rows += s.rows
            else:
                batch.changes.extend(s.items)
                batch.change_rows += s.rows
                if s.reads and s.sink == 0:
                    reads[s.table] = reads.get(s.table, 0) + s.rows
        for batch in out[0].values() if out else ():
            name = str(batch.schema.table_id)
            snapshot, changes = batch.snapshot_rows + reads.get(name, 0), batch.change_rows - reads.get(name, 0)
            record.snapshot_rows += snapshot
            record.change_rows += changes
            record.tables[name] = (snapshot, changes)
        return [list(tables.values()) for tables in out]

    def close(self) -> None:
        """Wait until every sink's background work is done (the end of a run).

        Raises:
            Exception: what a sink's background work raised (its next start recovers).
        """
        errors = []
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # close every sink; report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]
