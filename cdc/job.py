"""Job wiring: the ``mysql-cdc`` stream into the sinks, one ``foreachBatch`` call per batch.

Runs on the driver. The sink's commits are idempotent per (query, batch id), so a batch that
Spark replays after a crash (it committed to Delta but Spark had not yet written its commit
log) writes nothing twice.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow.compute as pc

from cdc import faults
from cdc.schema import TableId, TableSchema
from cdc.state import StateStore
from cdc.stream_layout import StreamLayout
from sinks.base import WriteResult
from sinks.delta import DeltaSink

log = logging.getLogger(__name__)


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
        self.results: list[WriteResult] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.toArrow()
        for table_id, schema in self.schemas.items():
            changes = self.layout.from_stream(table_id, rows)
            if changes.num_rows == 0:
                continue
            only_reads = pc.all(pc.equal(changes["op"], "r")).as_py()
            result = self.sink.write_batch(schema, changes, batch_id, snapshot_append=bool(only_reads))
            self.results.append(result)
        log.info("batch %d: %d change rows written", batch_id, rows.num_rows)
        if self.store is not None:
            faults.check(self.store, "after_sink_commit")
