"""The Delta tables of a job, written on the driver: a MERGE-maintained mirror and an append-only
changelog per source table.

:class:`DeltaTables` serves every table of a job (:class:`sinks.delta.sink.DeltaSink` and the
mirror follower use it). Two engines write the same tables:

* ``delta-rs`` (the ``deltalake`` package, no JVM): the default here, fully tested;
* ``delta-spark``: Spark's own Delta writer, used when ``io.delta`` classes are on the active
  session's classpath (see :mod:`sinks.delta.spark_engine`).

``engine: auto`` picks delta-spark when it is available, else delta-rs.

Mirror writes (per batch, per table): the batch is reduced to the last state of each touched key
(:func:`sinks.changes.mirror_changes`, vectorized; for a mirror with deletion vectors the stream's
tasks did that already: :meth:`DeltaTables.merge_staged`), then applied in one MERGE on the primary-key
columns: deleted keys are removed, the others updated or inserted. ``snapshot_append=True`` lets
an all-``r`` batch be appended instead (cheaper; the caller vouches that its keys are not in the
mirror yet). Changelog writes append every event as it came. Each write is one Delta commit
carrying the app transaction ``(app_id(query_id, "batch"), batch_id)``; see
:mod:`sinks.delta.tables` for how replays are recognised.

Bulk snapshot rows can skip the driver altogether: see :mod:`sinks.delta.files`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdc.model.errors import ConfigError
from cdc.model.history import tagged_schema
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from sinks.changes import (
    DELETE_FLAG,
    changelog_rows,
    changelog_schema,
    mirror_changes,
    mirror_schema,
    normalize,
    ops_are,
    snapshot_rows,
)
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.conflicts import replanning
from sinks.delta.deletion_vectors import DeletionVectorMerge, commit_rewrite
from sinks.delta.deletion_vectors import enabled as deletion_vectors_enabled
from sinks.delta.evolve import ensure_table
from sinks.delta.files import StagedFile, discard_files, local_dir
from sinks.delta.rewrite import rewrite_all
from sinks.delta.tables import (
    TableKind,
    app_id,
    commit_properties,
    ensure_marked,
    is_committed,
    merge_predicate,
    mirror_key,
    open_table,
    quote,
    stats_eligible,
)

T = TypeVar("T")


class TableWriter(Protocol):
    """One engine's two writes. Both receive a normalized batch (see ``sinks.changes``)."""

    def write_mirror(
        self, schema: TableSchema, batch: pa.Table, app: str, batch_id: int, append: bool
    ) -> bool:
        """Apply ``batch`` to the mirror unless already there; True when it committed."""
        ...

    def write_changelog(self, schema: TableSchema, batch: pa.Table, app: str, batch_id: int) -> bool:
        """Append ``batch`` (changelog rows, :func:`sinks.changes.changelog_rows`) to the changelog
        unless already there; True when it committed."""
        ...


class DeltaTables:
    """Every mirror and changelog of one job, written on the driver, idempotent per batch.

    Args:
        config: the sink configuration.
        query_id: a stable identity of the query, the same across restarts (e.g. derived from
            its checkpoint location), never Spark's run id: it keys the idempotency records.
        spark: the Spark session for the delta-spark engine; defaults to the active session.
        hooks: passed ``delta_planned`` between a write's read of its table and its commit.

    Raises:
        ConfigError: ``query_id`` is empty, or ``engine: delta-spark`` was asked for but its
            classes are not on the classpath.
    """

    def __init__(self, config: DeltaSinkConfig, query_id: str, spark: Any | None = None,
                 hooks: Hooks = NO_HOOKS) -> None:
        if not query_id:
            raise ConfigError("the Delta sink needs a non-empty query id (the checkpoint's identity)")
        self.config = config
        self.query_id = query_id
        self.app_id = app_id(query_id, "batch")
        self.engine_name, self._writer = _select_engine(config, spark, hooks)

    def write_mirror(
        self, schema: TableSchema, changes: pa.Table, batch_id: int, *, snapshot_append: bool = False
    ) -> bool:
        """Apply the batch to the mirror only. True when it committed, False when the mirror
        already held the batch or the batch is empty.

        Raises:
            InvalidChangeBatch: ``changes`` breaks the change-batch contract.
            SinkSchemaMismatch: the existing mirror no longer fits ``schema``.
        """
        tagged = tagged_schema(changes)
        schema = tagged[0] if tagged is not None else schema
        batch = normalize(changes, schema)
        return self._writer.write_mirror(schema, batch, self.app_id, batch_id, snapshot_append)

    def write_changelog(self, schema: TableSchema, changes: pa.Table, batch_id: int) -> bool:
        """Append the batch to the changelog only. True when it committed.

        Raises:
            InvalidChangeBatch: ``changes`` breaks the change-batch contract.
            SinkSchemaMismatch: the existing changelog no longer fits ``schema``.
        """
        tagged = tagged_schema(changes)
        schema, version = tagged if tagged is not None else (schema, 0)
        batch = changelog_rows(normalize(changes, schema), schema, version)
        return self._writer.write_changelog(schema, batch, self.app_id, batch_id)

    def reduces_in_tasks(self, schema: TableSchema) -> bool:
        """Whether the mirror of ``schema`` merges the tasks' reduction of its change rows
        (:meth:`merge_staged`): a table with a primary key, whose mirror exists and has deletion
        vectors, written by delta-rs."""
        if not isinstance(self._writer, DeltaRsWriter) or not schema.primary_key:
            return False
        table = open_table(self.config.uri(schema.table_id, "mirror"), self.config.storage_options)
        return table is not None and deletion_vectors_enabled(table)

    def merge_staged(self, schema: TableSchema, files: list[StagedFile], batch_id: int) -> bool | None:
        """Apply the tasks' reduction of one or more batches (their mirror files, in stream order,
        :func:`sinks.delta.files.write_mirror_effects`) to the mirror. True when it committed,
        False when the mirror already held ``batch_id`` (the files are then deleted), None when
        this mirror cannot take them (:meth:`reduces_in_tasks`: the caller merges the changelog's
        rows instead, and the files are deleted)."""
        done = self._writer.merge_staged(schema, files, self.app_id, batch_id) \
            if isinstance(self._writer, DeltaRsWriter) and schema.primary_key else None
        if not done:
            discard_files(self.config, schema, files)
        return done

    def batch_version(self, table_id: TableId, kind: TableKind) -> int | None:
        """The newest batch the mirror or changelog holds (its app transaction); None: none."""
        table = open_table(self.config.uri(table_id, kind), self.config.storage_options)
        version = table.transaction_version(self.app_id) if table is not None else None
        return None if version is None else int(version)


def _select_engine(config: DeltaSinkConfig, spark: Any | None, hooks: Hooks) -> tuple[str, TableWriter]:
    if config.engine == "delta-rs":
        return "delta-rs", DeltaRsWriter(config, hooks)
    from sinks.delta.spark_engine import DeltaSparkWriter, active_session, delta_spark_available

    session = spark if spark is not None else active_session()
    if session is not None and delta_spark_available(session):
        return "delta-spark", DeltaSparkWriter(config, session, hooks)
    if config.engine == "delta-spark":
        raise ConfigError(
            "sink.engine is 'delta-spark' but no Spark session with io.delta classes on its "
            "classpath is active: add delta-spark's jars (spark.jars.packages "
            "io.delta:delta-spark_2.13:<version>) or set sink.engine to 'delta-rs' or 'auto'",
            key="sink.engine",
        )
    return "delta-rs", DeltaRsWriter(config, hooks)


class DeltaRsWriter:
    """The delta-rs engine: MERGE and appends through the ``deltalake`` package.

    Each write reads its table, plans its commit on that version and commits; when another writer
    (a platform's OPTIMIZE, VACUUM, property change) committed first, the write is planned again
    on the newest version, or stops naming the commit it cannot reconcile
    (:func:`sinks.delta.conflicts.replanning`).
    """

    def __init__(self, config: DeltaSinkConfig, hooks: Hooks = NO_HOOKS) -> None:
        self._config = config
        self._hooks = hooks
        self._tables: dict[str, DeltaTable] = {}
        self._vectors = DeletionVectorMerge(config)

    def _table(self, schema: TableSchema, kind: TableKind, storage: pa.Schema) -> DeltaTable:
        uri = self._config.uri(schema.table_id, kind)
        table = self._tables.get(uri)
        if table is None:
            table = ensure_table(uri, self._config.storage_options, schema, kind, storage)
            self._tables[uri] = table
        else:
            table.update_incremental()
        return table

    def write_mirror(
        self, schema: TableSchema, batch: pa.Table, app: str, batch_id: int, append: bool
    ) -> bool:
        """Merge (or, for an all-``r`` batch with ``append``, append) into the mirror."""
        if batch.num_rows == 0:
            return False
        storage = mirror_schema(schema)
        return self._replanning(schema, "mirror", storage, app, batch_id,
                                lambda table: self._write_mirror(schema, table, batch, storage, app, batch_id, append))

    def _replanning(self, schema: TableSchema, kind: TableKind, storage: pa.Schema, app: str, batch_id: int,
                    write: Callable[[DeltaTable], T]) -> T:
        """``write`` on the table read now, planned again when another writer commits first."""
        return replanning(lambda: self._table(schema, kind, storage), write, self._config.storage_options, app,
                          f"{kind} of {schema.table_id}, batch {batch_id}", self._hooks)

    def _write_mirror(self, schema: TableSchema, table: DeltaTable, batch: pa.Table, storage: pa.Schema, app: str,
                      batch_id: int, append: bool) -> bool:
        if is_committed(table, app, batch_id):
            return False
        props = commit_properties(app, batch_id)
        if append and ops_are(batch, {"r"}):
            write_deltalake(table, snapshot_rows(batch, storage), mode="append",
                            commit_properties=props)
            return True
        key = mirror_key(schema)
        source = mirror_changes(batch, key, storage)
        if schema.primary_key and deletion_vectors_enabled(table):
            self._vectors.merge(schema, table, source, storage, app, batch_id)
            return True  # the changed rows hidden by deletion vectors, their new rows in new files
        commit = None if local_dir(table.table_uri) is None else \
            lambda staged, old: commit_rewrite(table, staged, old, app, batch_id)
        if rewrite_all(self._config, schema, table, source, storage, commit):
            return True  # every file held a changed key: rewritten file by file, in parallel
        _merge(table, source, key, storage.names, props, null_safe=not schema.primary_key)
        ensure_marked(table, app, batch_id)
        return True

    def merge_staged(self, schema: TableSchema, files: list[StagedFile], app: str, batch_id: int) -> bool | None:
        """:meth:`DeltaTables.merge_staged` (True, False or None as there)."""
        storage = mirror_schema(schema)

        def write(table: DeltaTable) -> bool | None:
            if not deletion_vectors_enabled(table):
                return None
            if is_committed(table, app, batch_id):
                return False
            self._vectors.merge_staged(schema, table, files, storage, app, batch_id)
            return True

        return self._replanning(schema, "mirror", storage, app, batch_id, write)

    def write_changelog(self, schema: TableSchema, batch: pa.Table, app: str, batch_id: int) -> bool:
        """Append every event of ``batch`` to the changelog."""
        if batch.num_rows == 0:
            return False
        storage = changelog_schema(schema)

        def write(table: DeltaTable) -> bool:
            if is_committed(table, app, batch_id):
                return False
            write_deltalake(table, batch.cast(storage), mode="append",
                            commit_properties=commit_properties(app, batch_id))
            return True

        return self._replanning(schema, "changelog", storage, app, batch_id, write)


def _merge(
    table: DeltaTable, source: pa.Table, key: tuple[str, ...], columns: list[str], props: Any,
    *, null_safe: bool = False,
) -> None:
    flag = f"s.{quote(DELETE_FLAG)}"
    values = {quote(c): f"s.{quote(c)}" for c in columns}
    # Not streamed, delta-rs derives a pruning predicate from the source's key statistics and
    # skips the target files outside it; streamed, it scans every file (a 2M-update catch-up at
    # TPC-DS SF100: driver peak 95-225 MiB higher, and slower). Keys with lossy
    # statistics (decimal(20,0) maxima clamped to the int64 range) stay streamed: pruning on
    # them would lose rows.
    streamed = not all(stats_eligible(source.schema.field(k).type) for k in key)
    (
        table.merge(source, merge_predicate(key, null_safe), source_alias="s", target_alias="t",
                    streamed_exec=streamed, commit_properties=props)
        .when_matched_delete(predicate=flag)
        .when_matched_update(values, predicate=f"NOT {flag}")
        .when_not_matched_insert(values, predicate=f"NOT {flag}")
        .execute()
    )
