"""The Sink contract: what the job asks of every sink, and the errors sinks raise.

A sink has two halves, because the rows of a snapshot must not pass through the driver:

* **executor side**, :class:`SinkWriter` (picklable): a Spark task hands it one table's change
  rows (:mod:`cdc.model.envelope` layout, log order) and the writer *stages* them where its
  driver side can find them (Parquet files under a Delta table, a file of encoded messages, ...).
  It returns small JSON descriptions of what it staged; they travel to the driver in the
  micro-batch instead of the rows. Staging is invisible to readers.
* **driver side**, :class:`Sink`: once per micro-batch, :meth:`Sink.commit` makes the batch's
  staged rows visible, **exactly once**: committing a batch the sink already committed (Spark
  replays a batch whose ``commits/N`` file is missing) changes nothing, and a batch half
  committed before a crash is completed by the replay. Each sink keeps its own record of the
  batches it committed, keyed by the job and the batch id; the job never tells it what happened
  before a crash. :meth:`Sink.open` recovers whatever a crash left behind before the first batch;
  :meth:`Sink.close` waits for work a sink does in the background.

Stream kinds: ``snapshot`` rows are a chunk's ``op='r'`` rows; the source guarantees their keys
are new to the sink (a key is read once, and no change of it flows before its chunk is emitted),
so a sink may append them. ``changes`` are log changes (c/u/d) of one batch, in log order per
table once sorted by their ``first`` position, which a sink applies by key (a mirror upserts and
deletes). The ``op='r'`` rows of a table that joined the job again (dropped and created again:
its sink tables may hold its keys already) come as ``changes`` too, marked
:attr:`Staged.reads` and sorted before the batch's changes of their keys: a sink upserts them
like any change, so no key is held twice.

Schema changes reach a sink with the rows: rows a dialect tagged (:func:`cdc.model.history.with_schema`)
carry their sink schema, schema version and, after a DDL, the DDL. A DDL in a batch's log slice
is also handed over where it lies, as a set of ``changes`` without a row (the table may see no
change after it for a long time): :meth:`SinkWriter.stage` stages it as one :class:`SchemaStep`
item, which the driver side applies (evolve its tables, publish the DDL) with no row to write.

Registered sinks: :mod:`sinks.registry`. A new sink is one module plus one registry line, and
the contract suite (tests/test_sink_contract.py) runs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pyarrow as pa

from cdc.model.config import SinkConfig
from cdc.model.errors import CdcError, Terminal
from cdc.model.history import tagged_change, tagged_schema
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema, schema_from_dict, schema_to_dict

StreamKind = Literal["snapshot", "changes"]


class SinkError(CdcError, Terminal):
    """A sink cannot write a batch; the message names the table and the fix."""


class SinkSchemaMismatch(SinkError):
    """An existing sink table does not have the schema or key the source table has now."""


class InvalidChangeBatch(SinkError):
    """A change batch breaks the contract (bad op, missing image, wrong columns)."""


class SinkWriter(ABC):
    """A sink's executor side: stages change rows (picklable; opens what it needs per call)."""

    def stage(self, schema: TableSchema, rows: pa.Table, stream: StreamKind) -> list[dict[str, Any]]:
        """Stage one table's change rows (what the job calls): :meth:`write` for rows; a set
        without a row that carries a DDL (a schema version's first appearance in the log, before
        any change under it) becomes one :class:`SchemaStep` item, nothing written.

        Raises:
            InvalidChangeBatch: the rows break the change-row contract.
        """
        if rows.num_rows:
            return self.write(schema, rows, stream)
        step = SchemaStep.of(rows)
        return [step.to_dict()] if step is not None else []

    @abstractmethod
    def write(self, schema: TableSchema, rows: pa.Table, stream: StreamKind) -> list[dict[str, Any]]:
        """Stage one table's change rows.

        Args:
            schema: the table.
            rows: change rows in log order (``snapshot``: all ``op='r'``).
            stream: ``snapshot`` or ``changes``.

        Returns:
            JSON-able descriptions of what was staged (empty when ``rows`` is empty).

        Raises:
            InvalidChangeBatch: the rows break the change-row contract.
        """


@dataclass(frozen=True)
class SchemaStep:
    """A DDL handed to a sink without rows: a staged item that holds no file (JSON-able).

    Attributes:
        version: the source schema version the DDL made.
        schema: the sink schema from then on (:func:`cdc.model.schema.schema_to_dict`).
        schema_change: the DDL as a sink publishes it (:meth:`cdc.model.history.SchemaChange.to_dict`).
    """

    version: int
    schema: dict[str, Any]
    schema_change: dict[str, Any]

    @classmethod
    def of(cls, rows: pa.Table) -> SchemaStep | None:
        """The step that rows a dialect tagged carry (None: not tagged, or with no DDL)."""
        tagged, change = tagged_schema(rows), tagged_change(rows)
        if tagged is None or change is None:
            return None
        return cls(tagged[1], schema_to_dict(tagged[0]), change.to_dict())

    def table_schema(self) -> TableSchema:
        """The sink schema from this step on."""
        return schema_from_dict(self.schema)

    def to_dict(self) -> dict[str, Any]:
        return {SCHEMA_STEP: True, "version": self.version, "schema": self.schema,
                "schema_change": self.schema_change}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaStep:
        return cls(int(d["version"]), dict(d["schema"]), dict(d["schema_change"]))

    @staticmethod
    def is_step(item: dict[str, Any]) -> bool:
        """Whether a staged item is a schema step (it names no file)."""
        return bool(item.get(SCHEMA_STEP))


SCHEMA_STEP = "schema_step"  # the key that marks a staged item as a SchemaStep


def staged_files(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The staged items that name files (schema steps left out)."""
    return [item for item in items if not SchemaStep.is_step(item)]


@dataclass(frozen=True)
class Staged:
    """One writer call's output, as it reaches the driver in a micro-batch (JSON-able).

    Attributes:
        sink: the index of the sink in the job's ``sink:`` list.
        table: the source table, ``db.table``.
        stream: ``snapshot`` or ``changes``.
        first: the log sort key of the first row (changes are committed in this order).
        rows: how many change rows were staged.
        items: the writer's descriptions.
        reads: ``changes`` that are snapshot rows (``op='r'``) of a table that joined again
            (upserted; counted as snapshot rows).
    """

    sink: int
    table: str
    stream: StreamKind
    first: tuple[int, ...]
    rows: int
    items: list[dict[str, Any]]
    reads: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = {"sink": self.sink, "table": self.table, "stream": self.stream, "first": list(self.first),
             "rows": self.rows, "items": self.items}
        if self.reads:
            d["reads"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Staged:
        return cls(int(d["sink"]), str(d["table"]), d["stream"], tuple(d["first"]), int(d["rows"]),
                   list(d["items"]), bool(d.get("reads", False)))


@dataclass
class TableBatch:
    """What one batch staged for one table, for one sink.

    Attributes:
        schema: the table.
        snapshot: descriptions of staged snapshot rows (any order).
        changes: descriptions of staged log changes, in log order; among them the
            :class:`SchemaStep` items of DDL handed over without rows (:func:`staged_files`
            leaves them out).
        snapshot_rows: how many snapshot rows they hold.
        change_rows: how many change rows they hold.
    """

    schema: TableSchema
    snapshot: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    snapshot_rows: int = 0
    change_rows: int = 0


@dataclass(frozen=True)
class Committed:
    """What :meth:`Sink.commit` did for one table: False parts were already committed (or
    empty): a replay commits nothing."""

    table: str
    snapshot: bool
    changes: bool


class Sink(ABC):
    """A sink's driver side (one object per job run and sink).

    Args:
        config: the validated ``sink:`` section (of :attr:`config_class`).
        job_id: the job's stable identity (derived from its checkpoint, the same across
            restarts, never Spark's run id): it keys the sink's record of committed batches.
        spark: the job's Spark session, for sinks that use Spark (None when not needed).
        hooks: crash points for tests (:mod:`cdc.model.hooks`); nothing in production.
    """

    name: ClassVar[str]
    """The ``sink.type`` this sink serves, and its registry key."""
    config_class: ClassVar[type[SinkConfig]]
    """Its ``sink:`` config model."""

    def __init__(self, config: SinkConfig, job_id: str, spark: Any | None = None,
                 hooks: Hooks = NO_HOOKS) -> None:
        if not job_id:
            raise SinkError("a sink needs a non-empty job id (the checkpoint's identity)")
        self.config = config
        self.job_id = job_id
        self.spark = spark
        self.hooks = hooks

    def needs_spark(self, schemas: dict[TableId, TableSchema], catalog: str | None) -> bool:
        """Whether :meth:`open` and :meth:`commit` need the job's Spark session for ``schemas``
        (driver). A ``--once`` run with nothing to do starts no Spark when no sink needs it.

        Args:
            schemas: the captured tables.
            catalog: the folder of the job's own catalog (a local job's), None for a shared one.
        """
        return False

    @abstractmethod
    def writer(self) -> SinkWriter:
        """The executor side, to pickle into the stream's tasks."""

    @abstractmethod
    def open(self, schemas: dict[TableId, TableSchema]) -> None:
        """Prepare for the first batch of a run: check or create what the tables need, and
        recover what a crash left behind (driver, before the query starts).

        Raises:
            SinkError: the sink cannot be written (the message names the fix).
        """

    @abstractmethod
    def commit(self, batch_id: int, tables: list[TableBatch]) -> list[Committed]:
        """Make a batch's staged rows visible, once (driver, inside ``foreachBatch``).

        Raises:
            SinkError: the batch cannot be committed; a retry of the batch may succeed.
        """

    def close(self) -> None:  # noqa: B027 - optional hook: most sinks have nothing running
        """Wait for background work (the end of a run). Raises what that work raised."""

    def row_counts(self, schemas: dict[TableId, TableSchema]) -> dict[str, dict[str, int | None]]:
        """What the sink holds per table, for a run's summary (``{"db.t": {"mirror": 5}}``; None
        where a table was not written yet). Never raises."""
        return {}

    def describe(self) -> str:
        """A short description for logs (never a secret)."""
        return self.name
