"""Run a job: the change stream of a :class:`~cdc.model.config.JobConfig` into its sinks.

    runner = JobRunner(load_config("job.yaml"))
    summary = runner.run(once=True)      # available-now: everything up to now, then stop

Runs on the driver. It takes the source's dialect and the sinks from their registries
(binlog/registry.py, sinks/registry.py) and calls only their contracts. The order of a run is
what keeps a failed start harmless:

1. :meth:`JobRunner.check` connects and runs the start-up checks (server settings, privileges,
   tables, chunk keys). Every problem raises a :class:`~cdc.model.errors.CdcError` whose message
   names the fix, before anything is written.
2. :class:`~cdc.app.lock.CheckpointLock` refuses a checkpoint that another running job holds
   (``<state>/owner.json`` names its host and pid) and holds it for this run.
   :func:`claim_checkpoint` records the source in ``<state>/source.json`` on the first run and
   refuses a checkpoint made for another source; it also fixes the job id (the key of the
   sinks' idempotent commits) in ``<state>/query.json``, so it survives restarts.
3. Every sink opens (creates what it needs; recovers what a crash left behind).
4. The query starts: ``trigger(availableNow=True)`` with ``once``, else
   ``trigger(processingTime=trigger_interval)`` until SIGINT/SIGTERM, which stop the query
   (``query.stop()``): a batch cut short is replayed on restart, the checkpoint stays consistent.
5. While a continuous run streams, :class:`~cdc.app.discovery.TableWatcher` looks for tables
   that ``source.tables`` newly matches and for captured tables that are gone, every
   ``source.table_discovery_interval``. When it finds one (and, for a table gone, once the query
   has committed the log past the drop, so that its last changes reach the sinks), the query stops
   between two batches, the sinks finish their background work, and steps 2-4 run again with the
   new tables in the same Spark session: a new table is snapshotted while the others stream on
   from the committed offset.

The state directory lives next to the checkpoint (``<checkpoint>_state``), not inside it: Spark
refuses to start a new query in a non-empty checkpoint directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from binlog.dialect import Dialect
from binlog.registry import create_dialect, dialect_module
from cdc.app.checkpoint import CheckpointFiles
from cdc.app.discovery import TableWatcher
from cdc.app.live import choose_view
from cdc.app.lock import CheckpointLock
from cdc.app.progress import JobTotals, ProgressTracker, ProgressView, RunSummary
from cdc.app.writable import check_writable, sink_paths
from cdc.model.config import JobConfig, parse_duration_s
from cdc.model.errors import CdcError, ConfigError
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.positions import Offset
from cdc.model.schema import TableId, TableSchema
from cdc.model.storage import filesystem
from cdc.spark.commit import BatchCommitter, BatchRecord
from cdc.spark.metrics import observed
from cdc.spark.session import fork_free_checkpoints
from cdc.spark.source import HOLD_FILE, SourceSpec, packed_job_source, stream_reader, table_schemas
from cdc.spark.state import StateStore
from cdc.spark.visibility import check_visible
from sinks.base import Sink
from sinks.registry import create_sink, sink_module

log = logging.getLogger(__name__)

SOURCE_FILE = "source.json"
QUERY_FILE = "query.json"
POLL_S = 0.5
HOLD_WAIT_S = 300.0  # the longest a query that must restart waits for its running batch to end


class JobFailed(CdcError):
    """The streaming query stopped with an error (the message is the root cause's)."""


@dataclass(frozen=True)
class JobPaths:
    """Where a job keeps its checkpoint and the source's state (absolute when local)."""

    checkpoint: str
    state_dir: str

    @classmethod
    def of(cls, config: JobConfig) -> JobPaths:
        return cls(_absolute(config.checkpoint), _absolute(config.state_path()))


def _absolute(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.abspath(path)


def path_exists(path: str) -> bool:
    """True when ``path`` (local or URI) exists; never creates anything."""
    fs, base = filesystem(path)
    return bool(fs.get_file_info(base).type != pafs.FileType.NotFound)


def source_identity(config: JobConfig, schemas: dict[TableId, TableSchema]) -> dict[str, Any]:
    """What ``source.json`` records: the server, the table patterns and the databases captured."""
    s = config.source
    return {"type": s.type, "hostname": s.hostname, "port": s.port, "tables": list(s.tables),
            "databases": sorted({t.db for t in schemas})}


def claim_checkpoint(store: StateStore, paths: JobPaths, identity: dict[str, Any], failover: bool = False) -> str:
    """Check that the checkpoint belongs to this source, record it, and return the query id.

    Tables matched by new patterns may join (the planner snapshots them); a different server, or
    patterns that no longer match a database the checkpoint captured, are refused (a database
    whose captured tables were dropped is not). With ``failover`` a new address of
    the same kind of source is accepted (and recorded): the dialect then finds the checkpoint's
    offsets on it by GTID, and refuses a server that lacks the checkpoint's transactions.

    Raises:
        ConfigError: the checkpoint was made for another source, or its state is missing.
    """
    if store.exists(SOURCE_FILE):
        recorded = store.read_json(SOURCE_FILE)
        if failover and _moved(recorded, identity):
            log.warning("--failover: checkpoint %s moves from %s:%s to %s:%s; its offsets are found there "
                        "by GTID", paths.checkpoint, recorded["hostname"], recorded["port"],
                        identity["hostname"], identity["port"])
            recorded = {**recorded, "hostname": identity["hostname"], "port": identity["port"]}
        _same_source(recorded, identity, paths)
        identity = {**identity, "databases": sorted(set(identity["databases"]) | set(recorded["databases"]))}
    elif path_exists(f"{paths.checkpoint}/offsets"):
        raise ConfigError(f"checkpoint {paths.checkpoint} has offsets but its state directory "
                          f"{paths.state_dir} has no {SOURCE_FILE}: restore the state directory "
                          "(it must stay next to the checkpoint) or start over with a new checkpoint",
                          checkpoint=paths.checkpoint)
    store.write_json(SOURCE_FILE, identity)
    if not store.exists(QUERY_FILE):
        digest = hashlib.sha256(paths.checkpoint.encode()).hexdigest()[:16]
        store.write_json(QUERY_FILE, {"query_id": f"cdc-{digest}", "checkpoint": paths.checkpoint})
    return str(store.read_json(QUERY_FILE)["query_id"])


def _moved(recorded: dict[str, Any], identity: dict[str, Any]) -> bool:
    """The same kind of source (MySQL/MariaDB: GTIDs can find the offsets) at another address."""
    return recorded.get("type", "mysql") == identity["type"] == "mysql" and \
        (recorded["hostname"], recorded["port"]) != (identity["hostname"], identity["port"])


def _same_source(recorded: dict[str, Any], identity: dict[str, Any], paths: JobPaths) -> None:
    where = f"{recorded['hostname']}:{recorded['port']}"
    fix = (f"use a new checkpoint for a new source (a promoted MySQL/MariaDB replica: run with "
           f"--failover; the same server under another name: edit {paths.state_dir}/{SOURCE_FILE})")
    if (recorded.get("type", "mysql"), recorded["hostname"], recorded["port"]) != \
            (identity["type"], identity["hostname"], identity["port"]):
        raise ConfigError(f"checkpoint {paths.checkpoint} belongs to source {where}, not "
                          f"{identity['hostname']}:{identity['port']}: {fix}", checkpoint=paths.checkpoint)
    dropped = sorted(set(recorded["databases"]) - set(identity["databases"]))
    if dropped and recorded.get("tables") != identity["tables"]:  # same patterns: its tables were dropped
        raise ConfigError(f"checkpoint {paths.checkpoint} captures database(s) {', '.join(dropped)} "
                          f"that source.tables {identity['tables']} no longer matches: {fix}",
                          checkpoint=paths.checkpoint)


def job_totals(store: StateStore, paths: JobPaths) -> JobTotals:
    """The job's change counts so far (``<state>/progress.json``); empty again when the checkpoint
    was started over (its last commit is older than the counts)."""
    totals = JobTotals.load(store)
    last = CheckpointFiles(paths.checkpoint).last("commits")
    if totals.batch > (-1 if last is None else last) + 1:  # the sinks may be one commit ahead of Spark
        log.info("the checkpoint restarted at batch %s: change counts start again from 0", last)
        totals = JobTotals(store)
    return totals


def catalog_dir(config: JobConfig) -> str:
    """Where a local job keeps its catalog (tables by name): ``<state_dir>/catalog``."""
    return f"{_absolute(config.state_path())}/catalog"


def job_session(config: JobConfig) -> Any:
    """The Spark session: the active one (spark-submit, notebooks), else ``local[parallelism]``
    with the job's catalog (:func:`catalog_dir`).

    Under spark-submit the master, the jars and the catalog come from spark-submit; they are never
    overridden (docs/operating/deployment.md). When spark-submit brought delta-spark's jar but not
    Delta's SQL settings, the session gets them (:func:`cdc.spark.session.submit_conf`).
    """
    from pyspark.sql import SparkSession

    from cdc.spark.session import local_session, submit_conf

    spark = SparkSession.getActiveSession()
    if spark is None and "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit
        builder = SparkSession.builder.appName("spark-cdc")
        for key, value in submit_conf().items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    if spark is None:
        spark = local_session("spark-cdc", parallelism=config.parallelism, catalog_dir=catalog_dir(config),
                              light_jvm=not jvm_merges(config), preload=job_modules(config))
    return spark


def job_modules(config: JobConfig) -> tuple[str, ...]:
    """The modules of the job's dialect and sinks: what its tasks import besides the task code,
    which the executors' Python daemon preloads (:mod:`cdc.spark.daemon`)."""
    return (dialect_module(config.source.type), *dict.fromkeys(sink_module(s.type) for s in config.sink))


def jvm_merges(config: JobConfig) -> bool:
    """Whether a sink of the job merges in the JVM (delta-spark's engine), which wants the JVM's
    default compilers and collector (:data:`cdc.spark.session.LIGHT_JVM_OPTIONS`)."""
    return any(getattr(sink, "engine", None) == "delta-spark" for sink in config.sink)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` instead of killing the driver (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.getsignal(s) for s in wanted}

    def handler(signum: int, _frame: Any) -> None:
        log.info("%s received: stopping the query (a batch cut short is replayed on restart)",
                 signal.Signals(signum).name)
        stop.set()

    for s in wanted:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class JobRunner:
    """Builds, runs and stops one job's streaming query.

    Args:
        config: the validated job file.
        spark: a Spark session to use (default: :func:`job_session`).
        hooks: crash points for tests (nothing in production).
        failover: accept a new source address for the checkpoint (`run --failover`).
    """

    def __init__(self, config: JobConfig, spark: Any | None = None, hooks: Hooks = NO_HOOKS,
                 failover: bool = False) -> None:
        self.config = config
        self.failover = failover  # accept a new source address (``run --failover``)
        self.paths = JobPaths.of(config)
        self.spark = spark
        self.hooks = hooks
        self.dialect: Dialect = create_dialect(config.source)
        self.batches: list[BatchRecord] = []  # what the last run committed, batch by batch
        self._schemas: dict[TableId, TableSchema] | None = None

    def check(self) -> dict[TableId, TableSchema]:
        """Connect and run the start-up checks; writes nothing.

        Raises:
            CdcError: SourceUnreachable, AuthenticationFailed, MissingPrivilege,
                BinlogNotConfigured, ConfigError (no table matched) or
                NoChunkKey; each message names the fix.
        """
        if self._schemas is None:
            self._schemas = table_schemas(self.dialect)
        return self._schemas

    def run(self, once: bool = False, stop: threading.Event | None = None,
            view: ProgressView | None = None) -> RunSummary:
        """Run until the data available at start is written (``once``) or until ``stop`` is set.

        Args:
            once: available-now: everything up to now, then stop.
            stop: set it to stop the query (SIGINT/SIGTERM set it in the main thread).
            view: where progress goes (default: bars on a terminal, else log lines).

        Raises:
            CdcError: a start-up check failed (nothing written), a folder cannot be written, the
                checkpoint is refused, or another running job holds it
                (:class:`~cdc.app.lock.CheckpointInUse`).
            JobFailed: the query stopped with an error.
        """
        schemas = self.check()
        check_writable("state_dir" if self.config.state_dir else "checkpoint", self.paths.state_dir)
        for key, path in sink_paths(self.config):
            check_writable(key, path)
        store = StateStore(self.paths.state_dir)
        lock = CheckpointLock(store, self.paths.checkpoint)
        lock.acquire()  # before anything is written: a second job on this checkpoint stops here
        try:
            idle = self._idle_run(schemas, store, view) if once else None
            return idle if idle is not None else self._run(schemas, store, once, stop or threading.Event(), view)
        finally:
            lock.release()

    def _idle_run(self, schemas: dict[TableId, TableSchema], store: StateStore,
                  view: ProgressView | None) -> RunSummary | None:
        """A ``--once`` run with nothing to do, without Spark: None when it has something to do,
        or cannot tell without a session (driver).

        Spark's available-now run would find that its source's latest offset is the offset of its
        last committed batch, plan no batch and stop; starting its JVM for that is most of such a
        run's time. So when the job would start its own local session, its checkpoint holds no
        batch to replay, and no sink needs Spark to open, the same decision is made here: the
        checkpoint is claimed (the source's identity checked), the planner's latest offset is
        asked as Spark would ask it, and if it is the committed one the sinks open (their recovery
        and checks run as always), close, and the summary is the run's.
        """
        if self.spark is not None or "PYSPARK_GATEWAY_PORT" in os.environ:  # a session exists already
            return None
        files = CheckpointFiles(self.paths.checkpoint)
        last = files.last("offsets")
        if last is None or files.last("commits") != last:  # a first run, or a batch to replay
            return None
        started = time.monotonic()
        store.delete(HOLD_FILE)
        job_id = claim_checkpoint(store, self.paths, source_identity(self.config, schemas), self.failover)
        sinks = [create_sink(c, job_id, None, self.hooks) for c in self.config.sink]
        if any(s.needs_spark(schemas, catalog_dir(self.config)) for s in sinks):
            return None
        committed = files.offset(last)
        spec = SourceSpec(self.dialect, self.paths.state_dir, self.config.parallelism, (), self.hooks, schemas)
        reader = stream_reader(spec)
        try:
            reader.prepareForTriggerAvailableNow()
            if reader.latestOffset(committed, reader.getDefaultReadLimit()) != committed:
                return None
        finally:
            reader.stop()
        log.info("nothing to do since batch %d: the source's log and snapshot are where the checkpoint "
                 "committed them (Spark not started)", last)
        for sink in sinks:
            sink.open(schemas)
        committer = BatchCommitter(schemas, sinks, self.hooks)
        tracker = ProgressTracker(self.dialect, self.config.source.chunk_size, job_totals(store, self.paths),
                                  view if view is not None else choose_view())
        try:
            _finish(committer)
        finally:
            tracker.close()
        return tracker.summary(committer, sinks, schemas, time.monotonic() - started)

    def _run(self, schemas: dict[TableId, TableSchema], store: StateStore, once: bool, stop: threading.Event,
             view: ProgressView | None) -> RunSummary:
        spark = self.spark if self.spark is not None else job_session(self.config)
        check_visible(spark, {"state_dir": self.paths.state_dir})
        totals = job_totals(store, self.paths)
        self.batches = []  # every query's batches: the committers share this list
        started = time.monotonic()
        stream = self._stream(spark, store, schemas, totals, once)
        tracker = ProgressTracker(self.dialect, self.config.source.chunk_size, totals,
                                  view if view is not None else choose_view())
        watcher = None if once else TableWatcher.of(self.dialect, schemas)
        try:
            with stop_on_signals(stop):
                while (tables := _wait(stream.query, stop, tracker, stream.committer, watcher, store,
                                       self._committed_through)) is not None:
                    assert watcher is not None
                    _finish(stream.committer)
                    self._schemas = schemas = watcher.schemas(tables)
                    stream = self._stream(spark, store, schemas, totals, once)
        except BaseException:
            # A failed run still stops its sinks' background work (a mirror MERGE in flight), so
            # that a restart in this process never races it; the run's own error is the one raised.
            with contextlib.suppress(Exception):
                stream.committer.close()
            tracker.close()
            raise
        try:
            _finish(stream.committer)  # the sinks finish their background work before the summary
        finally:
            tracker.close()
        return tracker.summary(stream.committer, stream.sinks, schemas, time.monotonic() - started)

    def _committed_through(self, position: Offset) -> bool:
        """Whether the checkpoint's newest committed batch read the log through ``position``."""
        end = CheckpointFiles(self.paths.checkpoint).committed_offset(self.dialect.offset_from_dict)
        return end is not None and not end.position.is_before(position)

    def _stream(self, spark: Any, store: StateStore, schemas: dict[TableId, TableSchema], totals: JobTotals,
                once: bool) -> _Stream:
        """Claim the checkpoint for ``schemas``, open the sinks and start the query."""
        store.delete(HOLD_FILE)  # the last query's hold (or a crashed run's)
        job_id = claim_checkpoint(store, self.paths, source_identity(self.config, schemas), self.failover)
        sinks = self.open_sinks(job_id, spark, schemas)
        committer = BatchCommitter(schemas, sinks, self.hooks, on_commit=totals.add)
        committer.batches = self.batches
        spec = SourceSpec(self.dialect, self.paths.state_dir, self.config.parallelism,
                          tuple(s.writer() for s in sinks), self.hooks, schemas)
        query = self._start(spark, spec, committer, once)
        log.info("query started: %d table(s) into %s, checkpoint %s, %s", len(schemas),
                 ", ".join(s.describe() for s in sinks), self.paths.checkpoint,
                 "available-now (--once)" if once else f"every {self.config.trigger_interval}")
        return _Stream(query, committer, sinks)

    def open_sinks(self, job_id: str, spark: Any, schemas: dict[TableId, TableSchema]) -> list[Sink]:
        """The job's sinks from the registry, opened (recovered after a crash)."""
        sinks = [create_sink(c, job_id, spark, self.hooks) for c in self.config.sink]
        for sink in sinks:
            sink.open(schemas)
        return sinks

    def _start(self, spark: Any, spec: SourceSpec, committer: BatchCommitter, once: bool) -> Any:
        source = packed_job_source(spec)
        spark.dataSource.register(source)
        fork_free_checkpoints(spark, self.paths.checkpoint)
        df = observed(spark.readStream.format(source.name()).load())
        stream = df.writeStream.foreachBatch(committer).option("checkpointLocation", self.paths.checkpoint)
        if once:
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=f"{parse_duration_s(self.config.trigger_interval)} seconds")
        return stream.start()


@dataclass(frozen=True)
class _Stream:
    """One streaming query of a run, with the sinks it commits to."""

    query: Any
    committer: BatchCommitter
    sinks: list[Sink]


def _wait(query: Any, stop: threading.Event, tracker: ProgressTracker, committer: BatchCommitter,
          watcher: TableWatcher | None, store: StateStore,
          committed_through: Callable[[Offset], bool]) -> frozenset[TableId] | None:
    """Report progress until the query ends or ``stop`` is set (then stop it), or until the
    watcher finds tables that join or leave: then hold the source (:data:`~cdc.spark.source.
    HOLD_FILE` in ``store``: no new batch is planned), stop the query once the running batch has
    ended, and return the tables to capture from now on. When a table is gone, the query first
    runs on until it has committed the log through :attr:`TableWatcher.drain_to` (past the drop),
    so the table's last changes reach the sinks before it leaves.

    Raises:
        JobFailed: the query failed (unless a captured table is gone: then the new tables).
    """
    from pyspark.errors import StreamingQueryException

    tables, drain, held = None, None, 0.0
    try:
        while not query.awaitTermination(POLL_S):
            tracker.update(query.recentProgress, committer)
            if tables is None and watcher is not None and (tables := watcher.poll()) is not None:
                drain = watcher.drain_to
                if drain is not None:
                    log.info("the query runs on until it has read the log through %s (past the drop), "
                             "so the changes made just before it reach the sinks", drain)
            if tables is not None and not held and (drain is None or committed_through(drain)):
                store.write_json(HOLD_FILE, {"why": "the captured tables changed"})
                held = time.monotonic()
            if stop.is_set() or (held and _idle(query, held)):
                query.stop()
                break
    except StreamingQueryException as exc:
        tables = watcher.after_failure() if watcher is not None else None
        if tables is None:
            raise JobFailed(root_cause(exc)) from None
        log.warning("the query stopped (%s) after a captured table was dropped: it starts again without it",
                    root_cause(exc))
    finally:
        with contextlib.suppress(Exception):
            tracker.update(query.recentProgress, committer)
    return None if stop.is_set() else tables


def _idle(query: Any, held: float) -> bool:
    """The held query runs no batch (or one has run for :data:`HOLD_WAIT_S`: it is stopped
    anyway, and replayed by the next query)."""
    return not query.status["isTriggerActive"] or time.monotonic() - held > HOLD_WAIT_S


def _finish(committer: BatchCommitter) -> None:
    """Wait for the sinks' background work (the mirror catching up) at the end of a query.

    Raises:
        JobFailed: a sink's background work failed (a restart recovers it).
    """
    try:
        committer.close()
    except Exception as exc:
        raise JobFailed(f"a sink could not finish the last batches (a restart recovers them): "
                        f"{root_cause(exc)}") from None


def root_cause(exc: BaseException) -> str:
    """The first line naming one of our errors in a Spark failure, else its first line."""
    text = str(exc)
    names = {c.__name__ for c in _subclasses(CdcError)}
    for line in reversed(text.splitlines()):
        head = line.strip().split(":", 1)
        if len(head) == 2 and head[0].rsplit(".", 1)[-1] in names:
            return head[1].strip()
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _subclasses(cls: type[CdcError]) -> Iterator[type[CdcError]]:
    subs: list[type[CdcError]] = cls.__subclasses__()
    for sub in subs:
        yield sub
        yield from _subclasses(sub)
