"""Progress of a running job: each table's snapshot and change counts, the lag, a summary.

Runs on the driver, fed by two things:

* Spark's progress reports (``query.recentProgress``), whose end offsets
  (:class:`~cdc.spark.offsets.SourceOffset` as JSON) carry each table's snapshot progress
  (chunks emitted, the splitter's row estimate) and the log position;
* the batch committer's records (:class:`~cdc.spark.commit.BatchRecord`), which count the
  change rows each batch committed per table, from the writers' manifests. Spark's own row
  count (``numInputRows``) counts manifests, not changes, and is never shown.

:class:`JobTotals` adds the records up across runs in ``<state>/progress.json`` (what
``python -m cdc status`` reads). :class:`ProgressTracker` turns both into a :class:`Progress`
per batch and hands it to a view (:class:`PlainView` log lines, or :mod:`cdc.app.live`'s bars on a terminal).
A plain line looks like::

    batch 7: 4096 changes (3120/s) | shop.orders +4000 (chunks 12/~40, rows 4800/~16000), shop.items +96 | log mysql-bin.000003:1547 lag 0.8s

``~`` marks an estimate: total chunks is (row estimate / chunk size) until the last chunk is cut,
and total rows is the server's estimate until the table's snapshot is done. Lag is 0 when the
batch ended at the server's current log position (nothing newer to read), else the age of the
batch's end: the sinks hold every change up to that moment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from binlog.dialect import Dialect
from cdc.model.schema import TableId, TableSchema
from cdc.spark.commit import BatchCommitter, BatchRecord
from cdc.spark.state import StateStore
from sinks.base import Sink

log = logging.getLogger(__name__)

PROGRESS_FILE = "progress.json"
LAG_REFRESH_S = 2.0  # the heartbeat asks the server for its position at most this often


# --- counts across runs -------------------------------------------------------------------------

@dataclass
class TableTotals:
    """One table's committed change rows since the checkpoint began."""

    snapshot_rows: int = 0
    change_rows: int = 0
    last_commit_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_rows": self.snapshot_rows, "change_rows": self.change_rows,
                "last_commit_ms": self.last_commit_ms}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableTotals:
        last = d.get("last_commit_ms")
        return cls(int(d.get("snapshot_rows", 0)), int(d.get("change_rows", 0)),
                   None if last is None else int(last))


class JobTotals:
    """Change rows committed per table, across runs, in ``<state>/progress.json``.

    Runs on the driver: :meth:`add` is the committer's ``on_commit``, called once every sink
    committed a batch. A batch is counted once: a replayed batch (its id at or below the last one
    counted) adds nothing. The counts are informative; a crash between the sinks' commit and
    this file's write loses one batch's counts, never data.

    Args:
        store: the job's state directory (None: keep the counts in memory only).
    """

    def __init__(self, store: StateStore | None = None) -> None:
        self.store = store
        self.batch = -1
        self.committed_ms: int | None = None
        self.tables: dict[str, TableTotals] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, store: StateStore) -> JobTotals:
        """The totals a previous run left (empty for a new job, or an unreadable file)."""
        totals = cls(store)
        if store.exists(PROGRESS_FILE):
            try:
                totals._read(store.read_json(PROGRESS_FILE))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s/%s is unreadable (%s): change counts start again from 0",
                            store.root, PROGRESS_FILE, exc)
        return totals

    def _read(self, d: dict[str, Any]) -> None:
        self.batch = int(d["batch"])
        self.committed_ms = None if d.get("committed_ms") is None else int(d["committed_ms"])
        self.tables = {t: TableTotals.from_dict(v) for t, v in d.get("tables", {}).items()}

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "committed_ms": self.committed_ms,
                "tables": {t: v.to_dict() for t, v in sorted(self.tables.items())}}

    def add(self, record: BatchRecord) -> None:
        """Count a committed batch (replays count nothing); never raises."""
        with self._lock:
            if record.batch_id <= self.batch:
                return
            self.batch, self.committed_ms = record.batch_id, record.committed_ms
            for name, (snapshot, changes) in record.tables.items():
                t = self.tables.setdefault(name, TableTotals())
                t.snapshot_rows += snapshot
                t.change_rows += changes
                if snapshot or changes:
                    t.last_commit_ms = record.committed_ms
            if self.store is None:
                return
            try:
                self.store.write_json(PROGRESS_FILE, self.to_dict())
            except Exception as exc:  # the counts are informative; never fail a committed batch
                log.warning("cannot write %s/%s: %s", self.store.root, PROGRESS_FILE, exc)

    def snapshot_rows(self, table: str) -> int:
        with self._lock:
            t = self.tables.get(table)
            return t.snapshot_rows if t else 0


# --- one batch's progress -----------------------------------------------------------------------

@dataclass(frozen=True)
class TableProgressView:
    """One table's progress after a batch, as shown.

    Attributes:
        name: ``db.table``.
        phase: ``pending``, ``snapshot`` or ``stream``.
        chunks_done: chunks emitted (0 for a table that was never snapshotted).
        chunks_total: total chunks (an estimate unless ``chunks_exact``).
        rows_done: snapshot rows committed since the checkpoint began.
        rows_total: the table's rows (the server's estimate while the snapshot runs).
        batch_rows: change rows (snapshot + log) this batch committed for the table.
        snapshot_finished: the table's last chunk was emitted by this batch.
    """

    name: str
    phase: str
    chunks_done: int = 0
    chunks_total: int = 0
    chunks_exact: bool = False
    rows_done: int = 0
    rows_total: int = 0
    batch_rows: int = 0
    snapshot_finished: bool = False

    def text(self) -> str:
        """``shop.orders +4000 (chunks 12/~40, rows 4800/~16000)``."""
        head = f"{self.name} +{self.batch_rows}" if self.batch_rows else self.name
        if self.phase == "pending":
            return f"{head} (pending)"
        if self.phase == "snapshot" or self.snapshot_finished:
            approx = "" if self.chunks_exact else "~"
            rows = f"{self.rows_done}" if self.snapshot_finished else f"{self.rows_done}/~{self.rows_total}"
            done = ", snapshot done" if self.snapshot_finished else ""
            return f"{head} (chunks {self.chunks_done}/{approx}{self.chunks_total}, rows {rows}{done})"
        return head


@dataclass(frozen=True)
class Progress:
    """The job after one batch: what the views show."""

    batch_id: int
    rows: int
    rate: float
    position: str
    lag_s: float | None
    tables: tuple[TableProgressView, ...]
    run_rows: int
    at: float = field(default_factory=time.time)

    def line(self) -> str:
        """The plain log line of the batch."""
        lag = "n/a" if self.lag_s is None else f"{self.lag_s:.1f}s"
        tables = ", ".join(t.text() for t in self.tables)
        return f"batch {self.batch_id}: {self.rows} changes ({self.rate:.0f}/s) | {tables} | log {self.position} lag {lag}"

    @property
    def snapshotting(self) -> bool:
        return any(t.phase in ("pending", "snapshot") for t in self.tables)


class ProgressView(Protocol):
    """Where progress goes: log lines (:class:`cdc.app.live.PlainView`) or a live display."""

    def batch(self, progress: Progress) -> None:
        """A batch committed."""

    def heartbeat(self, progress: Progress | None, lag_s: float | None) -> None:
        """Between batches (every poll): the last batch's progress and a fresh lag."""

    def close(self) -> None:
        """The run ended: leave the final state on screen."""


class PlainView:
    """One log line per batch (INFO): the view when stderr is not a terminal."""

    def batch(self, progress: Progress) -> None:
        log.info("%s", progress.line())

    def heartbeat(self, progress: Progress | None, lag_s: float | None) -> None:
        """Plain logs get no heartbeat: a line per batch only."""

    def close(self) -> None:
        """Nothing on screen to finish."""


# --- the tracker --------------------------------------------------------------------------------

def end_offset(progress: dict[str, Any]) -> dict[str, Any] | None:
    """The source's end offset in a progress report (a dict), or None."""
    sources = progress.get("sources") or []
    if not sources:
        return None
    end = sources[0].get("endOffset")
    if isinstance(end, str):
        with contextlib.suppress(ValueError):
            end = json.loads(end)
    return end if isinstance(end, dict) and "position" in end else None


def _idle(progress: dict[str, Any]) -> bool:
    """Spark's idle reports (no batch ran) repeat the last offset as start and end."""
    sources = progress.get("sources") or []
    return bool(sources) and sources[0].get("startOffset") == sources[0].get("endOffset")


class ProgressTracker:
    """Turns Spark's progress reports and the committer's records into :class:`Progress`.

    Args:
        dialect: the source's dialect (to read the current position for the lag, and to print
            positions); None to skip the lag.
        chunk_size: the configured rows per chunk (for the total-chunks estimate).
        totals: the job's counts across runs (snapshot rows done); default: this run's only.
        view: where progress goes; default: log lines.
    """

    def __init__(self, dialect: Dialect | None, chunk_size: int, totals: JobTotals | None = None,
                 view: ProgressView | None = None) -> None:
        self.dialect = dialect
        self.chunk_size = chunk_size
        self.totals = totals if totals is not None else JobTotals()
        self.view: ProgressView = view if view is not None else PlainView()
        self._conn: Any = None
        self.seen: set[int] = set()
        self.rows = 0
        self.position: str | None = None
        self.chunks: dict[str, int] = {}
        self.last: Progress | None = None
        self._end: dict[str, Any] | None = None
        self._lag_at = 0.0

    def close(self) -> None:
        """Close the view and the lag connection."""
        with contextlib.suppress(Exception):
            self.view.close()
        self._close_conn()

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def update(self, progresses: list[dict[str, Any]], committer: BatchCommitter | None = None) -> list[str]:
        """Report each batch not seen yet, then a heartbeat; returns the batches' lines."""
        records = {r.batch_id: r for r in committer.batches} if committer else {}
        for r in records.values():
            self.totals.add(r)  # idempotent: the committer's on_commit may have counted it already
        lines = []
        for p in progresses:
            batch = int(p.get("batchId", -1))
            if batch in self.seen or batch < 0 or _idle(p):
                continue
            progress = self.batch_progress(p, records.get(batch))
            if progress is not None:
                self.seen.add(batch)
                self.last = progress
                self.view.batch(progress)
                lines.append(progress.line())
        self._heartbeat()
        return lines

    def _heartbeat(self) -> None:
        if self.last is None or self._end is None or time.monotonic() - self._lag_at < LAG_REFRESH_S:
            return
        self._lag_at = time.monotonic()
        self.view.heartbeat(self.last, self._lag(self._end["position"], int(self._end.get("ts_ms", 0))))

    def batch_progress(self, progress: dict[str, Any], record: BatchRecord | None = None) -> Progress | None:
        """One batch's progress (None for a report without a batch end)."""
        end = end_offset(progress)
        if end is None:
            return None
        self._end = end
        counts = record.tables if record is not None else {}
        rows = sum(s + c for s, c in counts.values())
        self.rows += rows
        seconds = float(progress.get("durationMs", {}).get("triggerExecution", 0)) / 1000
        position = end["position"]
        self.position = self.dialect.describe_offset(position) if self.dialect else json.dumps(position)
        tables = tuple(self._table(name, t, end.get("emit", {}).get(name), sum(counts.get(name, (0, 0))))
                       for name, t in sorted(end.get("tables", {}).items()))
        self._lag_at = time.monotonic()
        return Progress(batch_id=int(progress["batchId"]), rows=rows, rate=rows / seconds if seconds > 0 else 0.0,
                        position=self.position, lag_s=self._lag(position, int(end.get("ts_ms", 0))),
                        tables=tables, run_rows=self.rows)

    def _table(self, name: str, table: dict[str, Any], emitting: list[int] | None, batch_rows: int) -> TableProgressView:
        state = str(table.get("state"))
        rows_done = self.totals.snapshot_rows(name)
        if state == "stream":  # snapshot finished (maybe by this batch's emits) or not snapshotted
            if not emitting:
                return TableProgressView(name, "stream", batch_rows=batch_rows, rows_done=rows_done,
                                         chunks_done=self.chunks.get(name, 0))
            self.chunks[name] = emitting[1]
            return TableProgressView(name, "stream", emitting[1], emitting[1], True, rows_done, rows_done,
                                     batch_rows, snapshot_finished=True)
        if state == "pending":
            return TableProgressView(name, "pending", batch_rows=batch_rows)
        done = max(int(table.get("emitted", 0)), emitting[1] if emitting else 0)
        assigned = int(table.get("assigned", 0))
        self.chunks[name] = max(self.chunks.get(name, 0), done)
        splitter = table.get("splitter") or {}
        estimate = int(splitter.get("row_count", 0))
        exact = bool(table.get("split_done"))
        total = assigned if exact else max(math.ceil(estimate / self.chunk_size), assigned)
        return TableProgressView(name, "snapshot", done, total, exact, rows_done, max(estimate, rows_done),
                                 batch_rows)

    def _lag(self, position: dict[str, Any], ts_ms: int) -> float | None:
        if self.dialect is None:
            return None
        try:
            if self._conn is None:
                self._conn = self.dialect.connect()
            now = self.dialect.current_offset(self._conn)
        except Exception as exc:  # the lag is informative only; never fail the job for it
            log.debug("lag unavailable: %s", type(exc).__name__)
            self._close_conn()
            return None
        if now.compare(self.dialect.offset_from_dict(position)) == 0:
            return 0.0
        return max(0.0, time.time() - ts_ms / 1000)

    def summary(self, committer: BatchCommitter, sinks: Sequence[Sink], schemas: dict[TableId, TableSchema],
                duration_s: float) -> RunSummary:
        """The run's totals: change rows per table (this run), and what each sink holds."""
        counts: dict[str, dict[str, int | None]] = {str(t): {} for t in sorted(schemas)}
        for sink in sinks:
            for table, kinds in sink.row_counts(schemas).items():
                prefix = f"{sink.name} " if len(sinks) > 1 else ""
                counts.setdefault(table, {}).update({f"{prefix}{k}": v for k, v in kinds.items()})
        run: dict[str, tuple[int, int]] = {str(t): (0, 0) for t in schemas}
        for record in committer.batches:
            for table, (snapshot, changes) in record.tables.items():
                before = run.get(table, (0, 0))
                run[table] = (before[0] + snapshot, before[1] + changes)
        return RunSummary(batches=len(committer.batches),
                          rows=sum(r.snapshot_rows + r.change_rows for r in committer.batches),
                          duration_s=duration_s, position=self.position, tables=counts,
                          snapshot_chunks=dict(self.chunks), run=run)


@dataclass
class RunSummary:
    """What a run did: batches, change rows (per table: snapshot rows and log changes), the last
    log position, and what each sink holds per table."""

    batches: int
    rows: int
    duration_s: float
    position: str | None
    tables: dict[str, dict[str, int | None]] = field(default_factory=dict)
    snapshot_chunks: dict[str, int] = field(default_factory=dict)
    run: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def snapshot_rows(self) -> int:
        return sum(s for s, _ in self.run.values())

    @property
    def change_rows(self) -> int:
        return sum(c for _, c in self.run.values())

    def render(self) -> str:
        """A one-screen text summary."""
        names = sorted(set(self.tables) | set(self.run))
        width = max([len(t) for t in names] + [5])
        kinds = sorted({k for counts in self.tables.values() for k in counts})
        lines = [f"run finished in {self.duration_s:.1f}s: {self.batches} batch(es), {self.rows} change rows "
                 f"committed ({self.snapshot_rows} snapshot, {self.change_rows} log), "
                 f"log at {self.position or 'n/a'}",
                 f"  {'table':<{width}}  {'snapshot':>10}  {'log changes':>11}"
                 + "".join(f"  {k:>15}" for k in kinds) + f"  {'chunks':>6}"]
        for name in names:
            counts = self.tables.get(name, {})
            snapshot, changes = self.run.get(name, (0, 0))
            chunks = self.snapshot_chunks.get(name)
            lines.append(f"  {name:<{width}}  {snapshot:>10}  {changes:>11}"
                         + "".join(f"  {_n(counts.get(k)):>15}" for k in kinds)
                         + f"  {chunks if chunks else '-':>6}")
        return "\n".join(lines)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)
