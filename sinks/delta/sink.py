"""The Delta sink (``type: delta``): the Sink contract over a mirror and a changelog per table.

Executor side (:class:`~sinks.delta.files.DeltaFileWriter`): snapshot rows become Parquet files
of the mirror and the changelog, change rows files of the changelog (and, for a mirror with
deletion vectors, mirror files of the same rows reduced per key), written under each table's
directory and not yet part of any Delta version.

Driver side (:class:`DeltaSink`), once per batch:

* snapshot files are committed in one Delta transaction per table and kind, carrying the app
  transaction ``(spark-cdc/<job>/snapshot, batch id)``;
* change files are committed to the changelog in log order, carrying
  ``(spark-cdc/<job>/batch, batch id)``; the mirror MERGE follows in a background thread
  (:mod:`sinks.delta.follower`; ``async_mirror: false`` MERGEs inline).

Every commit first reads its table's app-transaction version and does nothing when the table
already holds the batch: a replayed batch writes nothing twice, and a batch whose commit was cut
short between two tables completes on replay. Files of a replay that are not committed stay
orphans that no Delta version references (VACUUM removes them). After a crash the mirror
catches up from the changelog (:meth:`DeltaSink.open`).

Schema changes: change files written after a DDL carry the table's new sink schema
(:class:`~sinks.delta.files.StagedFile`), and so does a DDL handed over without rows
(:class:`~sinks.base.SchemaStep`: the batch's log slice holds the DDL, maybe no change after it).
Before committing the batch the sink waits for the mirror follower and for the background's
maintenance of the changelogs (:mod:`sinks.delta.maintenance`), then evolves the changelog and
the mirror to the newest (:mod:`sinks.delta.evolve`: added columns, widened types) and keeps it as
the table's current schema, which the tables also record for a restart. A DDL writes no
changelog row.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any, ClassVar

from cdc.model.config import SinkConfig
from cdc.model.errors import ConfigError
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from sinks.base import Committed, SchemaStep, Sink, SinkWriter, TableBatch, staged_files
from sinks.changes import changelog_schema, mirror_schema
from sinks.delta.catalog import Registration, check_names, names_recorded, names_recorded_in
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.evolve import current_schema, ensure_table, has_lineage
from sinks.delta.files import (
    DeltaFileWriter,
    StagedFile,
    commit_change_files,
    commit_snapshot_files,
)
from sinks.delta.follower import MirrorFollower, merge_into_mirror
from sinks.delta.maintenance import Maintainer
from sinks.delta.restage import restage
from sinks.delta.tables import count_rows, open_table

log = logging.getLogger(__name__)


class DeltaSink(Sink):
    """Mirror + changelog Delta tables per source table, exactly once per batch."""

    name: ClassVar[str] = "delta"
    config_class: ClassVar[type[SinkConfig]] = DeltaSinkConfig

    def __init__(self, config: SinkConfig, job_id: str, spark: Any | None = None,
                 hooks: Hooks = NO_HOOKS) -> None:
        if not isinstance(config, DeltaSinkConfig):
            raise ConfigError(f"the delta sink needs a DeltaSinkConfig, not {type(config).__name__}")
        super().__init__(config, job_id, spark, hooks)
        self.delta = config
        self.tables = DeltaTables(config, job_id, spark, hooks)
        self.maintainer = Maintainer(self.tables, hooks, background=True)
        self.follower: MirrorFollower | None = None
        self.current: dict[TableId, TableSchema] = {}  # each table's sink schema (grows with DDL)
        self.registration: Registration | None = None  # the tables' names, registered in the background

    def describe(self) -> str:
        return f"delta at {self.delta.path} ({self.tables.engine_name})"

    def needs_spark(self, schemas: dict[TableId, TableSchema], catalog: str | None) -> bool:
        """delta-spark's engine merges in the JVM; tables by name need the catalog unless the own
        catalog records them all already."""
        if self.delta.engine == "delta-spark":
            return True
        return self.delta.register_tables and (catalog is None or not names_recorded_in(catalog, self.delta, schemas))

    def writer(self) -> SinkWriter:
        """The tasks' writer; after :meth:`open`, it also stages the change rows reduced per key for
        the mirrors that merge that (:meth:`DeltaTables.reduces_in_tasks`)."""
        reduced = frozenset(str(t) for t, s in self.current.items() if self.tables.reduces_in_tasks(s))
        return DeltaFileWriter(self.delta, reduced)

    def open(self, schemas: dict[TableId, TableSchema]) -> None:
        register = False
        if self.delta.register_tables and self.spark is not None:
            if names_recorded(self.spark, self.delta, schemas):
                log.info("the mirrors and changelogs of %d table(s) are registered by name already (the catalog's "
                         "record)", len(schemas))
            else:  # a name taken elsewhere is refused here: nothing is written
                register = check_names(self.spark, self.delta, schemas)
        self.current = {t: self._recorded(s) for t, s in schemas.items()}
        for schema in self.current.values():  # the tables exist from the start, so names resolve
            self._ensure(schema)
            self.maintainer.prepare_mirror(schema.table_id)  # before any MERGE (a properties commit)
        if register:  # in the background: nothing of the job reads the names
            self.registration = Registration(self.spark, self.delta, schemas)
        if self.delta.async_mirror:
            self.follower = MirrorFollower(self.tables, self.current, hooks=self.hooks, maintainer=self.maintainer)
            try:
                self.follower.recover()
            except BaseException:  # no registration outlives a failed open (a retry registers again)
                if self.registration is not None:
                    with contextlib.suppress(BaseException):
                        self.registration.close()
                raise

    def _recorded(self, schema: TableSchema) -> TableSchema:
        """The sink schema the changelog has (its record, or the schema of a rewrite committed just
        before a crash: :func:`current_schema`), else ``schema``: after a lenient DROP COLUMN the
        source's catalog lacks a column the sink tables keep."""
        table = open_table(self.delta.uri(schema.table_id, "changelog"), self.delta.storage_options)
        recorded = current_schema(table) if table is not None else None
        return recorded if recorded is not None and recorded.table_id == schema.table_id else schema

    def _ensure(self, schema: TableSchema) -> None:
        """Create, or evolve to ``schema``, the table's mirror and changelog."""
        ensure_table(self.delta.uri(schema.table_id, "mirror"), self.delta.storage_options, schema,
                     "mirror", mirror_schema(schema), self.hooks)
        ensure_table(self.delta.uri(schema.table_id, "changelog"), self.delta.storage_options, schema,
                     "changelog", changelog_schema(schema), self.hooks)

    def _evolve(self, batch: TableBatch) -> TableSchema:
        """The table's sink schema for this batch: the newest that its staged files carry.

        A newer one than the table's current schema evolves the changelog and the mirror first
        (after the follower has merged what it holds, so no MERGE runs into the schema change).
        """
        table_id = batch.schema.table_id
        if table_id not in self.current:  # a table added to the running job: its first batch
            self._ensure(batch.schema)
            self.maintainer.prepare_mirror(table_id)  # the follower has no work for it yet
        current = self.current.setdefault(table_id, batch.schema)
        files = [_tagged(d) for d in (*batch.snapshot, *batch.changes)]
        tagged = max((f for f in files if f.schema is not None), key=lambda f: f.version, default=None)
        wanted = tagged.table_schema() if tagged is not None else None
        if wanted is None or wanted == current or (
                not has_lineage(wanted) and not set(current.column_names) <= set(wanted.column_names)):
            return current  # no change, or files of an older version (a replay): read as current
        if self.follower is not None:
            self.follower.drain()
        self.maintainer.drain()  # a compaction of the changelog conflicts with its new schema
        log.info("%s: sink schema version %d: columns %s", table_id, tagged.version if tagged else 0,
                 wanted.column_names)
        # the changelog first: a restart reads the sink schema back from it (open), and evolves the
        # mirror forward to it when a crash came in between
        ensure_table(self.delta.uri(table_id, "changelog"), self.delta.storage_options, wanted, "changelog",
                     changelog_schema(wanted), self.hooks)
        self.hooks.reached("sink_evolve")  # crash tests: the changelog evolved, the mirror not yet
        ensure_table(self.delta.uri(table_id, "mirror"), self.delta.storage_options, wanted, "mirror",
                     mirror_schema(wanted), self.hooks)
        self.current[table_id] = wanted
        return wanted

    def commit(self, batch_id: int, tables: list[TableBatch]) -> list[Committed]:
        self.maintainer.raise_error()  # a changelog's maintenance failed in the background
        if self.registration is not None:
            self.registration.raise_error()  # so did registering the names: nothing of this batch is written
        drained = self.follower is None or any(t.snapshot for t in tables)
        if self.follower is not None and drained:
            self.follower.drain()  # the mirror takes every table's rows in batch order
        out: list[Committed] = []
        follow: dict[TableId, list[StagedFile]] = {}
        for batch in sorted(tables, key=lambda b: b.schema.table_id):
            batch = replace(batch, schema=self._evolve(batch))
            batch = restage(self.delta, batch, batch.schema)  # evolve: files of older versions fit it
            snapshot = self._commit_snapshot(batch, batch_id)
            if snapshot:
                self.hooks.reached("sink_commit")  # crash tests: snapshot committed, changes not yet
            changes = [StagedFile.from_dict(d) for d in staged_files(batch.changes)]  # and their mirror files
            changelog = [f for f in changes if f.kind == "changelog"]
            written = bool(changelog) and commit_change_files(self.delta, batch.schema, changelog, self.job_id,
                                                              batch_id, self.hooks)
            if written:
                self.hooks.reached("sink_commit")  # crash tests: changelog committed, mirror not yet
            if changes and self.follower is None:
                merge_into_mirror(self.tables, batch.schema, [changes], batch_id)
            elif changes:
                follow[batch.schema.table_id] = changes
            out.append(Committed(str(batch.schema.table_id), snapshot, written))
            if snapshot or written:
                self.maintainer.wrote(batch.schema.table_id)
        if drained:
            self.maintainer.run_due()  # nothing else writes the mirrors until the follower gets work
        if self.follower is not None and follow:
            self.follower.submit(batch_id, dict(follow))  # the follower reads the files itself
        return out

    def _commit_snapshot(self, batch: TableBatch, batch_id: int) -> bool:
        """Commit the files the emit tasks wrote, one transaction per table and kind."""
        if not batch.snapshot:
            return False
        files = [StagedFile.from_dict(d) for d in batch.snapshot]
        done = commit_snapshot_files(self.delta, batch.schema, files, self.job_id, batch_id, self.hooks)
        return any(done.values())

    def close(self) -> None:
        try:
            if self.follower is not None:
                self.follower.close()
        finally:
            try:
                self.maintainer.close()
            finally:
                if self.registration is not None:
                    self.registration.close()

    def row_counts(self, schemas: dict[TableId, TableSchema]) -> dict[str, dict[str, int | None]]:
        def count(uri: str) -> int | None:
            try:
                return count_rows(uri, self.delta.storage_options)
            except Exception:  # not created yet (nothing written), or unreadable: the summary says "-"
                return None

        return {str(t): {"mirror rows": count(self.delta.uri(t, "mirror")),
                         "changelog rows": count(self.delta.uri(t, "changelog"))} for t in sorted(schemas)}


def _tagged(item: dict[str, Any]) -> StagedFile | SchemaStep:
    """A staged item with the sink schema and version it carries: a file, or a DDL without rows."""
    return SchemaStep.from_dict(item) if SchemaStep.is_step(item) else StagedFile.from_dict(item)
