"""The Spark streaming source (Python Data Source API), one format per dialect: ``mysql-cdc``, ...

Two ways in:

* **The job** (cdc/app/runner.py) builds a typed :class:`SourceSpec` from the parsed YAML and
  registers :func:`packed_job_source` of it: the spec, sinks' writers included, reaches the driver
  planner and the executors as pickled objects. Nothing is parsed twice. (:func:`bound_source`
  is the same source as a class that holds the spec itself, for callers that have no schemas.)
* **A user's own query** registers :func:`data_source` and passes the ``source:`` keys as
  options (strings; ``tables`` a comma-separated or JSON list, ``chunk_key_columns`` and
  ``startup_offset`` JSON) plus ``state_dir`` and ``parallelism``::

      spark.dataSource.register(data_source("mysql"))
      df = (spark.readStream.format("mysql-cdc").option("hostname", "127.0.0.1")
            .option("username", "cdc").option("password", os.environ["MYSQL_PASSWORD"])
            .option("tables", "shop\\..*").option("state_dir", "/checkpoints/shop_state").load())

  The rows are Debezium-shaped change rows (cdc/spark/layout.py).

Where things run: ``schema()`` and the stream reader's ``initialOffset``/``latestOffset``/
``partitions``/``commit`` run on the driver (the planner, cdc/spark/planner.py); ``read()`` runs
on executors, one task per partition (cdc/spark/tasks.py).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from binlog.dialect import (
    Dialect,
    SupportsBatchCap,
    SupportsLogRelease,
    SupportsSchemaHistory,
    SupportsSplitSlices,
)
from binlog.registry import DIALECT_NAMES, config_class, create_dialect
from cdc.model.config import parse_section
from cdc.model.errors import ConfigError
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.positions import Offset, min_offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.layout import StreamLayout
from cdc.spark.offsets import Ranges, SourceOffset
from cdc.spark.packed import packed_source
from cdc.spark.planner import Planner, PlannerOptions
from cdc.spark.state import StateStore
from cdc.spark.tasks import (
    CdcPartition,
    EmitChunk,
    StageChunk,
    StreamSlice,
    TaskContext,
    run_partition,
)
from chunking.backfill import Region
from chunking.splitter import SplitterOptions
from sinks.base import SinkWriter

log = logging.getLogger(__name__)

DEFAULT_CHUNKS_PER_TASK = 16  # chunks_per_batch defaults to this x parallelism
HOLD_FILE = "hold.json"  # in the state directory: while it exists, no new batch is planned
SNAPSHOT_MODES = ("initial", "snapshot")  # the startup modes that snapshot the tables
_JSON_OPTIONS = ("chunk_key_columns", "startup_offset")
_EXTRA_OPTIONS = ("state_dir", "parallelism")


@dataclass(frozen=True)
class SourceSpec:
    """Everything one stream needs on the driver and the executors (typed, picklable).

    Attributes:
        dialect: the source's dialect (holds the validated ``source:`` config).
        state_dir: the state directory the offsets refer to (kept next to the checkpoint).
        parallelism: tasks per batch.
        writers: the sinks' executor sides; rows are staged by them (empty: rows flow).
        hooks: crash points for tests.
        schemas: the captured tables, as the job discovered and checked them (None: the source
            discovers them and runs the start-up checks itself when the query starts).
    """

    dialect: Dialect
    state_dir: str
    parallelism: int = 2
    writers: tuple[SinkWriter, ...] = ()
    hooks: Hooks = field(default=NO_HOOKS)
    schemas: dict[TableId, TableSchema] | None = None

    @classmethod
    def from_options(cls, dialect: str, options: dict[str, str]) -> SourceSpec:
        """A spec from Spark reader options (a user's ``readStream.format(...).option(...)``).

        Raises:
            ConfigError: an option is missing or invalid (named as in the job config).
        """
        opts = {k: v for k, v in options.items() if k != "path"}
        extra = {k: opts.pop(k) for k in _EXTRA_OPTIONS if k in opts}
        if "state_dir" not in extra:
            raise ConfigError("option state_dir is required: a directory kept next to the checkpoint "
                              "(the job uses <checkpoint>_state)")
        source: dict[str, Any] = dict(opts)
        if "tables" in source:
            raw = source["tables"].strip()
            source["tables"] = json.loads(raw) if raw.startswith("[") else [t.strip() for t in raw.split(",") if t.strip()]
        for key in _JSON_OPTIONS:
            if key in source:
                source[key] = json.loads(source[key])
        config = parse_section(config_class(dialect), {**source, "type": dialect}, "source")
        try:
            parallelism = int(extra.get("parallelism", "2"))
        except ValueError:
            raise ConfigError(f"option parallelism: {extra['parallelism']!r} is not a number") from None
        return cls(create_dialect(config), extra["state_dir"], max(1, parallelism))

    @property
    def snapshot(self) -> bool:
        return self.dialect.config.startup_mode in SNAPSHOT_MODES


def table_schemas(dialect: Dialect, check: bool = True) -> dict[TableId, TableSchema]:
    """Discover the captured tables and run the start-up checks (driver).

    Raises:
        CdcError: a start-up check failed (the message names the fix).
    """
    config = dialect.config
    with contextlib.closing(dialect.connect()) as conn:
        if check:
            dialect.check_source(conn)
        tables = dialect.discover_tables(conn, config.tables)
        schemas = {t: dialect.table_schema(conn, t) for t in tables}
    if config.startup_mode in SNAPSHOT_MODES:
        for schema in schemas.values():
            dialect.chunk_key(schema)  # NoChunkKey names the fix
    return schemas


class CdcDataSource(DataSource):
    """``spark.readStream.format("<dialect>-cdc")``: a snapshot plus the change log as Debezium rows."""

    dialect_name: ClassVar[str] = ""
    spec: ClassVar[SourceSpec | None] = None  # set by bound_source: the job's typed spec

    @classmethod
    def name(cls) -> str:
        return f"{cls.dialect_name}-cdc"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        bound = type(self).spec
        self.source = bound if bound is not None else SourceSpec.from_options(self.dialect_name, dict(options))
        self._schemas: dict[TableId, TableSchema] | None = None

    def table_schemas(self) -> dict[TableId, TableSchema]:
        if self._schemas is None:
            self._schemas = self.source.schemas if self.source.schemas is not None \
                else table_schemas(self.source.dialect)
        return self._schemas

    def layout(self) -> StreamLayout:
        return StreamLayout(list(self.table_schemas().values()), manifests=bool(self.source.writers))

    def schema(self) -> Any:
        return self.layout().spark_schema()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return CdcStreamReader(self.source, self.table_schemas(), self.layout())


def data_source(dialect: str) -> type[CdcDataSource]:
    """The data source class of a dialect (``mysql`` -> format ``mysql-cdc``), for
    ``spark.dataSource.register``."""
    if dialect not in DIALECT_NAMES:
        raise ConfigError(f"no dialect {dialect!r}; known: {', '.join(DIALECT_NAMES)}")
    return type(f"{dialect.title()}CdcDataSource", (CdcDataSource,), {"dialect_name": dialect})


def bound_source(spec: SourceSpec) -> type[CdcDataSource]:
    """A data source class carrying ``spec``; Spark pickles the class, spec included, to the
    Python processes that plan and read the stream."""
    return type(f"Bound{spec.dialect.name.title()}CdcDataSource", (CdcDataSource,),
                {"dialect_name": spec.dialect.name, "spec": spec})


def packed_job_source(spec: SourceSpec) -> type[DataSource]:
    """The data source a job registers (``spec.schemas`` known): a :mod:`cdc.spark.packed` class
    carrying the stream's schema and ``spec`` as bytes, so that Spark's planner processes that
    ask for the schema or for the executors' read function skip this module's imports; its
    driver side is :func:`stream_reader`, its tasks run :func:`task_reader`."""
    return packed_source(f"{spec.dialect.name}-cdc", job_layout(spec).spark_schema(), stream_reader,
                         task_reader, spec)


def job_layout(spec: SourceSpec) -> StreamLayout:
    """The stream's columns for a spec whose tables the job discovered (``spec.schemas``)."""
    if spec.schemas is None:
        raise ValueError("a job's source needs the spec's schemas (the job's discovered tables)")
    return StreamLayout(list(spec.schemas.values()), manifests=bool(spec.writers))


def stream_reader(spec: SourceSpec) -> CdcStreamReader:
    """The stream reader of ``spec``, as :func:`bound_source`'s data source builds it."""
    reader = bound_source(spec)({}).streamReader(None)
    assert isinstance(reader, CdcStreamReader)
    return reader


def task_reader(spec: SourceSpec) -> Callable[[InputPartition], Iterator[pa.RecordBatch]]:
    """``read`` of :func:`stream_reader`'s reader, built without its driver side (executors):
    no planner, and the schema history the driver started is only bound."""
    assert spec.schemas is not None
    context = task_context(spec, spec.schemas, job_layout(spec))
    if isinstance(spec.dialect, SupportsSchemaHistory):
        spec.dialect.bind_schema_history(context.store)
    return functools.partial(read_partition, context)


def read_partition(context: TaskContext, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The batches of ``partition``'s tasks (executors)."""
    assert isinstance(partition, CdcPartition)
    return run_partition(partition, context)


def task_context(spec: SourceSpec, schemas: dict[TableId, TableSchema], layout: StreamLayout) -> TaskContext:
    """What the tasks of ``spec``'s stream need."""
    return TaskContext(dialect=spec.dialect, schemas=schemas, store=StateStore(spec.state_dir), layout=layout,
                       writers=spec.writers, hooks=spec.hooks)


class CdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The enumerator on the driver (offsets, plans) and the split reader on executors."""

    def __init__(self, spec: SourceSpec, schemas: dict[TableId, TableSchema], layout: StreamLayout) -> None:
        self.spec = spec
        config = spec.dialect.config
        self.context = task_context(spec, schemas, layout)
        if isinstance(spec.dialect, SupportsSchemaHistory):  # DDL history in the state directory
            spec.dialect.use_schema_history(self.context.store, schemas)
        options = PlannerOptions(
            chunks_per_batch=config.chunks_per_batch or DEFAULT_CHUNKS_PER_TASK * spec.parallelism,
            warmup_chunks=spec.parallelism,
            splitter=SplitterOptions(chunk_size=config.chunk_size,
                                     distribution_factor_lower=config.distribution_factor_lower,
                                     distribution_factor_upper=config.distribution_factor_upper),
            snapshot=spec.snapshot, stream=config.startup_mode != "snapshot",
            backfill_skip=config.backfill_skip)
        self.planner = Planner(spec.dialect, schemas, self.context.store, options)
        self.target: Offset | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("planner", None)  # driver-only, holds a connection
        return state

    def _offset(self, d: dict[str, Any]) -> SourceOffset:
        return SourceOffset.from_dict(d, self.spec.dialect.offset_from_dict)

    # --- driver ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial().to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxBytes(source.max_batch_bytes)`` when the dialect caps its batches (driver)."""
        dialect = self.spec.dialect
        cap = dialect.max_batch_bytes() if isinstance(dialect, SupportsBatchCap) else None
        return ReadMaxBytes(cap) if cap else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The next batch's end (driver, once per batch). Spark passes the default read limit,
        or ``ReadAllAvailable`` where its trigger wants everything (``Trigger.Once``).

        While the state directory holds :data:`HOLD_FILE` (the job is about to stop the query to
        start another), it plans nothing: the running batch ends and the query idles."""
        if self.context.store.exists(HOLD_FILE):
            return start
        begin = self._offset(start)
        self.spec.hooks.reached("plan")
        self.planner.forget_emitted(begin)  # `start` ends the last committed batch
        self._join_schema_history(begin)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        return self.planner.plan(begin, self.target, max_bytes).to_dict()

    def _join_schema_history(self, start: SourceOffset) -> None:
        """Give each table that joins the offsets with this plan (``start``, the newest offset in
        Spark's log, names none of them) a schema version of its definition now, where its stored
        history ends with another one: a driver that had started it (version 0 when its query
        began) was killed before any batch read it, and a DDL came while it was down; or the table
        was dropped and created again (driver; a table an offset names has its DDL followed)."""
        dialect = self.spec.dialect
        joining = [s for t, s in sorted(self.context.schemas.items()) if str(t) not in start.tables]
        if joining and isinstance(dialect, SupportsSchemaHistory):
            dialect.join_schema_history(joining, lambda: dialect.current_offset(self.planner.connection()))

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.spec.dialect.current_offset(self.planner.connection())
        log.info("available-now run: stops at %s once the snapshot is done", self.target)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return plan_partitions(self._offset(start), captured(self._offset(end), self.context), self.context,
                               self.spec, lambda: self.planner.connection())

    def commit(self, end: dict[str, Any]) -> None:
        committed = self._offset(end)
        self.planner.forget_emitted(committed)
        if isinstance(self.spec.dialect, SupportsLogRelease):
            release_log(self.spec.dialect, captured(committed, self.context), self.context.store,
                        self.planner.connection)

    def stop(self) -> None:
        self.planner.close()

    # --- executors ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.context, partition)


def release_log(dialect: SupportsLogRelease, committed: SourceOffset, store: StateStore,
                connection: Callable[[], Any]) -> None:
    """Tell the server the log before a committed batch's end is no longer needed (driver;
    Spark calls ``commit`` only after the batch's commit log entry, so after every sink).

    The point released is the batch's end, or the low watermark of a chunk it staged (the next
    batch emits those from their LW), whichever is first. A failure only delays the release.
    """
    point: Offset = committed.position
    try:
        for name, (lo, hi) in committed.stage.items():
            for split_id in range(lo, hi):
                lw = store.staged_low_watermark(TableId.parse(name), split_id)
                point = min_offset(point, cast_dialect(dialect).offset_from_dict(lw))
        dialect.release(connection(), point)
    except Exception as exc:  # the next commit releases again, further on
        log.warning("could not release the source log up to %s yet: %s", point, exc)


def cast_dialect(dialect: SupportsLogRelease) -> Dialect:
    assert isinstance(dialect, Dialect)
    return dialect


def captured(offset: SourceOffset, ctx: TaskContext) -> SourceOffset:
    """``offset`` without the chunks of tables no longer captured: a batch planned before a table
    was dropped (and replayed after) neither stages nor emits its chunks, nor waits for them."""
    def known(ranges: Ranges) -> Ranges:
        return {name: ids for name, ids in ranges.items() if TableId.parse(name) in ctx.schemas}

    return replace(offset, stage=known(offset.stage), emit=known(offset.emit))


def rejoined(offset: SourceOffset, table: str) -> bool:
    """Whether ``table`` joined ``offset``'s tables again after it had left them: its snapshot
    rows are upserted (:class:`~cdc.spark.tasks.EmitChunk`)."""
    progress = offset.tables.get(table)
    return progress is not None and progress.rejoined


def regions(start: SourceOffset, ctx: TaskContext) -> dict[str, Region]:
    """Each table's finished region when the batch starts (what of it streams)."""
    out = {}
    for name, progress in start.tables.items():
        table = TableId.parse(name)
        if table not in ctx.schemas:
            continue
        if progress.state == "stream":
            out[name] = Region(everything=True)
        elif progress.state == "snapshot" and progress.upto is not None:
            column = ctx.dialect.chunk_key(ctx.schemas[table]).name
            out[name] = Region(everything=False, upto=progress.upto, key_column=column)
    return out


def plan_partitions(start: SourceOffset, end: SourceOffset, ctx: TaskContext, spec: SourceSpec,
                    connection: Callable[[], Any]) -> list[InputPartition]:
    """Spread a batch's work over tasks: stage chunks, emit chunks, the stream slice.

    A long slice in a batch without emits (a catch-up) is cut for up to ``parallelism`` tasks,
    each with its own reader id, when the dialect can (``SupportsSplitSlices``).
    """
    p, reader_ids = spec.parallelism, ctx.dialect.reader_ids()
    hw, ts = end.position, end.ts_ms
    stages: list[Any] = [StageChunk(t, i) for t, (lo, hi) in sorted(end.stage.items()) for i in range(lo, hi)]
    emits: list[Any] = [EmitChunk(t, i, rejoined(end, t)) for t, (lo, hi) in sorted(end.emit.items())
                        for i in range(lo, hi)]
    streaming = regions(start, ctx) if ctx.dialect.config.startup_mode != "snapshot" else {}
    # Every batch follows the DDL of the tables whose rows it does not stream, so the schema
    # history is complete up to each batch's start (the emits' log reads begin there); a table
    # from the batch after the one it joined in, whose start follows the reading of its definition
    # (so its CREATE TABLE, which that definition already is, is not followed as a change).
    follow = tuple(sorted(str(t) for t in ctx.schemas if str(t) not in streaming and str(t) in start.tables))
    stream = [StreamSlice(start.position, hw, streaming, follow=follow)] \
        if (streaming or follow) and start.position.is_before(hw) else []
    parts: list[CdcPartition] = []
    since = start.position
    skip = ctx.dialect.config.backfill_skip
    if skip:  # its emits read their chunks (and the log for DDL only): spread them as stages are
        stages, emits = stages + emits, []
    emit_slots = min(p, len(reader_ids) - 1)
    if emit_slots < 1:  # one reader id: the stream task does the emits too, one after another
        stream_items: list[Any] = list(emits) + stream
        emits = []
    elif stream and not emits and not (skip and stages):
        stream_items = []
        pieces = _cut(stream[0], min(p, len(reader_ids)), ctx.dialect, connection) if streaming else stream
        for i, piece in enumerate(pieces):
            parts.append(CdcPartition(i, reader_ids[i], [piece], hw, ts, since))
    else:
        stream_items = list(stream)
    if stream_items:
        parts.append(CdcPartition(0, reader_ids[0], stream_items, hw, ts, since))
    # Task j emits a contiguous run of chunks (its files then cover one key range) and stages a
    # run of the next ones, at the same time (cdc/spark/tasks.py). Only emits read the log, each
    # with its own reader id; staging reads none (backfill_skip: its emits walk the log up to
    # their chunks for DDL, with the ids after the stream's).
    emit_runs, stage_runs = _runs(emits, emit_slots), _runs(stages, p)
    for j in range(max(len(emit_runs), len(stage_runs))):
        items = (emit_runs[j] if j < len(emit_runs) else []) + (stage_runs[j] if j < len(stage_runs) else [])
        reader = reader_ids[1 + j] if j < len(emit_runs) else \
            reader_ids[(1 + j) % len(reader_ids)] if skip else reader_ids[0]
        parts.append(CdcPartition(len(parts), reader, items, hw, ts, since))
    return list(parts)


def _cut(item: StreamSlice, tasks: int, dialect: Dialect, connection: Callable[[], Any]) -> list[StreamSlice]:
    """The pieces of a stream slice for ``tasks`` tasks (one piece when it is short)."""
    cuts: list[Any] = []
    if isinstance(dialect, SupportsSplitSlices) and tasks > 1:
        cuts = dialect.slice_cuts(connection, item.start, item.end, tasks)
    if cuts:
        log.info("log slice %s..%s is read by %d tasks, cut at %s", item.start, item.end, len(cuts) + 1,
                 ", ".join(map(str, cuts)))
    bounds: list[Any] = [None, *cuts]
    ends = [*cuts, item.end]
    return [replace(item, end=e, decode_from=b) for b, e in zip(bounds, ends, strict=True)]


def _runs(items: list[Any], n: int) -> list[list[Any]]:
    """``items`` cut into at most ``n`` contiguous runs of near-equal length (no empty run)."""
    n = min(n, len(items))
    if n <= 0:
        return []
    size, extra = divmod(len(items), n)
    out, at = [], 0
    for j in range(n):
        step = size + (1 if j < extra else 0)
        out.append(items[at:at + step])
        at += step
    return out


MySqlCdcDataSource = data_source("mysql")
