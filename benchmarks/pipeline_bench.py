"""One measured phase of a pipeline benchmark, run in a child process of its own.

Used by benchmarks/tpcds_customer.py. Each phase runs in a fresh Python process (so a Spark phase
gets a fresh JVM and ``local[N]`` of its own, and peak memory is the phase's own) while the parent
samples the peak RSS of every process in the child's tree (:class:`ChildPhase`).

The child reads a JSON spec on stdin (so no password reaches a command line), prints events as
lines ``@@ {json}`` on stdout and ends with a ``result`` event. Phase kinds:

* ``pipeline``: the real job (``mysql-cdc`` source, :class:`cdc.spark.commit.BatchCommitter`, Delta sink), as
  tests/pipeline.py wires it; ``trigger`` is ``available-now`` or a processing-time interval
  (``200 milliseconds``), stopped by SIGTERM. A ``batch`` event follows every committed batch,
  with the time the driver spent committing snapshot files and writing change batches.
* ``single``: one connection reading the whole table in key order (one ``SELECT ... ORDER BY``
  through :func:`binlog.mysql.fetch.fetch_arrow`) streamed into one Delta table in one commit.
* ``jdbc``: ``spark.read.jdbc`` partitioned on the key, written with ``df.write.parquet``.
* ``decompose``: no Spark: the source's own stage and emit work (the executor side) on a few
  chunks, in this process, plus the Parquet writing of :mod:`cdc.spark.batch`, timed and cProfiled.
* ``binlog``: no Spark: the stream task's work on a binlog slice (decoding, then rows), cProfiled.

The parent side: :class:`ChildPhase` (launch, events, memory), the writers that load the source
while a phase runs (:func:`apply_burst`, :class:`MarkerWriter`) and :func:`visibility`, which reads
both Delta logs to time each marked change from its commit in MariaDB to its mirror commit.

Run directly only by the parent: ``python benchmarks/pipeline_bench.py < spec.json``.

Profiling the executors too: with ``SPARK_CDC_BENCH_PY_SPY=<dir>`` (and ``py-spy`` installed,
``pip install py-spy``), each phase runs under ``py-spy record --subprocesses``, which samples the
driver and every Python worker Spark forks; the collapsed stacks go to ``<dir>/<phase>.txt`` and
``benchmarks/py_spy_summary.py`` says where each process kind spent its samples. With
``SPARK_CDC_BENCH_PY_SPY_IDLE=1`` as well, py-spy samples waiting threads too (``--idle``): where
the wall time goes, not only the CPU.

``SPARK_CDC_BENCH_SPARK_CHECKPOINTS=1`` keeps Spark's default checkpoint file manager instead of
the job's (:func:`cdc.spark.session.fork_free_checkpoints`): the comparison behind that choice.
"""

from __future__ import annotations

import bisect
import contextlib
import cProfile
import io
import itertools
import json
import os
import pstats
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from cdc.spark.zygote import comm as zygote_comm

MARK = "@@ "
SAMPLE_S = 0.2
CORES = os.cpu_count() or 1


def emit(event: str, **data: Any) -> None:
    """Child: report an event to the parent."""
    print(MARK + json.dumps({"event": event, **data}), flush=True)


def top_functions(prof: cProfile.Profile, key: str = "cumulative", limit: int = 12) -> str:
    """The ``limit`` top lines of a profile, as pstats prints them."""
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(key).print_stats(limit)
    text = out.getvalue()
    return text[text.find("   ncalls"):].rstrip() if "   ncalls" in text else text


# --- child: the phases -----------------------------------------------------------------------


class _Timed:
    """Accumulates the wall time of calls to a wrapped function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


DRIVER_STEPS = {  # label -> (file suffix, function) whose cumulative time the profile reports
    "foreachBatch": ("cdc/spark/commit.py", "__call__"),
    "batch toArrow (source tasks incl. snapshot files)": ("sql/classic/dataframe.py", "toArrow"),
}


def pipeline_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """The job's streaming query until available-now ends or SIGTERM; per-batch timings.

    With ``sink: noop`` the stream goes to Spark's ``noop`` sink instead: the source alone.
    """
    import sinks.delta.sink
    from cdc.app.config import parse_config
    from cdc.app.runner import JobRunner, catalog_dir, job_modules, jvm_merges
    from cdc.spark.commit import BatchCommitter
    from cdc.spark.metrics import observed
    from cdc.spark.session import fork_free_checkpoints, local_session
    from cdc.spark.source import SourceSpec, packed_job_source

    config = parse_config({"source": spec["source"],
                           "sink": {"type": "delta", "path": spec["lake"], **spec.get("sink_options", {})},
                           "checkpoint": spec["checkpoint"], "state_dir": spec["state_dir"],
                           "parallelism": spec["parallelism"]}, warn_plain_password=False)
    # as the job's session (cdc.app.runner.job_session): its catalog too, so a phase registers the
    # tables by name as a job's first start does, and a catch-up finds them recorded as a restart does
    spark = local_session("spark-cdc-bench", parallelism=spec["parallelism"], catalog_dir=catalog_dir(config),
                          light_jvm=not jvm_merges(config), preload=job_modules(config),
                          **{"spark.sql.streaming.numRecentProgressUpdates": "1000"})  # as the job's session
    runner = JobRunner(config, spark)
    schemas = runner.check()
    noop = spec.get("sink") == "noop"
    opened = [] if noop else runner.open_sinks(spec["query_id"], spark, schemas)
    commit = sinks.delta.sink.commit_snapshot_files = _Timed(sinks.delta.sink.commit_snapshot_files)
    sink_write = sinks.delta.sink.commit_change_files = _Timed(sinks.delta.sink.commit_change_files)
    writer = BatchCommitter(schemas, opened)
    # the job's source (JobRunner._start): the packed class, with the tables the job checked
    source = packed_job_source(SourceSpec(runner.dialect, spec["state_dir"], spec["parallelism"],
                                          tuple(s.writer() for s in opened), schemas=schemas))
    spark.dataSource.register(source)
    prof = cProfile.Profile()

    def write(df: Any, batch_id: int) -> None:
        started, before = time.perf_counter(), (commit.seconds, sink_write.seconds)
        prof.enable()  # foreachBatch runs on a py4j thread: profile it there
        try:
            writer(df, batch_id)
        finally:
            prof.disable()
        r = writer.batches[-1]
        emit("batch", batch_id=batch_id, seconds=time.perf_counter() - started, t=time.time(),
             snapshot_rows=r.snapshot_rows, change_rows=r.change_rows,
             commit_s=commit.seconds - before[0], sink_s=sink_write.seconds - before[1])

    if not os.environ.get("SPARK_CDC_BENCH_SPARK_CHECKPOINTS"):
        fork_free_checkpoints(spark, spec["checkpoint"])  # as the job's query (JobRunner._start)
    df = spark.readStream.format(source.name()).load()
    df = df if noop else observed(df)  # as the job's query (the metrics read the manifests)
    stream = (df.writeStream.format("noop") if noop else df.writeStream.foreachBatch(write))
    stream = stream.option("checkpointLocation", spec["checkpoint"])
    trigger = spec["trigger"]
    stream = stream.trigger(availableNow=True) if trigger == "available-now" else stream.trigger(
        processingTime=trigger)
    seconds, progress = _run_query(stream)
    drained = time.perf_counter()
    writer.close()  # the mirror follower's last MERGE belongs to the run
    drain = time.perf_counter() - drained
    seconds += drain
    spark.stop()
    driver: dict[str, float] = {}
    if writer.batches:  # else the noop sink ran: no foreachBatch call
        driver = _cumulative(prof, DRIVER_STEPS)
        driver.update(snapshot_commit=round(commit.seconds, 2), change_sink=round(sink_write.seconds, 2))
    return {"seconds": seconds, "drain_s": round(drain, 2), "progress": summarize_progress(progress),
            "input_rows": sum(p.get("numInputRows", 0) for p in progress),
            "snapshot_rows": sum(b.snapshot_rows for b in writer.batches),
            "change_rows": sum(b.change_rows for b in writer.batches),
            "batches": len(writer.batches), "driver_seconds": driver,
            "profile": top_functions(prof) if writer.batches else None}


def _run_query(stream: Any) -> tuple[float, list[dict[str, Any]]]:
    """Start the query; wait until it ends or SIGTERM asks to stop it. Seconds, progress."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emit("ready")
    started = time.perf_counter()
    query = stream.start()
    announced = False
    while not query.awaitTermination(0.25):
        if not announced and query.status["message"] == "Waiting for next trigger":
            announced = True  # the first trigger is done: the query is up
            emit("started", seconds=time.perf_counter() - started)
        if stop.is_set():
            query.stop()
            break
    seconds = time.perf_counter() - started
    return seconds, [json.loads(p.json) for p in query.recentProgress]


def _cumulative(prof: cProfile.Profile, steps: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Cumulative seconds of the named functions in a profile."""
    out = dict.fromkeys(steps, 0.0)
    for (path, _, func), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        for label, (suffix, name) in steps.items():
            if func == name and path.endswith(suffix):
                out[label] += row[3]
    return {k: round(v, 2) for k, v in out.items()}


def summarize_progress(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Spark's per-batch ``durationMs`` summed per step over the batches that ran (not idle triggers)."""
    busy = [p for p in progress if "addBatch" in p.get("durationMs", {})]
    steps: dict[str, float] = {}
    for p in busy:
        for key, ms in p.get("durationMs", {}).items():
            steps[key] = steps.get(key, 0.0) + ms / 1000
    trigger = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in busy]
    return {"batches": len(busy), "batches_with_rows": sum(p.get("numInputRows", 0) > 0 for p in busy),
            "seconds_by_step": {k: round(v, 2) for k, v in sorted(steps.items())},
            "batch_seconds": [round(t, 2) for t in trigger] if len(trigger) <= 20 else None,
            "batch_seconds_max": round(max(trigger, default=0.0), 2),
            "batch_seconds_median": round(sorted(trigger)[len(trigger) // 2], 2) if trigger else 0.0}


def endpoint(d: dict[str, Any]) -> Any:
    """The sandbox's CDC endpoint from a phase spec (its default TLS settings: the sandbox's)."""
    from binlog.mysql.connection import Endpoint

    return Endpoint(**{k: v for k, v in d.items() if k != "tls"})


def single_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``SELECT ... ORDER BY key`` on one connection, streamed into one Delta commit."""
    from deltalake import write_deltalake

    from binlog.mysql.fetch import choose_backend, fetch_arrow
    from binlog.mysql.types import load_table_schema, quote_ident
    from cdc.model.schema import TableId
    from sinks.changes import mirror_schema

    cdc = endpoint(spec["cdc"])
    with contextlib.closing(cdc.connect()) as conn:
        schema = load_table_schema(conn, TableId(spec["database"], spec["table"]))
    target, key = mirror_schema(schema), schema.primary_key[0]
    rows = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        order = f"TRUE ORDER BY {quote_ident(key)}"
        for b in fetch_arrow(cdc, schema, order, backend=spec["backend"]):
            rows += b.num_rows
            yield pa.RecordBatch.from_arrays(b.columns, schema=target)

    emit("ready")
    with cpu_window(spec.get("server_pid")) as cpu:
        write_deltalake(spec["out"], pa.RecordBatchReader.from_batches(target, batches()), mode="overwrite")
    return {**cpu, "rows": rows, "backend": choose_backend(schema, spec["backend"]).name}


def jdbc_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """``spark.read.jdbc`` with numPartitions on the key range, written as Parquet by the JVM
    (MariaDB's or PostgreSQL's JDBC driver: ``spec["driver"]``)."""
    from cdc.spark.session import local_session

    p = spec["parallelism"]
    spark = local_session("spark-cdc-bench-jdbc", parallelism=p)  # the project's jars hold the JDBC drivers
    props = {"user": spec["user"], "password": spec["password"], "driver": spec["driver"],
             "fetchsize": str(spec["fetchsize"])}
    spark.read.jdbc(spec["url"], spec["table"], properties=props).schema  # noqa: B018  (load the driver)
    emit("ready")
    started = time.perf_counter()
    df = spark.read.jdbc(spec["url"], spec["table"], column=spec["key"], lowerBound=spec["lower"],
                         upperBound=spec["upper"], numPartitions=p, properties=props)
    df.write.mode("overwrite").parquet(spec["out"])
    seconds = time.perf_counter() - started
    spark.stop()
    files = sorted(Path(spec["out"]).glob("*.parquet"))
    return {"seconds": seconds, "rows": sum(pq.ParquetFile(f).metadata.num_rows for f in files),
            "files": len(files), "bytes": sum(f.stat().st_size for f in files)}


def decompose_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """The executor-side work of some chunks without Spark: stage, then emit (with the Delta
    sink's writer, so emitting includes writing the mirror and changelog Parquet files)."""
    from binlog.registry import create_dialect, source_configs
    from cdc.model.config import parse_section
    from cdc.spark.layout import MANIFEST_COLUMN
    from cdc.spark.source import SourceSpec, bound_source
    from cdc.spark.tasks import CdcPartition, EmitChunk, StageChunk, run_partition
    from sinks.delta.config import DeltaSinkConfig
    from sinks.delta.files import DeltaFileWriter

    dialect = create_dialect(parse_section(source_configs()["mysql"], spec["source"], "source"))
    writer = DeltaFileWriter(DeltaSinkConfig(path=spec["lake"]))
    source = bound_source(SourceSpec(dialect, spec["state_dir"], 1, (writer,)))({})
    reader: Any = source.streamReader(None)
    ctx, schemas = reader.context, source.table_schemas()
    _warm_up(dialect.settings, next(iter(schemas.values())))  # type: ignore[attr-defined]
    def staged(plan: dict[str, Any]) -> int:
        return sum(hi - lo for lo, hi in plan["stage"].values())

    planned = best = reader.latestOffset(reader.initialOffset(), None)  # the warm-up batch: few chunks
    for _ in range(8):  # plans ramp up to chunks_per_batch; only the largest plan's chunks are run
        planned = reader.latestOffset(planned, None)
        best = planned if staged(planned) > staged(best) else best
        if staged(planned) >= int(spec["source"]["chunks_per_batch"]) or not staged(planned):
            break  # enough, or the table has no chunk left (a small table in large chunks)
    chunks = [(t, i) for t, (lo, hi) in best["stage"].items() for i in range(lo, hi)]
    reader_id = dialect.reader_ids()[1]
    seconds, rows, prof = {"stage": 0.0, "emit (incl. Parquet)": 0.0}, 0, cProfile.Profile()
    emit("ready")
    prof.enable()
    began = time.perf_counter()
    for t, i in chunks:
        list(run_partition(CdcPartition(0, reader_id, [StageChunk(t, i)], None, 0), ctx))  # type: ignore[arg-type]
    seconds["stage"] = time.perf_counter() - began
    with contextlib.closing(dialect.connect()) as conn:
        hw = dialect.current_offset(conn)
    began = time.perf_counter()
    part = CdcPartition(0, reader_id, [EmitChunk(t, i) for t, i in chunks], hw, int(time.time() * 1000))
    manifests = pa.Table.from_batches(list(run_partition(part, ctx)))
    seconds["emit (incl. Parquet)"] = time.perf_counter() - began
    prof.disable()
    for text in manifests[MANIFEST_COLUMN].to_pylist():
        rows += sum(s["rows"] for s in json.loads(text))
    reader.stop()
    return {"chunks": len(chunks), "rows": rows, "seconds": seconds,
            "profile_tottime": top_functions(prof, "tottime", 15),
            "profile_cumulative": top_functions(prof, "cumulative", 15)}


def binlog_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """The stream task's work without Spark: read a binlog slice as change blocks, build the
    change rows column-wise, write them as changelog files (as cdc/spark/tasks.py does with the
    Delta sink)."""
    from binlog.mysql.change_rows import event_rows_envelope
    from binlog.mysql.dialect import STREAM_ROWS
    from binlog.mysql.positions import BinlogOffset
    from binlog.mysql.reader import BinlogReaderOptions, MySqlBinlogReader
    from binlog.mysql.types import load_table_schema
    from cdc.model.schema import TableId
    from sinks.delta.config import DeltaSinkConfig
    from sinks.delta.files import write_change_files

    cdc = endpoint(spec["cdc"])
    table = TableId(spec["database"], spec["table"])
    with contextlib.closing(cdc.connect()) as conn:
        schema = load_table_schema(conn, table)
    sink = DeltaSinkConfig(path=spec["lake"])
    _warm_up(cdc, schema)
    config = BinlogReaderOptions(connection=cdc, server_id=spec["server_id"], tables=(table,))
    seconds = {"binlog blocks": 0.0, "change rows": 0.0, "changelog files": 0.0}
    changes, prof = 0, cProfile.Profile()
    emit("ready")
    prof.enable()
    with MySqlBinlogReader(config) as reader:
        blocks = iter(reader.read_event_rows(BinlogOffset.from_dict(spec["start"]), BinlogOffset.from_dict(spec["end"])))
        while changes < spec["max_changes"]:
            began, pending, rows = time.perf_counter(), [], 0
            for block in blocks:
                pending.append(block)
                rows += block.num_rows
                if rows >= STREAM_ROWS:
                    break
            seconds["binlog blocks"] += time.perf_counter() - began
            if not pending:
                break
            began = time.perf_counter()
            envelope = event_rows_envelope(schema, pending, name="bench")
            seconds["change rows"] += time.perf_counter() - began
            began = time.perf_counter()
            write_change_files(sink, schema, envelope)
            seconds["changelog files"] += time.perf_counter() - began
            changes += envelope.num_rows
    prof.disable()
    return {"changes": changes, "seconds": seconds, "profile_tottime": top_functions(prof, "tottime", 15)}


def _warm_up(settings: Any, schema: Any) -> None:
    """Load what a Python worker loads once (fetch driver, pandas via pyarrow): not per chunk."""
    import pandas  # type: ignore[import-untyped]  # noqa: F401  (pyarrow loads it on first use)

    from binlog.mysql.fetch import fetch_arrow

    list(fetch_arrow(settings, schema, "FALSE"))


PHASES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "pipeline": pipeline_phase, "single": single_phase, "jdbc": jdbc_phase,
    "decompose": decompose_phase, "binlog": binlog_phase,
}


def child_main() -> None:
    spec = json.loads(sys.stdin.read())
    emit("result", **PHASES[spec["kind"]](spec))


# --- parent: launching a phase and watching its memory -----------------------------------------


def _status_kib(pid: int, field_name: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


# what a job's zygote names its forks of Spark's planner processes and of the streaming runner
ZYGOTE_PLANNERS = tuple(zygote_comm(m) for m in ("lookup_data_sources", "create_data_source", "plan_data_source_read"))
ZYGOTE_RUNNER = zygote_comm("python_streaming_source_runner")


def _role(proc: Any, root: int) -> str:
    if proc.pid == root:
        return "driver"
    name = proc.name()
    if name == "java":
        return "jvm"
    if name == ZYGOTE_RUNNER or any("python_streaming_source_runner" in a
                                                             for a in proc.cmdline()):
        return "source planner"  # the stream reader's driver side (a fork of the job's zygote names itself so)
    if name.startswith("python") or name in ZYGOTE_PLANNERS:  # Spark's Python processes, forked or not
        return "python workers"
    return f"other ({name})"


@dataclass
class RssPeaks:
    """Peak memory (MiB) of a phase's processes, by role, and of the database server."""

    by_role: dict[str, float] = field(default_factory=dict)  # the largest single process
    workers_total: float = 0.0  # the most RSS the Python workers held at one moment
    tree_total: float = 0.0  # the most RSS the whole tree held at one moment
    server_rss: float = 0.0  # the server's RSS (its main process), highest sample during the phase
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> role, CPU seconds so far
    server_cpu: list[float] = field(default_factory=list)  # the server's CPU seconds, first and last sample
    server: str = "mariadbd"  # the server's name in cpu_seconds() and to_dict()
    sampled: list[float] = field(default_factory=list)  # monotonic time of the first and last sample

    def sample(self, root: int, server_pid: int | None) -> None:
        import psutil  # type: ignore[import-untyped]

        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        now = time.monotonic()
        self.sampled = [self.sampled[0] if self.sampled else now, now]
        workers = tree = 0.0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                role, rss = _role(proc, root), _status_kib(proc.pid, "VmRSS") / 1024
                hwm = _status_kib(proc.pid, "VmHWM") / 1024
                times = proc.cpu_times()
                self.cpu[proc.pid] = (role, times.user + times.system)
                self.by_role[role] = max(self.by_role.get(role, 0.0), hwm)
                tree += rss
                workers += rss if role == "python workers" else 0.0
        self.workers_total = max(self.workers_total, workers)
        self.tree_total = max(self.tree_total, tree)
        if server_pid:
            self.server_rss = max(self.server_rss, _status_kib(server_pid, "VmRSS") / 1024)
            with contextlib.suppress(psutil.Error):
                now = _server_cpu(server_pid)
                self.server_cpu = [self.server_cpu[0] if self.server_cpu else now, now]

    def to_dict(self) -> dict[str, float]:
        d: dict[str, float] = {k: round(v) for k, v in sorted(self.by_role.items())}
        d.update(workers_total=round(self.workers_total), tree_total=round(self.tree_total))
        d[self.server] = round(self.server_rss)
        return d

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) the phase's processes used, by role, and the server's
        during the phase: where the 2 cores went. A process is counted up to its last sample
        (every :data:`SAMPLE_S`), so a short-lived one may be missed."""
        by_role: dict[str, float] = {}
        for role, seconds in self.cpu.values():
            by_role[role] = by_role.get(role, 0.0) + seconds
        if self.server_cpu:
            by_role[self.server] = self.server_cpu[-1] - self.server_cpu[0]
        return {k: round(v, 1) for k, v in sorted(by_role.items(), key=lambda kv: -kv[1])}

    def cpu_detail(self) -> dict[str, Any]:
        """:meth:`cpu_seconds` as ``cpu_s``, and as ``cpu_wall_s`` the wall seconds they cover: the
        child's whole life (its start-up and shut-down too), longer than the phase's measured
        seconds."""
        wall = round(self.sampled[-1] - self.sampled[0], 1) if self.sampled else 0.0
        return {"cpu_s": self.cpu_seconds(), "cpu_wall_s": wall}


PROBE_LOOPS = 3_000_000


def load() -> float:
    """The 1-minute load average, rounded."""
    return round(os.getloadavg()[0], 2)


def speed_probe(rounds: int = 5) -> float:
    """How fast this machine's cores are right now: the best of ``rounds`` timings (seconds) of a
    fixed pure-Python loop of :data:`PROBE_LOOPS` additions. The 2 cores are shared, and their
    speed swings by more than 2x within an hour (the same loop: 0.88 s per 10 million additions
    at 00:20 and 0.37 s at 01:00 on 2026-12-03), while the load average sees only this machine's
    own processes. A run's JSON records the probe at its start and end (:class:`RunStart`)."""
    best = float("inf")
    for _ in range(rounds):
        started, total = time.perf_counter(), 0
        for i in range(PROBE_LOOPS):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best, 3)


class RunStart(NamedTuple):
    """A benchmark run's start: its clock, the load average and the speed probe."""

    clock: float
    load: float
    probe_s: float

    @classmethod
    def now(cls) -> RunStart:
        return cls(time.perf_counter(), load(), speed_probe())

    def conditions(self) -> dict[str, Any]:
        """The run's JSON fields on the machine's state, at its start and now: ``load_average``
        and ``python_probe_s`` (:func:`speed_probe`)."""
        return {"load_average": {"start": self.load, "end": load()},
                "python_probe_s": {"start": self.probe_s, "end": speed_probe()}}

    def describe(self) -> str:
        return f"load average {self.load}, Python probe {self.probe_s} s (lower is faster)"


@contextlib.contextmanager
def cpu_window(server_pid: int | None) -> Iterator[dict[str, float]]:
    """Inside the block, this process's CPU seconds (all its threads: a Rust fetch and writer run
    several) and the database server's (:func:`_server_cpu`); filled in when the block ends, with
    its wall ``seconds``."""
    import resource

    def own() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    out: dict[str, float] = {}
    server = _server_cpu(server_pid) if server_pid else None
    started, cpu = time.perf_counter(), own()
    yield out
    out.update(seconds=time.perf_counter() - started, own_cpu_s=round(own() - cpu, 2))
    if server_pid and server is not None:
        out["server_cpu_s"] = round(_server_cpu(server_pid) - server, 2)


def cores_used(name: str, window: dict[str, float], server: str) -> str:
    """One line: the CPU seconds a phase measured with :func:`cpu_window` used, and how many of the
    machine's cores that kept busy."""
    total = window["own_cpu_s"] + window.get("server_cpu_s", 0.0)
    return (f"{name}: its process {window['own_cpu_s']} CPU s"
            + (f" and {server} {window['server_cpu_s']}" if "server_cpu_s" in window else "")
            + f" in {window['seconds']:.2f} s: {total / window['seconds']:.2f} of the {CORES} cores")


def _server_cpu(pid: int) -> float:
    """CPU seconds of the server and its processes: mariadbd is one process, but PostgreSQL
    runs a process per connection, whose time passes to the postmaster's children's counters
    when it ends."""
    import psutil  # type: ignore[import-untyped]

    server = psutil.Process(pid)
    times = server.cpu_times()
    seconds = times.user + times.system + times.children_user + times.children_system
    for child in server.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = child.cpu_times()
            seconds += t.user + t.system
    return seconds


class PhaseFailed(RuntimeError):
    """A phase's child process failed; the message holds the tail of its log."""


def _profiled(command: list[str], log_path: Path) -> list[str]:
    """``command`` under py-spy when ``SPARK_CDC_BENCH_PY_SPY`` names a folder (module doc)."""
    folder = os.environ.get("SPARK_CDC_BENCH_PY_SPY")
    if not folder:
        return command
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("SPARK_CDC_BENCH_PY_SPY is set but py-spy is not installed: pip install py-spy")
    Path(folder).mkdir(parents=True, exist_ok=True)
    out = Path(folder) / f"{log_path.stem}.txt"
    idle = ["--idle"] if os.environ.get("SPARK_CDC_BENCH_PY_SPY_IDLE") else []  # waits sampled too
    return [spy, "record", "--subprocesses", *idle, "--rate", "250", "--format", "raw", "--output", str(out),
            "--", *command]


class ChildPhase:
    """Run one phase in a child process, sampling memory until it reports its result.

    Args:
        spec: the phase spec (``kind`` and its settings); sent on the child's stdin.
        log_path: where the child's stderr goes (Spark's log).
        server_pid: the database server's pid, sampled too (with its child processes).
        server: the server's name in the phase's CPU seconds.
        command: the child (default: this file, whose ``__main__`` runs pipeline phases).
    """

    def __init__(self, spec: dict[str, Any], log_path: Path, server_pid: int | None, server: str = "mariadbd",
                 command: list[str] | None = None) -> None:
        env = {**os.environ, "SPARK_CDC_SPARK_LOG_LEVEL": os.environ.get("SPARK_CDC_SPARK_LOG_LEVEL", "ERROR")}
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115  (closed in wait)
        self.proc = subprocess.Popen(_profiled(command or [sys.executable, __file__], log_path), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=env)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(spec))
        self.proc.stdin.close()
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.rss, self.server_pid = RssPeaks(server=server), server_pid
        self._done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._sample, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                self.events.put(json.loads(line[len(MARK):]))
        self.events.put(None)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.rss.sample(self.proc.pid, self.server_pid)
            self._done.wait(SAMPLE_S)

    def stop(self) -> None:
        """Ask a continuous phase to stop its query (SIGTERM to the child only)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, on_event: Callable[[dict[str, Any]], None] | None = None,
             timeout: float = 3600.0) -> dict[str, Any]:
        """Pass each event to ``on_event`` until the result arrives; return the result.

        Raises:
            PhaseFailed: the child exited without a result, or ``timeout`` passed.
        """
        deadline, result = time.monotonic() + timeout, None
        try:
            while result is None:
                try:
                    event = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise PhaseFailed(f"phase timed out after {timeout:.0f}s; log: {self.log_path}") from None
                if event is None:
                    raise PhaseFailed(f"phase exited with code {self.proc.wait()}:\n{self._tail()}")
                if event["event"] == "result":
                    result = event
                elif on_event is not None:
                    on_event(event)
            # py-spy writes its samples after the whole process tree has ended: give it time
            self.proc.wait(timeout=900 if os.environ.get("SPARK_CDC_BENCH_PY_SPY") else 120)
            return result
        finally:
            self._done.set()
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()

    def _tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-40:])


# --- parent: writes to the source, and when they became visible in Delta -------------------------

MARKER_BASE = 1_000_000_000  # markers are MARKER_BASE + sequence number (TPC-DS values are < 3M)


class JobCopies:
    """Runs of one finished job, each from the state it had when this was made: a catch-up per
    variant of the same backlog.

    Every run happens in place, at the job's own paths, with its catalog: as a restart does, the
    run finds its tables' names recorded there and asks the metastore nothing. (A copy elsewhere
    would have to register its names at its own location, as a job's first start does: a Derby
    metastore start and two ``CREATE TABLE``s beside its first batch, on the same two cores.)
    Before every run but the first, the job's folder is put back from a copy made here.
    """

    def __init__(self, job: Path) -> None:
        self.job, self.kept = job, job.with_name(f"{job.name}-kept")
        shutil.copytree(job, self.kept)
        self._runs = 0

    def next(self) -> Path:
        """The job's folder, as it was when this was made."""
        if self._runs:
            shutil.rmtree(self.job)
            shutil.copytree(self.kept, self.job)
        self._runs += 1
        return self.job


def apply_burst(admin: Any, table: Any, updates: int, per_statement: int = 1000) -> tuple[int, float]:
    """Update ``updates`` rows in key-range statements of ``per_statement`` rows; changed rows, s.

    Every row changes (c_birth_day moves to another day), so each is one binlog row change. Keys
    are 1..table.rows (TPC-DS surrogate keys); past the end the ranges start over.
    """
    changed, done, started = 0, 0, time.perf_counter()
    with contextlib.closing(admin.connect(table.database)) as conn, conn.cursor() as cur:
        while done < updates:
            lo = done % table.rows + 1
            hi = min(lo + min(per_statement, updates - done) - 1, table.rows)
            cur.execute(f"UPDATE `{table.table}` SET `c_birth_day` = MOD(COALESCE(`c_birth_day`, 0), 28) + 1"
                        f" WHERE `c_customer_sk` BETWEEN {lo} AND {hi}")
            changed += cur.rowcount
            done += hi - lo + 1
    return changed, time.perf_counter() - started


class MarkerWriter(threading.Thread):
    """Single-row UPDATEs at ``rate``/s for ``seconds``, each writing a unique marker.

    Update ``i`` is due at ``i / rate`` s after the start; it sets c_last_review_date_sk =
    MARKER_BASE + i on a random key, and ``commit_ms[i]`` is the wall-clock time its autocommit
    returned. ``connections`` connections take turns, so one slow commit does not hold the others.
    """

    def __init__(self, admin: Any, table: Any, rate: float, seconds: float, connections: int = 4) -> None:
        super().__init__(name="marker-writer", daemon=True)
        self.admin, self.table, self.rate, self.seconds = admin, table, rate, seconds
        self.connections = connections
        self.commit_ms: dict[int, float] = {}
        self.finished = threading.Event()
        self._stopping = threading.Event()
        self._sequence = itertools.count()
        self.error: str | None = None
        self.elapsed = 0.0

    def run(self) -> None:
        started = time.perf_counter()
        workers = [threading.Thread(target=self._write, args=(started, random.Random(i)), daemon=True)
                   for i in range(self.connections)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        self.elapsed = time.perf_counter() - started
        self.finished.set()

    def _write(self, started: float, rng: random.Random) -> None:
        sql = (f"UPDATE `{self.table.table}` SET `c_last_review_date_sk` = %s "
               "WHERE `c_customer_sk` = %s")
        try:
            with contextlib.closing(self.admin.connect(self.table.database)) as conn, \
                    conn.cursor() as cur:
                while not self._stopping.is_set():
                    seq = next(self._sequence)
                    due = started + seq / self.rate
                    if due - started >= self.seconds:
                        return
                    if due > time.perf_counter():
                        self._stopping.wait(due - time.perf_counter())
                    cur.execute(sql, (MARKER_BASE + seq, rng.randint(1, self.table.rows)))
                    self.commit_ms[seq] = time.time() * 1000
        except Exception as exc:  # reported with the counts
            self.error = repr(exc)

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join()


def stop_when_caught_up(child: ChildPhase, writer: MarkerWriter, seen: list[int], timeout: float) -> None:
    """Stop ``child`` once it wrote as many changes as ``writer`` made (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    writer.finished.wait(timeout)
    while time.monotonic() < deadline and sum(seen) < len(writer.commit_ms):
        time.sleep(0.1)
    child.stop()


@dataclass
class _Commit:
    batch: int | None  # the batch id of the sink's app transaction
    ms: float  # when the log file appeared (its mtime), epoch ms
    adds: list[str]
    metrics: dict[str, Any]


def _commits(table_dir: Path) -> Iterator[_Commit]:
    """Every version in a Delta table's log, read straight from ``_delta_log``."""
    from urllib.parse import unquote

    for f in sorted((table_dir / "_delta_log").glob("*.json")):
        commit = _Commit(None, f.stat().st_mtime_ns / 1e6, [], {})
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action and action["txn"]["appId"].endswith("/batch"):
                commit.batch = int(action["txn"]["version"])
            if "add" in action:
                commit.adds.append(unquote(action["add"]["path"]))
            if "commitInfo" in action:
                commit.metrics = action["commitInfo"].get("operationMetrics", {})
        yield commit


def _marker_batches(changelog: Path) -> dict[int, tuple[int, float]]:
    """marker sequence number -> (batch id, changelog commit ms), from the changelog's files."""
    out: dict[int, tuple[int, float]] = {}
    for c in _commits(changelog):
        if c.batch is None:
            continue
        batch, ms = c.batch, c.ms
        for path in c.adds:
            rows = pq.read_table(changelog / path, columns=["op", "after"])
            after = rows["after"].combine_chunks()
            marks = after.field("c_last_review_date_sk").to_pylist()
            for op, mark in zip(rows["op"].to_pylist(), marks, strict=True):
                if op == "u" and mark is not None and mark >= MARKER_BASE:
                    out.setdefault(mark - MARKER_BASE, (batch, ms))
    return out


def _quantile(sorted_values: list[float], q: float) -> float:
    return round(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))], 3)


def visibility(db_dir: Path, table: str, writer: MarkerWriter, warmup_s: float) -> dict[str, Any]:
    """How long each marker took from its commit in MariaDB to the changelog and mirror commits
    that hold it.

    The changelog names the batch that carried a change and when it landed (its ``_delta_log``
    file time); the mirror holds it from its first commit of that batch or a later one (the
    mirror follower coalesces batches). Changes of the first ``warmup_s`` seconds are left out of
    the quantiles (Spark's first batches start its Python workers); their worst case is reported
    apart.
    """
    mirror = sorted((c.batch, c.ms, c) for c in _commits(db_dir / table) if c.batch is not None)
    batches = [b for b, _, _ in mirror]
    carried = _marker_batches(db_dir / f"{table}_changelog")
    rewritten = [int(c.metrics.get("num_target_rows_copied", 0)) for _, _, c in mirror]
    measured_from = min(writer.commit_ms.values(), default=0.0) + 1000 * warmup_s
    mirror_lat, log_lat, warm, missing = [], [], [], 0
    for seq, committed in sorted(writer.commit_ms.items()):
        at = bisect.bisect_left(batches, carried[seq][0]) if seq in carried else len(batches)
        if at == len(batches):
            missing += 1
            continue
        seconds = (mirror[at][1] - committed) / 1000
        if committed < measured_from:
            warm.append(seconds)
            continue
        mirror_lat.append(seconds)
        log_lat.append((carried[seq][1] - committed) / 1000)
    mirror_lat.sort()
    log_lat.sort()
    made = len(writer.commit_ms)
    return {"changes": made, "achieved_rate": round(made / writer.elapsed if made else 0.0),
            "missing": missing, "writer_error": writer.error, "warmup_s": warmup_s,
            "warmup_changes": len(warm), "warmup_max_s": round(max(warm, default=0.0), 3),
            "measured_changes": len(mirror_lat),
            **{f"changelog_p{q}_s": _quantile(log_lat, q / 100) if log_lat else None for q in (50, 90, 99)},
            **{f"mirror_p{q}_s": _quantile(mirror_lat, q / 100) if mirror_lat else None for q in (50, 90, 99)},
            "mirror_max_s": round(mirror_lat[-1], 3) if mirror_lat else None,
            "mirror_merges": len(mirror), "merge_rows_copied_per_merge": rewritten}


if __name__ == "__main__":
    child_main()
