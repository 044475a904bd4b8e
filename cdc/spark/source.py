"""The ``mysql-cdc`` Spark streaming source (Python Data Source API).

    spark.dataSource.register(MySqlCdcDataSource)
    df = (spark.readStream.format("mysql-cdc")
          .option("hostname", "127.0.0.1").option("port", "3306")
          .option("username", "cdc").option("password", os.environ["MYSQL_PASSWORD"])
          .option("tables", "shop\\..*").option("state_dir", "/checkpoints/shop/state")
          .load())

Options are the ``source:`` keys of the job config (cdc/config.py), as strings; ``tables`` is a
comma-separated list or a JSON list of regexes, ``chunk_key_columns`` a JSON object. Also:
``state_dir`` (required: the directory the offsets refer to; keep it with the checkpoint),
``parallelism`` (tasks per batch, default 2), ``fetch_backend``, and ``snapshot_writer`` /
``snapshot_writer_secret``: hand snapshot rows to a sink's file writer on the executors instead
of sending them through Spark (cdc/handoff.py; the job sets them, see cdc/job.py).

Where things run: ``schema()`` and the stream reader's ``initialOffset``/``latestOffset``/
``partitions``/``commit`` run on the driver (the planner, cdc/planner.py); ``read()`` runs on
executors, one task per partition (cdc/tasks.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from binlog.mysql.connection import ConnectionSettings
from binlog.mysql.keys import select_chunk_key
from binlog.mysql.reader import ServerIdRange, binary_logs, check_server, current_offset
from binlog.mysql.server import binary_log_sizes
from binlog.mysql.timestamps import offset_at
from cdc.model.config import MySqlSourceConfig, parse_config
from cdc.model.errors import ConfigError
from cdc.model.positions import BinlogOffset, byte_cuts
from cdc.model.schema import TableId, TableSchema, load_table_schema
from cdc.spark import faults
from cdc.spark.handoff import SECRET_OPTION, WRITER_OPTION, SnapshotHandoff
from cdc.spark.layout import StreamLayout
from cdc.spark.planner import Planner, PlannerOptions, SourceOffset
from cdc.spark.state import StateStore
from cdc.spark.tasks import (
    CdcPartition,
    EmitItem,
    StageItem,
    StreamItem,
    TaskContext,
    region_for,
    run_partition,
)
from chunking.splitter import SplitterOptions

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
_JSON_OPTIONS = ("chunk_key_columns", "startup_offset")
DEFAULT_CHUNKS_PER_TASK = 16  # chunks_per_batch defaults to this x parallelism
_EXTRA_OPTIONS = ("state_dir", "parallelism", "fetch_backend", WRITER_OPTION, SECRET_OPTION)
# Walking over a rows event without decoding it costs about this much of decoding it and turning
# it into change rows (benchmarks/binlog_blocks.py: 0.2 of decoding alone; 0.05-0.15 of a task in
# a 2M-update catch-up, which also writes files): later pieces of a split slice are smaller by
# this factor each, so that its tasks finish together.
SKIP_COST = 0.15


@dataclass(frozen=True)
class SourceSettings:
    """The validated options of one ``mysql-cdc`` stream."""

    source: MySqlSourceConfig
    state_dir: str
    parallelism: int = 2
    fetch_backend: str = "auto"
    handoff: SnapshotHandoff | None = None

    @classmethod
    def from_options(cls, options: dict[str, str]) -> SourceSettings:
        """Validate Spark reader options.

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
        config = parse_config({"source": source, "sink": {"path": "-"}, "checkpoint": "-"},
                              origin="mysql-cdc options", warn_plain_password=False).source
        try:
            parallelism = int(extra.get("parallelism", "2"))
        except ValueError:
            raise ConfigError(f"option parallelism: {extra['parallelism']!r} is not a number") from None
        return cls(config, extra["state_dir"], max(1, parallelism), extra.get("fetch_backend", "auto"),
                   SnapshotHandoff.from_options(extra))

    def layout(self, schemas: dict[TableId, TableSchema]) -> StreamLayout:
        """The stream's columns for these tables (with manifests when snapshot rows are handed off)."""
        return StreamLayout(list(schemas.values()), manifests=self.handoff is not None)

    def connection(self) -> ConnectionSettings:
        s = self.source
        return ConnectionSettings(host=s.hostname, port=s.port, user=s.username,
                                  password=s.resolved_password(), connect_timeout=s.connect_timeout_s)


def discover_tables(conn: Any, patterns: list[str]) -> list[TableId]:
    """Base tables whose ``db.table`` fully matches one of the regexes (system schemas excluded).

    Raises:
        ConfigError: nothing matches (the message lists what the user can see).
    """
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                    "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN %s "
                    "ORDER BY TABLE_SCHEMA, TABLE_NAME", (SYSTEM_SCHEMAS,))
        visible = [TableId(db, t) for db, t in cur.fetchall()]
    compiled = [re.compile(p) for p in patterns]
    matched = [t for t in visible if any(p.fullmatch(str(t)) for p in compiled)]
    if not matched:
        sample = ", ".join(map(str, visible[:10])) or "none"
        raise ConfigError(f"source.tables {patterns} matched no table. Tables the CDC user can see: "
                          f"{sample}{' ...' if len(visible) > 10 else ''}. Patterns are regexes on "
                          "'database.table' (e.g. 'shop\\\\..*')", tables=patterns)
    return matched


class MySqlCdcDataSource(DataSource):
    """``spark.readStream.format("mysql-cdc")``: MySQL/MariaDB snapshot + binlog as Debezium rows."""

    @classmethod
    def name(cls) -> str:
        return "mysql-cdc"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = SourceSettings.from_options(dict(options))
        self._schemas: dict[TableId, TableSchema] | None = None

    def table_schemas(self) -> dict[TableId, TableSchema]:
        """Discover and check the captured tables (driver; runs the start-up checks)."""
        if self._schemas is None:
            s = self.settings.source
            with contextlib.closing(self.settings.connection().connect()) as conn:
                check_server(conn, ServerIdRange.parse(s.server_id))
                tables = discover_tables(conn, s.tables)
                schemas = {t: load_table_schema(conn, t) for t in tables}
            if s.startup_mode in ("initial", "snapshot"):
                for t, schema in schemas.items():
                    select_chunk_key(schema, s.chunk_key_columns.get(str(t)))  # NoChunkKey names the fix
            self._schemas = schemas
        return self._schemas

    def schema(self) -> Any:
        return self.settings.layout(self.table_schemas()).spark_schema()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MySqlCdcStreamReader(self.settings, self.table_schemas())


class MySqlCdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The enumerator on the driver (offsets, plans) and the split reader on executors."""

    def __init__(self, settings: SourceSettings, schemas: dict[TableId, TableSchema]) -> None:
        self.settings = settings
        s = settings.source
        self.server_ids = ServerIdRange.parse(s.server_id).ids
        store = StateStore(settings.state_dir)
        self.context = TaskContext(settings=settings.connection(), schemas=schemas, store=store,
                                   layout=settings.layout(schemas), name=s.name,
                                   fetch_backend=settings.fetch_backend,  # type: ignore[arg-type]
                                   handoff=settings.handoff)
        snapshot = s.startup_mode in ("initial", "snapshot")
        options = PlannerOptions(
            chunks_per_batch=s.chunks_per_batch or DEFAULT_CHUNKS_PER_TASK * settings.parallelism,
            warmup_chunks=settings.parallelism,
            splitter=SplitterOptions(chunk_size=s.chunk_size, distribution_factor_lower=s.distribution_factor_lower,
                                     distribution_factor_upper=s.distribution_factor_upper),
            chunk_key_columns=dict(s.chunk_key_columns), snapshot=snapshot, stream=s.startup_mode != "snapshot")
        self.planner = Planner(self.context.settings, schemas, store, options)
        self.target: BinlogOffset | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("planner", None)  # driver-only, holds a connection
        return state

    # --- driver ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial(self._startup_position()).to_dict()

    def _startup_position(self) -> BinlogOffset | None:
        s = self.settings.source
        if s.startup_mode == "earliest-offset":
            files = binary_logs(self.planner.connection())
            return BinlogOffset(files[0], 4)
        if s.startup_mode == "specific-offset":
            assert s.startup_offset is not None
            if s.startup_offset.file is None or s.startup_offset.pos is None:
                raise ConfigError("source.startup_offset: a GTID start is not supported yet; give file and pos")
            return BinlogOffset(s.startup_offset.file, s.startup_offset.pos)
        if s.startup_mode == "timestamp":
            assert s.startup_timestamp_ms is not None
            return offset_at(self.context.settings, self.server_ids[0], s.startup_timestamp_ms)
        return None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = SourceOffset.from_dict(start)
        faults.check(self.context.store, "plan")
        self.planner.forget_emitted(begin)  # `start` ends the last committed batch
        return self.planner.plan(begin, self.target).to_dict()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = current_offset(self.planner.connection())
        log.info("available-now run: stops at binlog %s once the snapshot is done", self.target)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return plan_partitions(SourceOffset.from_dict(start), SourceOffset.from_dict(end), self.context,
                               self.settings, list(self.server_ids),
                               lambda: binary_log_sizes(self.planner.connection()))

    def commit(self, end: dict[str, Any]) -> None:
        self.planner.forget_emitted(SourceOffset.from_dict(end))

    def stop(self) -> None:
        self.planner.close()

    # --- executors ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CdcPartition)
        return run_partition(partition, self.context)


def plan_partitions(start: SourceOffset, end: SourceOffset, ctx: TaskContext, settings: SourceSettings,
                    server_ids: list[int], binlog_sizes: Callable[[], dict[str, int]]) -> list[InputPartition]:
    """Spread a batch's work over tasks: stage chunks, emit chunks, the stream slice.

    A long slice in a batch without emits (a catch-up) is split over up to ``parallelism`` tasks,
    each with its own server id; ``binlog_sizes`` gives the server's binlog file sizes then.
    """
    p = settings.parallelism
    hw, ts = end.binlog, end.ts_ms
    stages = [StageItem(t, i) for t, (lo, hi) in sorted(end.stage.items()) for i in range(lo, hi)]
    emits = [EmitItem(t, i) for t, (lo, hi) in sorted(end.emit.items()) for i in range(lo, hi)]
    regions = {}
    if settings.source.startup_mode != "snapshot":
        for name, progress in start.tables.items():
            table = TableId.parse(name)
            if table in ctx.schemas:
                region = region_for(ctx.schemas[table], progress.state, progress.upto,
                                    settings.source.chunk_key_columns.get(name))
                if region is not None:
                    regions[name] = region
    stream = [StreamItem(start.binlog, hw, regions)] if regions and start.binlog.is_before(hw) else []
    parts: list[CdcPartition] = []
    emit_slots = min(p, len(server_ids) - 1)
    if emit_slots < 1:  # one server id: the stream task does the emits too, one after another
        stream_items: list[Any] = list(emits) + stream
        emits = []
    elif stream and not emits:
        stream_items = []
        for i, piece in enumerate(_split_stream(stream[0], min(p, len(server_ids)),
                                                settings.source.stream_split_bytes, binlog_sizes)):
            parts.append(CdcPartition(i, server_ids[i], [piece], hw, ts))
    else:
        stream_items = list(stream)
    if stream_items:
        parts.append(CdcPartition(0, server_ids[0], stream_items, hw, ts))
    # Task j emits a contiguous run of chunks (its files then cover one key range) and stages a
    # run of the next ones, at the same time (cdc/tasks.py). Only emits read the binlog, each
    # with its own server id; staging reads none.
    emit_runs, stage_runs = _runs(emits, emit_slots), _runs(stages, p)
    for j in range(max(len(emit_runs), len(stage_runs))):
        items = (emit_runs[j] if j < len(emit_runs) else []) + (stage_runs[j] if j < len(stage_runs) else [])
        server_id = server_ids[1 + j] if j < len(emit_runs) else server_ids[0]
        parts.append(CdcPartition(len(parts), server_id, items, hw, ts))
    return list(parts)


def _split_stream(item: StreamItem, tasks: int, min_bytes: int,
                  binlog_sizes: Callable[[], dict[str, int]]) -> list[StreamItem]:
    """The pieces of a stream slice for ``tasks`` tasks (one piece when it is short)."""
    # A short slice in one file stays whole without asking the server for its file sizes.
    short = item.start.file == item.end.file and item.end.pos - item.start.pos < 2 * min_bytes
    cuts = [] if tasks < 2 or short else byte_cuts(item.start, item.end, binlog_sizes(), tasks, min_bytes,
                                                   SKIP_COST)
    if cuts:
        log.info("binlog slice %s..%s is read by %d tasks, cut at %s", item.start, item.end, len(cuts) + 1,
                 ", ".join(map(str, cuts)))
    bounds: list[BinlogOffset | None] = [None, *cuts]
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
