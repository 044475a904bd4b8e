"""The mirror follows the changelog: MERGEs run behind the batches, coalesced, in one thread.

A copy-on-write MERGE rewrites every file that holds a changed key. With random keys that is
the whole mirror: about 3 s per batch for TPC-DS customer at SF100 (2M rows) here, whether the
batch changes 300 rows or 3,000. Run inline, that cost sits between every batch and the next,
and so in the visibility latency of every change, in the changelog too.

So a batch commits its changelog rows inline (tens of milliseconds) and hands its change files
(and the tasks' reduction of them, :func:`merge_into_mirror`) to
:class:`MirrorFollower`, whose thread MERGEs whatever has queued since its last MERGE as one
batch, committed with the app transaction of the newest batch it contains. The queue is ordered,
and the last image per key of several batches in order is the last image of their union, so a
coalesced MERGE equals the MERGEs one by one.

Exactly-once: the changelog is the record. If the process dies with MERGEs queued, Spark does
not replay those batches (its commit log has them), but their rows are in the changelog, each
commit tagged with its batch id. :meth:`MirrorFollower.recover` (run before the first batch)
reads the changelog commits of the batches after the mirror's own batch id and MERGEs them.
Snapshot file commits wait for the queue to drain (:meth:`drain`), so the mirror sees every
table's rows in batch order. ``drain`` also ends every run: the mirror then equals the source
at the position the job reached.
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdc.model.errors import CdcError, Terminal
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from sinks.changes import changelog_schema, conform
from sinks.delta.commits import MissingCommit, commits_newest_first, table_fs
from sinks.delta.engines import DeltaTables
from sinks.delta.files import StagedFile, discard_files, read_change_files
from sinks.delta.maintenance import Maintainer

log = logging.getLogger(__name__)

Changes = dict[TableId, "pa.Table | list[StagedFile]"]  # rows, or changelog files holding them

# A coalesced MERGE takes queued batches up to about this many change rows (at least one batch):
# the rows are read into the driver for it, so a backlog queued behind a slow MERGE must not
# arrive all at once (source.max_batch_bytes bounds one batch).
MERGE_ROWS = 500_000


class ChangelogGap(CdcError, Terminal):
    """The mirror is behind the changelog, and the changelog no longer holds the missing commits."""


class MirrorFollower:
    """Applies change batches to the mirrors behind the changelog (driver, one thread).

    Args:
        sink: the sink whose mirrors follow (its changelogs are already written).
        schemas: the captured tables.
        hooks: passed ``mirror`` in the thread before each MERGE (crash tests).
        maintainer: maintains the tables that are due after the queued batches are merged
            (:mod:`sinks.delta.maintenance`); None: none.
    """

    def __init__(self, sink: DeltaTables, schemas: dict[TableId, TableSchema],
                 hooks: Hooks = NO_HOOKS, maintainer: Maintainer | None = None) -> None:
        self.sink = sink
        self.schemas = schemas
        self.hooks = hooks
        self.maintainer = maintainer
        self.merges = 0
        self._queue: list[tuple[int, Changes]] = []
        self._busy = False
        self._error: BaseException | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    # --- caller side (foreachBatch) -------------------------------------------------------------

    def recover(self) -> int:
        """MERGE the changelog batches the mirrors lack (after a crash). Returns how many."""
        applied = 0
        for schema in self.schemas.values():
            batches = changelog_batches_after(self.sink, schema, self._mirror_version(schema))
            if batches:
                rows = pa.concat_tables([t for _, t in batches])
                self.sink.write_mirror(schema, rows, batches[-1][0])
                log.info("mirror of %s caught up from its changelog: batches %d..%d, %d rows",
                         schema.table_id, batches[0][0], batches[-1][0], rows.num_rows)
                applied += len(batches)
        return applied

    def submit(self, batch_id: int, changes: Changes) -> None:
        """Queue one batch's change rows for the mirrors: per table, the rows (change-batch
        layout) or the changelog files that hold them (read in the follower's thread)."""
        self.raise_error()
        if not changes:
            return
        with self._cond:
            self._queue.append((batch_id, changes))
            self._closed = False  # a closed follower that gets work again starts a new thread
            self._cond.notify_all()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="mirror-follower", daemon=True)
            self._thread.start()

    def drain(self) -> None:
        """Wait until every queued batch is in the mirrors.

        Raises:
            BaseException: what a MERGE raised (the mirror stays behind; a restart recovers).
        """
        with self._cond:
            self._cond.wait_for(lambda: (not self._queue and not self._busy) or self._error is not None)
        self.raise_error()

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Drain, then stop the thread."""
        try:
            self.drain()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    # --- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                # idle, it wakes up when a table falls due for maintenance by time
                idle = None if self.maintainer is None else self.maintainer.seconds_until_due()
                self._cond.wait_for(lambda: self._queue or self._closed, timeout=idle)
                if self._closed and not self._queue:
                    return
                work, self._queue, self._busy = self._queue, [], True
            try:
                for group in _groups(work, MERGE_ROWS):
                    self._merge(group)
                if self.maintainer is not None:
                    self.maintainer.run_due()  # here, off the batches' path
            except BaseException as exc:  # handed to the caller's next submit/drain
                done = f"batches {work[0][0]}..{work[-1][0]}" if work else "an idle wait"
                log.error("mirror MERGE (or maintenance) after %s failed: %s", done, exc)
                with self._cond:
                    self._error, self._busy = exc, False
                    self._cond.notify_all()
                return
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _merge(self, work: list[tuple[int, Changes]]) -> None:
        self.hooks.reached("mirror")
        last = work[-1][0]
        for table_id, schema in list(self.schemas.items()):  # the sink may evolve one meanwhile
            parts = [changes[table_id] for _, changes in work if table_id in changes]
            if parts:
                began = time.perf_counter()
                how = merge_into_mirror(self.sink, schema, parts, last)
                log.info("mirror of %s follows batches %d..%d: %s in %.2f s", table_id, work[0][0], last, how,
                         time.perf_counter() - began)
        self.merges += 1

    def _mirror_version(self, schema: TableSchema) -> int:
        try:
            table = DeltaTable(self.sink.config.uri(schema.table_id, "mirror"),
                               storage_options=self.sink.config.storage_options or None)
        except TableNotFoundError:
            return -1
        version = table.transaction_version(self.sink.app_id)
        return -1 if version is None else int(version)


def merge_into_mirror(sink: DeltaTables, schema: TableSchema, parts: list[pa.Table | list[StagedFile]],
                      last: int) -> str:
    """Apply one or more batches' changes of a table to its mirror, as batch ``last``; says how.

    When the tasks staged every part reduced per key (:func:`sinks.delta.files.write_mirror_effects`)
    and the mirror takes that (:meth:`DeltaTables.merge_staged`), their files are merged; else the
    changelog files' rows are read here (not in the batch) and merged, and the reduced files are
    deleted."""
    staged = [f for part in parts if not isinstance(part, pa.Table) for f in part if f.kind == "mirror"]
    complete = all(not isinstance(part, pa.Table) and _reduced_everywhere(part) for part in parts)
    if staged and complete and sink.merge_staged(schema, staged, last) is not None:
        return f"{len(staged)} reduced files of the tasks, {sum(f.num_records for f in staged)} rows"
    if staged and not complete:
        discard_files(sink.config, schema, staged)
    began = time.perf_counter()
    rows = pa.concat_tables([p if isinstance(p, pa.Table) else read_change_files(sink.config, schema, p)
                             for p in parts])
    read = time.perf_counter() - began
    sink.write_mirror(schema, rows, last)
    return f"{rows.num_rows} change rows read in {read:.2f} s"


def _reduced_everywhere(files: list[StagedFile]) -> bool:
    """Whether every changelog file of a batch has its reduced mirror files (they follow it)."""
    return all(i + 1 < len(files) and files[i + 1].kind == "mirror" for i, f in enumerate(files) if f.kind == "changelog")


def _rows_in(changes: Changes) -> int:
    return sum(c.num_rows if isinstance(c, pa.Table) else sum(f.num_records for f in c if f.kind == "changelog")
               for c in changes.values())


def _groups(work: list[tuple[int, Changes]], max_rows: int) -> list[list[tuple[int, Changes]]]:
    """Consecutive queued batches, each group up to ``max_rows`` change rows (or one batch)."""
    groups: list[list[tuple[int, Changes]]] = []
    rows = 0
    for item in work:
        n = _rows_in(item[1])
        if not groups or rows + n > max_rows:
            groups.append([])
            rows = 0
        groups[-1].append(item)
        rows += n
    return groups


def changelog_batches_after(sink: DeltaTables, schema: TableSchema, after: int) -> list[tuple[int, pa.Table]]:
    """The change rows the changelog holds for batches after ``after``, oldest batch first.

    Reads the changelog's commit files backwards until the commit of batch ``after`` or older:
    each commit of the sink's batch writer carries its batch id as the app transaction version.

    Raises:
        ChangelogGap: a commit file needed is gone (log retention): the mirror cannot be
            rebuilt from the changelog; take a new snapshot.
    """
    uri = sink.config.uri(schema.table_id, "changelog")
    try:
        table = DeltaTable(uri, storage_options=sink.config.storage_options or None)
    except TableNotFoundError:
        return []
    newest = table.transaction_version(sink.app_id)
    if newest is None or newest <= after:
        return []
    fs = table_fs(uri, sink.config.storage_options)
    found: list[tuple[int, list[str]]] = []
    try:
        for commit in commits_newest_first(fs, table.version(), sink.app_id):
            if commit.batch is None:
                continue  # another writer's commit (snapshot files, table creation, maintenance)
            if commit.batch <= after:
                break
            found.append((commit.batch, commit.added))
    except MissingCommit as exc:
        raise _gap(schema, f"{exc} (log retention removed it)") from None
    storage = changelog_schema(schema)
    try:
        return [(batch, pa.concat_tables([conform(pq.read_table(p, filesystem=fs), storage) for p in paths]))
                for batch, paths in sorted(found) if paths]
    except FileNotFoundError as exc:
        raise _gap(schema, f"a data file of a batch after {after} ({exc})", VACUUMED) from None


# Why a changelog's data file of a batch the mirror lacks is gone: the job's own VACUUM keeps them
# (sinks/delta/maintenance.py), another writer's does not once a compaction removed them
VACUUMED = ("another writer's VACUUM of the changelog deleted it after a compaction: keep the retention "
            "of VACUUMs on the changelog above the longest the job may be stopped, and an hour at least "
            "(docs/operating/maintenance.md)")


def _gap(schema: TableSchema, what: str, cause: str = "") -> ChangelogGap:
    return ChangelogGap(f"the changelog of {schema.table_id} no longer has {what}, which its mirror "
                        f"needs to catch up after a crash{f' ({cause})' if cause else ''}: take a new snapshot "
                        "into a new sink path and checkpoint", table=str(schema.table_id))
