"""The delta-spark engine: the same tables written with Spark's own Delta writer.

Used when ``io.delta`` classes are on the active Spark session's classpath (``engine: auto``) or
asked for (``engine: delta-spark``). Tables are laid out, created and checked exactly as the
delta-rs engine does (:mod:`sinks.delta.tables`, through delta-rs, which reads tables that
delta-spark writes); the batch reduction is the same Arrow code (:mod:`sinks.changes`). Only the
data commits go through Spark:

* mirror: ``DeltaTable.forPath(...).merge(...)`` with the SQL confs
  ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` set, so the MERGE commit records the
  app transaction (delta-spark itself skips a version it has seen). The mirror has deletion
  vectors enabled: a MERGE marks the changed rows deleted in their files and writes only the new
  rows, so its cost follows the changes, not the file sizes;
* changelog and snapshot appends: ``df.write.format("delta")`` with the ``txnAppId`` /
  ``txnVersion`` writer options.

Rows go to Spark with the table's own Spark schema (a naive Arrow timestamp is Delta's
``timestamp_ntz``). The writer works on its own child session (``newSession``): the transaction
confs it sets never leak into the job's session or another thread's writes.

Object-store credentials for Spark come from the Spark/Hadoop configuration; ``storage_options``
are used only by the delta-rs reads (table checks and the idempotency check).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableSchema
from cdc.model.spark_conf import SNAPSHOT_PARTITIONS
from sinks.changes import (
    DELETE_FLAG,
    changelog_schema,
    mirror_changes,
    mirror_schema,
    ops_are,
    snapshot_rows,
)
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.conflicts import MAX_REPLANS, Planned, SharedTableConflict, check_commits_since
from sinks.delta.evolve import ensure_table
from sinks.delta.tables import (
    TableKind,
    ensure_marked,
    is_committed,
    merge_predicate,
    mirror_key,
    quote,
)

log = logging.getLogger(__name__)

DELTA_CLASS = "io.delta.tables.DeltaTable"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
# Delta's exceptions for a commit that lost a race with another writer's (its own conflict check):
# the Concurrent* ones, a metadata or protocol change (a platform's SET TBLPROPERTIES), and a file
# of the version it read gone (a platform's compaction, then its VACUUM with no retention)
# (by class name or error class: they arrive as delta-spark's delta.exceptions.captured.*, whose
# text need not name the io.delta class)
LOST_RACE = re.compile(r"\b(Concurrent\w*Exception|MetadataChangedException|ProtocolChangedException)\b"
                       r"|\[DELTA_(CONCURRENT_\w+|METADATA_CHANGED|PROTOCOL_CHANGED)\b|FAILED_READ_FILE\.FILE_NOT_EXIST")


def _first_line(exc: BaseException) -> str:
    """The line of a Spark error that names it (py4j's carry the JVM's stack trace)."""
    text = str(exc)
    named = [line for line in text.splitlines() if LOST_RACE.search(line)]
    return (named or text.splitlines() or [type(exc).__name__])[0].strip()[:300]


def lost_race(exc: BaseException) -> bool:
    """Whether Spark's Delta write failed on another writer's commit (it may be run again)."""
    return LOST_RACE.search(f"{type(exc).__name__}: {exc}") is not None


def active_session() -> Any | None:
    """The active Spark session, or None (also when pyspark cannot be imported)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def delta_spark_available(spark: Any) -> bool:
    """True when ``spark``'s JVM can load ``io.delta`` classes and the ``delta`` module imports."""
    return importlib.util.find_spec("delta") is not None and jvm_has_class(spark, DELTA_CLASS)


def jvm_has_class(spark: Any, name: str) -> bool:
    """True when the JVM behind ``spark`` (a classic session; Connect has none) can load ``name``."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(name)
    except Exception:  # py4j raises Py4JJavaError for ClassNotFoundException
        return False
    return True


class DeltaSparkWriter:
    """Mirror MERGE and changelog appends through delta-spark."""

    def __init__(self, config: DeltaSinkConfig, spark: Any, hooks: Hooks = NO_HOOKS) -> None:
        self._config = config
        self._hooks = hooks
        self._spark = spark.newSession()
        # Delta replays a table's log in 50 partitions by default: 50 tasks per MERGE for a log
        # of a few files. One per task slot is enough; checkpoints keep the log short.
        slots = max(1, int(spark.sparkContext.defaultParallelism))
        self._spark.conf.set(SNAPSHOT_PARTITIONS, str(slots))
        self._schemas: dict[str, Any] = {}
        self._seen: dict[str, str] = {}  # each table's Delta schema when its Spark schema was read
        self._with_dv: set[str] = set()

    def _spark_schema(self, uri: str) -> Any:
        if uri not in self._schemas:
            self._schemas[uri] = self._spark.read.format("delta").load(uri).schema
        return self._schemas[uri]

    def _frame(self, uri: str, rows: pa.Table, extra: Any = None) -> Any:
        """``rows`` as a DataFrame with the table's Spark schema (plus ``extra`` fields)."""
        schema = self._spark_schema(uri)
        if extra is not None:
            from pyspark.sql.types import StructType

            schema = StructType([*schema.fields, *extra])
        return self._spark.createDataFrame(rows, schema=schema)

    def _deletion_vectors(self, uri: str) -> None:
        """Enable deletion vectors on a mirror once (MERGE then writes them); run again when
        another writer's commit (a platform's property change) took the version first."""
        if uri in self._with_dv:
            return
        for attempt in range(MAX_REPLANS + 1):
            props = self._spark.sql(f"SHOW TBLPROPERTIES delta.`{uri}`").collect()
            if any(r[0] == "delta.enableDeletionVectors" and r[1] == "true" for r in props):
                break
            try:
                self._spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
            except Exception as exc:
                if not lost_race(exc) or attempt == MAX_REPLANS:
                    raise
                continue
            self._schemas.pop(uri, None)
            break
        self._with_dv.add(uri)

    def _checked(
        self, schema: TableSchema, kind: TableKind, storage: pa.Schema, app: str, batch_id: int
    ) -> DeltaTable | None:
        uri = self._config.uri(schema.table_id, kind)
        table = ensure_table(uri, self._config.storage_options, schema, kind, storage)
        delta_schema = table.schema().to_json()
        if self._seen.get(uri) != delta_schema:  # evolved (a column added, dropped, renamed, widened)
            self._schemas.pop(uri, None)
            self._seen[uri] = delta_schema
        return None if is_committed(table, app, batch_id) else table

    def write_mirror(
        self, schema: TableSchema, batch: pa.Table, app: str, batch_id: int, append: bool
    ) -> bool:
        """Merge (or append an all-``r`` batch) into the mirror with Spark."""
        if batch.num_rows == 0:
            return False
        storage = mirror_schema(schema)
        table = self._checked(schema, "mirror", storage, app, batch_id)
        if table is None:
            return False
        uri = self._config.uri(schema.table_id, "mirror")
        self._deletion_vectors(uri)
        table.update_incremental()  # the job's own properties commit, if it made one
        planned = Planned.of(table)
        if append and ops_are(batch, {"r"}):
            self._committing(planned, app, lambda: self._append(uri, snapshot_rows(batch, storage), app, batch_id))
            return True
        from pyspark.sql.types import BooleanType, StructField

        delta_table = importlib.import_module("delta.tables").DeltaTable
        source = self._frame(uri, mirror_changes(batch, mirror_key(schema), storage),
                             [StructField(DELETE_FLAG, BooleanType(), False)])
        flag = f"s.{quote(DELETE_FLAG)}"
        values = {quote(c): f"s.{quote(c)}" for c in storage.names}

        def merge() -> None:
            with self._txn(app, batch_id):
                (
                    delta_table.forPath(self._spark, uri).alias("t")
                    .merge(source.alias("s"), merge_predicate(mirror_key(schema), not schema.primary_key))
                    .whenMatchedDelete(condition=flag)
                    .whenMatchedUpdate(condition=f"NOT {flag}", set=values)
                    .whenNotMatchedInsert(condition=f"NOT {flag}", values=values)
                    .execute()
                )

        self._committing(planned, app, merge)
        ensure_marked(table, app, batch_id)
        return True

    def write_changelog(self, schema: TableSchema, batch: pa.Table, app: str, batch_id: int) -> bool:
        """Append every event of ``batch`` to the changelog with Spark."""
        if batch.num_rows == 0:
            return False
        storage = changelog_schema(schema)
        table = self._checked(schema, "changelog", storage, app, batch_id)
        if table is None:
            return False
        uri = self._config.uri(schema.table_id, "changelog")
        self._committing(Planned.of(table), app, lambda: self._append(uri, batch.cast(storage), app, batch_id))
        return True

    def _committing(self, planned: Planned, app: str, write: Callable[[], None]) -> None:
        """Run Spark's ``write`` once the commits since ``planned`` are checked: Spark reads the
        newest version itself and follows a compaction or a property change, but would also write
        over a schema another writer changed (:func:`check_commits_since` stops there). A write
        that loses a race with another commit inside Spark (:func:`lost_race`: Delta's own conflict
        check, a metadata change such as a platform's SET TBLPROPERTIES, a file a VACUUM deleted
        meanwhile) is checked and run again."""
        self._hooks.reached("delta_planned")
        for attempt in range(MAX_REPLANS + 1):
            check_commits_since(planned, self._config.storage_options, app)
            try:
                write()
                return
            except Exception as exc:
                if not lost_race(exc):
                    raise
                if attempt == MAX_REPLANS:
                    raise SharedTableConflict(
                        f"other writers committed to {planned.uri} while each of {MAX_REPLANS + 1} attempts to commit "
                        f"the batch ran (the last: {_first_line(exc)}); nothing of it is committed: make the "
                        "maintenance that runs on the table less frequent, and keep its VACUUM's retention above an "
                        "hour, then restart the job (the batch is replayed)", uri=planned.uri) from exc
                log.info("%s: Spark's commit lost a race with another writer: checked and run again (%s)",
                         planned.uri, _first_line(exc))

    def _append(self, uri: str, rows: pa.Table, app: str, batch_id: int) -> None:
        (
            self._frame(uri, rows).write.format("delta").mode("append")
            .option("txnAppId", app).option("txnVersion", batch_id).save(uri)
        )

    @contextmanager
    def _txn(self, app: str, batch_id: int) -> Iterator[None]:
        conf = self._spark.conf
        conf.set(_TXN_APP_ID, app)
        conf.set(_TXN_VERSION, str(batch_id))
        try:
            yield
        finally:
            conf.unset(_TXN_APP_ID)
            conf.unset(_TXN_VERSION)
