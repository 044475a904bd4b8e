"""What every sink offers the streaming job, and the errors sinks raise.

The job hands a sink, once per micro-batch and source table, the table's change rows as one
``pyarrow.Table`` in stream order (columns ``op``, ``before``, ``after``, ``source``, ``ts_ms``;
see :mod:`sinks.changes`). A sink keeps two things per table:

* the **mirror**: the source table's current rows, flat and typed;
* the **changelog**: every change event, appended once.

Writes are idempotent per micro-batch: replaying a batch that a sink already wrote (Spark
replays a batch whose ``commits/N`` file is missing) must change nothing. Each sink keeps its
own record of the batches it wrote; the job never has to tell it what happened before a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa

from cdc.model.errors import CdcError, Terminal
from cdc.model.schema import TableSchema


class SinkError(CdcError, Terminal):
    """A sink cannot write a batch; the message names the table and the fix."""


class SinkSchemaMismatch(SinkError):
    """An existing sink table does not have the schema or key the source table has now."""


class InvalidChangeBatch(SinkError):
    """A change batch breaks the contract (bad op, missing image, wrong columns)."""


@dataclass(frozen=True)
class WriteResult:
    """What one ``write_batch`` call did for one source table.

    Attributes:
        table: the source table, ``db.table``.
        batch_id: the micro-batch id.
        mirror_written: False when the mirror already held this batch (a replay).
        changelog_written: False when the changelog already held this batch.
        events: number of change rows in the batch.
    """

    table: str
    batch_id: int
    mirror_written: bool
    changelog_written: bool
    events: int


@runtime_checkable
class ChangeSink(Protocol):
    """A sink of change batches. Runs on the Spark driver, once per batch and table."""

    def write_batch(
        self, schema: TableSchema, changes: pa.Table, batch_id: int, *,
        snapshot_append: bool = False,
    ) -> WriteResult:
        """Apply one micro-batch of one table's changes to the mirror and the changelog.

        Args:
            schema: the source table's columns and primary key.
            changes: the batch's change rows in stream order.
            batch_id: Spark's micro-batch id (monotonic per query).
            snapshot_append: the caller vouches that an all-``r`` batch holds only keys the
                mirror does not have yet, so a sink may append instead of merging. A sink may
                ignore it; batches with other ops are always merged.

        Raises:
            InvalidChangeBatch: ``changes`` breaks the change-batch contract.
            SinkSchemaMismatch: an existing table no longer matches ``schema``.
        """
        ...

    def write_mirror(
        self, schema: TableSchema, changes: pa.Table, batch_id: int, *,
        snapshot_append: bool = False,
    ) -> bool:
        """Apply the batch to the mirror only; False when it was already applied (or is empty).

        Raises:
            InvalidChangeBatch: ``changes`` breaks the change-batch contract.
            SinkSchemaMismatch: the existing mirror no longer matches ``schema``.
        """
        ...

    def write_changelog(self, schema: TableSchema, changes: pa.Table, batch_id: int) -> bool:
        """Append the batch to the changelog only; False when it was already appended.

        Raises:
            InvalidChangeBatch: ``changes`` breaks the change-batch contract.
            SinkSchemaMismatch: the existing changelog no longer matches ``schema``.
        """
        ...
