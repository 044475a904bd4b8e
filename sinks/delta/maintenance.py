"""The job keeps its own Delta tables fast to read: compaction (OPTIMIZE) and VACUUM.

Every batch adds files. The changelog gets a small file per stream task and batch: a day of one
batch a second is 86,400 files or more, and readers pay per file. The mirror's MERGE rewrites
the files holding changed keys, and a batch that touches every file writes its new rows to new
files (:mod:`sinks.delta.rewrite`), so small files pile up there too. So the job maintains both
tables (``sink.maintenance``, on by default):

* **When:** after every ``every`` batches that wrote a table, once the mirror has merged them,
  or once ``interval_minutes`` have passed since the table's last maintenance (or its creation)
  and a batch has written it since: a table that gets a few batches an hour would otherwise keep
  its small files for days. A process counts its own batches, after the batches the changelog
  committed since its last compaction, and takes the time of that compaction from the
  changelog's log (both read back once per table), so a job run in short runs (``--once`` on a
  schedule) is maintained too. The mirror follower wakes up for a table that falls due by time
  while the job is idle. The mirror's maintenance runs in the thread that writes the mirror
  (a compaction and a MERGE of the same table conflict): with ``async_mirror`` (the default) the
  mirror follower's, after a MERGE, so it adds nothing to a batch's latency; without it, at the
  end of the batch. The changelog's runs in a thread of its own (the job's sink), beside the
  MERGEs and the batches' appends, which conflict with it in nothing: its first compaction after
  a snapshot rewrites every snapshot row (12M at TPC-DS SF1000) and, in the follower's thread,
  held the mirror back by 16 s. A schema change waits for it (a new schema and a compaction
  conflict), and so does the job's end; a failure surfaces at the next batch.
* **Compaction:** the files smaller than the target size (``mirror_file_size``,
  ``changelog_file_size``) are rewritten into files of about that size, in one commit that
  changes no data (``dataChange: false``), created only if no other writer committed since the
  compaction read the table (:mod:`sinks.delta.compaction`: delta-rs's own compaction would
  commit over a platform's compaction of the same files, every row twice). Stream readers of the changelog skip it, and the app
  transactions stay, so replays are still recognised. A crash during it leaves unreferenced
  files, which a later VACUUM deletes.
* **Deletion vectors** (``sink.deletion_vectors``): the mirror's files whose vectors hide half
  their rows or more are rewritten without them first (:func:`sinks.delta.deletion_vectors.purge`),
  and only the files under half the target size are compacted: the snapshot's files stay (a
  compaction that rewrote them all stalled the mirror for 28 s at TPC-DS SF1000), while the
  small files of new rows are combined. VACUUM also deletes the deletion-vector files that no
  live file and no version within the retention uses (delta-rs's keeps them all).
* **Other writers:** a compaction or purge that loses a race with another writer's commit (a
  platform's OPTIMIZE of the same files) is skipped until the next maintenance: the other
  writer's commit stands, and the tables are as it left them (:mod:`sinks.delta.conflicts`).
* **VACUUM:** then deletes the files that left each table ``vacuum_retention_hours`` ago or
  earlier, and the files no commit references that are as old: the leftovers of a crash. It
  keeps the changelog files that the mirror may still need. After a crash the mirror catches up
  by reading the files that the changelog's commits of its missing batches added
  (:func:`sinks.delta.follower.changelog_batches_after`). A compaction removes those from the
  table, so the VACUUM keeps every file that was live just before each compaction that came
  after such a commit (delta-rs's ``keep_versions``). The mirror trails by a few batches, so
  that is at most the files of the last compaction or two, until the next maintenance.

The job does the work for both engines, without Spark (:mod:`sinks.delta.compaction` on a local
table, delta-rs's compaction on an object store, delta-rs's VACUUM). It compacts the delta-spark
engine's mirror too, whose files carry deletion vectors (the rows they hide stay out of the new
files), in milliseconds where Spark's OPTIMIZE took seconds and its VACUUM two minutes on the same
small table here.

The mirror's target size is also its ``delta.targetFileSize``, which delta-rs's MERGE follows. A
MERGE rewrites each touched file whole, into files of at most that size. Without the cap
(delta-rs's default is 100 MiB), a burst of updates in key order merges each touched file with
the next one. The result is one ever larger file, until every MERGE rewrites 100 MiB and holds
it in the driver's memory.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from deltalake import DeltaTable, WriterProperties

from cdc.model.errors import CdcError
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId
from sinks.delta.commits import MissingCommit, commits_newest_first, table_fs
from sinks.delta.compaction import compact
from sinks.delta.conflicts import CONFLICTS, replanning
from sinks.delta.deletion_vectors import PROP_ENABLED as PROP_DELETION_VECTORS
from sinks.delta.deletion_vectors import enabled as deletion_vectors_enabled
from sinks.delta.deletion_vectors import purge, unused_files
from sinks.delta.engines import DeltaTables
from sinks.delta.files import local_dir
from sinks.delta.tables import PROP_KEY, TableKind, open_table

log = logging.getLogger(__name__)


class MaintenanceFailed(CdcError):
    """A compaction or VACUUM failed (the tables are as before: each is one commit, or none)."""


PROP_TARGET_SIZE = "delta.targetFileSize"
# Rows per row group of a compacted file: readers split a file by row groups (DuckDB read a
# changelog compacted into one 800,000-row group 2.1x slower than its small files).
ROW_GROUP_ROWS = 131_072


class Maintainer:
    """Counts the batches that wrote each table, and maintains the tables that are due.

    :meth:`wrote` is called from the batch's thread; :meth:`run_due` from whichever thread
    writes the mirror (the follower's, or the batch's without ``async_mirror``).

    Args:
        tables: the job's tables (the engine that compacts and vacuums them).
        hooks: passed ``maintenance`` before a table's maintenance, and again before its
            changelog's (crash tests).
        clock: the wall clock, in epoch seconds (tests move it).
        background: maintain the changelogs in a thread of this maintainer's (then
            :meth:`raise_error`, :meth:`drain` and :meth:`close` apply); False: in the caller's.
    """

    def __init__(self, tables: DeltaTables, hooks: Hooks = NO_HOOKS,
                 clock: Callable[[], float] = time.time, background: bool = False) -> None:
        self.tables = tables
        self.config = tables.config.maintenance
        self.hooks = hooks
        self.clock = clock
        self.runs = 0
        self._written: dict[TableId, int] = {}
        self._last: dict[TableId, float] = {}  # when each counted table was last maintained or created
        self._counted_before: set[TableId] = set()  # tables whose earlier runs' batches are counted
        self._lock = threading.Lock()
        self.background = background
        self._pool: ThreadPoolExecutor | None = None  # started with the first work, stopped by close()
        self._changelogs: dict[TableId, Future[None]] = {}  # the background's latest work per table

    @property
    def enabled(self) -> bool:
        return self.config.every > 0

    def prepare_mirror(self, table_id: TableId) -> None:
        """Set the mirror's table properties before its MERGEs: ``delta.targetFileSize`` to
        ``mirror_file_size`` when it differs, and deletion vectors on a mirror with a primary key
        that the delta-rs engine writes when ``sink.deletion_vectors`` asks for them: ``true``, or
        ``auto`` for a mirror just created (version 0) on a local path
        (:mod:`sinks.delta.deletion_vectors`; never turned off again: its files may carry some).

        Call it while nothing else writes the mirror: before the follower starts, or before a
        new table's first batch (a properties commit conflicts with a concurrent MERGE).
        """
        uri = self.tables.config.uri(table_id, "mirror")
        table = open_table(uri, self.tables.config.storage_options)
        if table is None:
            return
        current = table.metadata().configuration
        wanted = {PROP_TARGET_SIZE: str(self.config.mirror_file_size)}
        if self.tables.engine_name == "delta-rs" and json.loads(current.get(PROP_KEY, "[]")) and \
                self.tables.config.wants_deletion_vectors(new=table.version() == 0):
            wanted[PROP_DELETION_VECTORS] = "true"
        if any(current.get(k) != v for k, v in wanted.items()):
            def fresh() -> DeltaTable:
                table.update_incremental()
                return table

            # planned again when a platform's property change takes the version first (delta-rs:
            # "Metadata changed"); its properties stay beside these
            replanning(fresh, lambda t: t.alter.set_table_properties(wanted, raise_if_not_exists=False),
                       self.tables.config.storage_options, self.tables.app_id, f"the mirror of {table_id}'s properties",
                       self.hooks)
            if PROP_DELETION_VECTORS in wanted and current.get(PROP_DELETION_VECTORS) != "true":
                log.info("mirror of %s: its MERGEs write deletion vectors (sink.deletion_vectors); read it with "
                         "Spark, DuckDB, Polars or delta-rs's scan()/QueryBuilder, not delta-rs's to_pandas() or "
                         "to_pyarrow_table(); `sink.deletion_vectors: false` keeps new mirrors copy-on-write",
                         table_id)

    def wrote(self, table_id: TableId) -> None:
        """Count a batch that committed rows to ``table_id``'s tables."""
        with self._lock:
            self._written[table_id] = self._written.get(table_id, 0) + 1

    def due(self) -> list[TableId]:
        """The tables written by ``every`` batches or more since their last maintenance, or
        written since and last maintained ``interval_minutes`` ago or earlier."""
        if not self.enabled:
            return []
        with self._lock:
            return sorted(t for t, n in self._written.items()
                          if n >= self.config.every or (n and self._seconds_left(t) == 0))

    def seconds_until_due(self) -> float | None:
        """How long until a table written since its last maintenance falls due by time (0: one
        is due now); None: none will without another batch (the mirror follower sleeps until
        then when idle)."""
        if not self.enabled:
            return None
        with self._lock:
            left = [self._seconds_left(t) for t, n in self._written.items() if n]
        return min((s for s in left if s is not None), default=None)

    def _seconds_left(self, table_id: TableId) -> float | None:
        """Seconds until ``table_id``'s interval has passed; None: no interval, or the table's
        last maintenance is not read back yet (:meth:`run_due` does that)."""
        last = self._last.get(table_id)
        if not self.config.interval_minutes or last is None:
            return None
        return max(0.0, last + self.config.interval_minutes * 60 - self.clock())

    def run_due(self) -> None:
        """Maintain every table that is due. Call it once the mirror has merged what the
        changelog holds, from the thread that writes the mirror."""
        if not self.enabled:
            return
        with self._lock:
            new = [t for t in self._written if t not in self._counted_before]
        for table_id in new:
            self._count_earlier_batches(table_id)
        for table_id in self.due():
            self.maintain(table_id)

    def _count_earlier_batches(self, table_id: TableId) -> None:
        """Count the commits that added changelog files since its last compaction (up to
        ``every``; this process's own among them, so the count is the larger of the two), and
        take the time of that compaction, or of the table's first commit."""
        changelog = self._table(table_id, "changelog")
        commits = 0
        since = self.clock()  # a commit without a time: the interval counts from now
        try:
            for commit in commits_newest_first(table_fs(changelog.table_uri, self.tables.config.storage_options),
                                               changelog.version(), self.tables.app_id):
                if commits >= self.config.every:
                    break
                if commit.timestamp is not None:
                    since = commit.timestamp / 1000
                if commit.operation == "OPTIMIZE":
                    break
                commits += bool(commit.added)
        except MissingCommit:  # the log's retention is behind us: long enough ago
            commits = self.config.every
        with self._lock:
            self._written[table_id] = max(self._written.get(table_id, 0), commits)
            self._last.setdefault(table_id, since)
            self._counted_before.add(table_id)

    def maintain(self, table_id: TableId) -> None:
        """Compact the table's mirror and changelog, then VACUUM them (keeping the changelog
        files the mirror may still need). The changelog's goes to the background, if there is
        one, unless its last is still running there (its next falls due with later batches)."""
        self.hooks.reached("maintenance")
        self.raise_error()
        with self._lock:
            self._written[table_id] = 0
            self._last[table_id] = self.clock()
        if not self.background:
            self._maintain_changelog(table_id)
        elif (running := self._changelogs.get(table_id)) is None or running.done():
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="changelog-maintenance")
            self._changelogs[table_id] = self._pool.submit(self._maintain_changelog, table_id)
        self._guarded(table_id, "mirror", self._mirror_maintenance)
        self.runs += 1

    def raise_error(self) -> None:
        """Raise what the background's maintenance of a changelog raised (None: nothing yet)."""
        for work in list(self._changelogs.values()):
            if work.done() and work.exception() is not None:
                raise work.exception()  # type: ignore[misc]

    def drain(self) -> None:
        """Wait until the background has maintained every changelog given to it; raise its error."""
        for work in list(self._changelogs.values()):
            work.exception()  # waits
        self.raise_error()

    def close(self) -> None:
        """Drain, then stop the background's thread."""
        try:
            self.drain()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _maintain_changelog(self, table_id: TableId) -> None:
        self.hooks.reached("maintenance")  # outside the guard: crash tests see their own fault
        self._guarded(table_id, "changelog", self._changelog_maintenance)

    def _guarded(self, table_id: TableId, kind: TableKind, work: Callable[[TableId], str]) -> None:
        began = time.perf_counter()
        try:
            done = work(table_id)
        except CONFLICTS as exc:  # another writer compacted or purged the same files first: its work stands
            log.info("maintenance of %s's %s skipped this time: another writer committed to it first (%s)", table_id,
                     kind, str(exc).splitlines()[0][:200])
            return
        except Exception as exc:
            raise MaintenanceFailed(f"maintenance (compaction, VACUUM) of {table_id}'s Delta {kind} failed: {exc}; "
                                    "the table is unchanged and a restart retries it; `sink.maintenance.every: 0` "
                                    "turns maintenance off", table=str(table_id)) from exc
        log.info("maintenance of %s's %s: %s; %.2f s", table_id, kind, done, time.perf_counter() - began)

    def _changelog_maintenance(self, table_id: TableId) -> str:
        compacted = self._compact(self._table(table_id, "changelog"), "changelog", self.config.changelog_file_size)
        keep = self._kept_for_mirror(table_id)
        kept = f" (kept the files of changelog versions {keep} for the mirror)" if keep else ""
        return f"compacted {compacted}; VACUUM deleted {self._vacuum(table_id, 'changelog', keep)} files{kept}"

    def _mirror_maintenance(self, table_id: TableId) -> str:
        table, size, purged = self._table(table_id, "mirror"), self.config.mirror_file_size, ""
        if deletion_vectors_enabled(table):
            # the files mostly hidden by deletion vectors rewritten, a few at a time; then only the
            # small files compacted (the new rows' files): rewriting the snapshot's files too
            # stalled the mirror for 28 s at TPC-DS SF1000 (12M rows)
            purged = f"{purge(table)} files purged of their deleted rows, "
            size //= 2
        compacted = self._compact(table, "mirror", size)
        return f"{purged}compacted {compacted}; VACUUM deleted {self._vacuum(table_id, 'mirror', [])} files"

    def _compact(self, table: DeltaTable, kind: TableKind, size: int) -> str:
        if local_dir(table.table_uri) is not None:  # committed only if no other writer committed since its read
            metrics = compact(table, kind, size, ROW_GROUP_ROWS, self.hooks)
        else:
            metrics = table.optimize.compact(
                target_size=size, max_concurrent_tasks=1,
                writer_properties=WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression="SNAPPY"))
        return f"{metrics['numFilesRemoved']} files into {metrics['numFilesAdded']}"

    def _table(self, table_id: TableId, kind: TableKind) -> DeltaTable:
        return DeltaTable(self.tables.config.uri(table_id, kind), storage_options=self.tables.config.storage_options or None)

    def _vacuum(self, table_id: TableId, kind: TableKind, keep: list[int]) -> int:
        table = self._table(table_id, kind)
        deleted = len(table.vacuum(
            retention_hours=self.config.vacuum_retention_hours, dry_run=False, enforce_retention_duration=False,
            keep_versions=keep or None))
        for path in unused_files(table, self.config.vacuum_retention_hours):  # delta-rs keeps them all
            os.remove(path)
            deleted += 1
        return deleted

    def _kept_for_mirror(self, table_id: TableId) -> list[int]:
        """The changelog versions whose live files a VACUUM must keep: the version before each
        compaction that came after a commit of a batch the mirror lacks."""
        mirror = self.tables.batch_version(table_id, "mirror")
        newest = self.tables.batch_version(table_id, "changelog")
        if newest is None or (mirror is not None and newest <= mirror):
            return []  # the mirror lacks nothing (a snapshot's commits carry no batch): no walk through the log
        changelog = self._table(table_id, "changelog")
        compactions: list[int] = []
        needed: int | None = None  # the oldest commit of a batch the mirror lacks
        try:
            for commit in commits_newest_first(table_fs(changelog.table_uri, self.tables.config.storage_options),
                                               changelog.version(), self.tables.app_id):
                if commit.operation == "OPTIMIZE":
                    compactions.append(commit.version)
                elif commit.batch is not None:
                    if mirror is not None and commit.batch <= mirror:
                        break
                    needed = commit.version
        except MissingCommit:  # the log's retention went further back than the mirror: keep them all
            return sorted(c - 1 for c in compactions)
        return sorted(c - 1 for c in compactions if needed is not None and c > needed)
