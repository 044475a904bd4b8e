"""``python -m cdc status``: where a job stands, read from its files, with no job running.

It reads, and never writes:

* Spark's checkpoint (:mod:`cdc.app.checkpoint`): the offset of the last committed batch holds
  each table's snapshot progress (chunks emitted of assigned, the splitter's row estimate) and
  the log position the sinks hold every change up to;
* the state directory: ``progress.json`` (change rows per table, each table's last commit;
  :class:`~cdc.app.progress.JobTotals`) and ``owner.json`` (the running job, :mod:`cdc.app.lock`).

It starts no Spark. To give the lag it asks the source for its current position (one query as
the CDC user): 0 when the sinks hold everything up to it, else the age of the last committed
batch's position. When the source cannot be reached, the lag is that age, and a note says why.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from binlog.registry import create_dialect
from cdc.app.checkpoint import CheckpointFiles
from cdc.app.lock import OWNER_FILE, Owner
from cdc.app.progress import PROGRESS_FILE, JobTotals
from cdc.app.runner import JobPaths, path_exists
from cdc.model.config import JobConfig
from cdc.model.errors import CdcError
from cdc.spark.state import StateStore


@dataclass(frozen=True)
class TableStatus:
    """One table, as of the last committed batch.

    Attributes:
        table: ``db.table``.
        phase: ``pending`` (not started), ``snapshot`` or ``stream`` (snapshot done, or none).
        chunks_done: chunks emitted.
        chunks_total: chunks in all (an estimate while ``chunks_exact`` is false).
        snapshot_rows: snapshot rows committed.
        rows_estimate: the server's row estimate when the snapshot began (None: no snapshot).
        change_rows: log change rows committed.
        position: the log position the sinks hold every change up to (the same for every table).
        lag_s: see the module doc (None: unknown).
        last_commit_ms: when a batch last committed rows of this table (None: never).
    """

    table: str
    phase: str
    chunks_done: int
    chunks_total: int
    chunks_exact: bool
    snapshot_rows: int
    rows_estimate: int | None
    change_rows: int
    position: str | None
    lag_s: float | None
    last_commit_ms: int | None


@dataclass(frozen=True)
class JobStatus:
    """A job's status (:func:`read_status`); ``to_dict`` is the ``--json`` output."""

    checkpoint: str
    state_dir: str
    ran: bool
    last_planned: int | None = None
    last_committed: int | None = None
    committed_ms: int | None = None
    position: str | None = None
    caught_up: bool | None = None
    lag_s: float | None = None
    running: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    tables: list[TableStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_status(config: JobConfig, *, connect: bool = True) -> JobStatus:
    """Read a job's status from its checkpoint and state directory (writes nothing).

    Args:
        config: the job file.
        connect: ask the source for its position to give the lag.
    """
    paths = JobPaths.of(config)
    files = CheckpointFiles(paths.checkpoint)
    planned, committed = files.last("offsets"), files.last("commits")
    if planned is None and not path_exists(paths.state_dir):
        return JobStatus(paths.checkpoint, paths.state_dir, ran=False)
    store = StateStore(paths.state_dir)  # exists: opening it creates nothing
    totals = JobTotals.load(store) if store.exists(PROGRESS_FILE) else JobTotals()
    running, notes = _owner(store)
    if committed is None:
        notes.append("no batch committed yet" + ("" if planned is None else f" (batch {planned} planned)"))
        return JobStatus(paths.checkpoint, paths.state_dir, ran=True, last_planned=planned,
                         running=running, notes=notes)
    offset = files.offset(committed)
    dialect = create_dialect(config.source)
    position = dialect.describe_offset(offset["position"])
    caught_up = _caught_up(dialect, offset["position"], notes) if connect else None
    lag = 0.0 if caught_up else max(0.0, time.time() - int(offset.get("ts_ms", 0)) / 1000)
    tables = [_table(name, t, offset.get("emit", {}).get(name), totals, config.source.chunk_size, position, lag,
                     files, committed) for name, t in sorted(offset.get("tables", {}).items())]
    return JobStatus(paths.checkpoint, paths.state_dir, ran=True, last_planned=planned, last_committed=committed,
                     committed_ms=totals.committed_ms or files.committed_ms(committed), position=position,
                     caught_up=caught_up, lag_s=lag, running=running, notes=notes, tables=tables)


def _owner(store: StateStore) -> tuple[dict[str, Any] | None, list[str]]:
    if not store.exists(OWNER_FILE):
        return None, []
    try:
        owner = Owner.from_dict(store.read_json(OWNER_FILE))
    except (ValueError, KeyError, TypeError):
        return None, [f"{OWNER_FILE} is unreadable"]
    if owner.alive():
        return {"host": owner.host, "pid": owner.pid, "started_ms": owner.started_ms,
                "heartbeat_ms": owner.beat_ms}, []
    return None, [f"the last run (host {owner.host}, pid {owner.pid}) stopped without releasing the "
                  "checkpoint (killed?); the next run takes it over"]


def _caught_up(dialect: Any, position: dict[str, Any], notes: list[str]) -> bool | None:
    try:
        with contextlib.closing(dialect.connect()) as conn:
            now = dialect.current_offset(conn)
    except CdcError as exc:
        notes.append(f"lag is the age of the last commit: {exc}")
        return None
    return bool(now.compare(dialect.offset_from_dict(position)) == 0)


def _table(name: str, t: dict[str, Any], emitting: list[int] | None, totals: JobTotals, chunk_size: int,
           position: str, lag: float, files: CheckpointFiles, committed: int) -> TableStatus:
    counts = totals.tables.get(name)
    snapshot_rows, change_rows = (counts.snapshot_rows, counts.change_rows) if counts else (0, 0)
    last = counts.last_commit_ms if counts else None
    state = str(t.get("state"))
    assigned, exact = int(t.get("assigned", 0)), bool(t.get("split_done"))
    done = max(int(t.get("emitted", 0)), emitting[1] if emitting else 0)
    estimate = (t.get("splitter") or {}).get("row_count")
    if state == "stream" or (state == "snapshot" and exact and done == assigned):
        total = done if state == "snapshot" else _chunks_when_done(files, name, committed)
        return TableStatus(name, "stream", total, total, True, snapshot_rows, None, change_rows, position, lag, last)
    total = assigned if exact else max(math.ceil(int(estimate or 0) / chunk_size), assigned)
    return TableStatus(name, state, done, total, exact, snapshot_rows,
                       None if estimate is None else int(estimate), change_rows, position, lag, last)


def _chunks_when_done(files: CheckpointFiles, name: str, committed: int) -> int:
    """A finished table's chunk count: the offsets keep none once its snapshot is done, so look
    back through the batches Spark retains (0: never snapshotted, or too long ago)."""
    for batch in reversed([b for b in files.batches("offsets") if b <= committed]):
        offset = files.offset(batch)
        emit = offset.get("emit", {}).get(name)
        t = offset.get("tables", {}).get(name, {})
        if t.get("state") == "snapshot" or emit:
            return max(int(t.get("emitted", 0)), emit[1] if emit else 0)
    return 0


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def render(status: JobStatus) -> str:
    """The text form: a header, then one row per table."""
    if not status.ran:
        return (f"job never ran: no checkpoint at {status.checkpoint} and no state at {status.state_dir} "
                "(python -m cdc run --config <job.yaml> starts it)")
    r = status.running
    lines = [f"checkpoint {status.checkpoint}",
             "running: " + (f"host {r['host']}, pid {r['pid']}, since {_when(r['started_ms'])}" if r else "no"),
             f"last committed batch: {'-' if status.last_committed is None else status.last_committed}"
             f" at {_when(status.committed_ms)}" + ("" if status.last_planned in (None, status.last_committed)
                                                    else f" (batch {status.last_planned} planned)")]
    if status.position is not None:
        lag = "n/a" if status.lag_s is None else f"{status.lag_s:.1f}s"
        lines.append(f"log position: {status.position}, lag {lag}" + (" (caught up)" if status.caught_up else ""))
    lines += [f"note: {n}" for n in status.notes]
    if status.tables:
        rows: list[tuple[str, ...]] = [("table", "phase", "chunks", "snapshot rows", "changes", "position", "lag",
                                        "last commit")]
        rows += [_row(t) for t in status.tables]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def _row(t: TableStatus) -> tuple[str, ...]:
    approx = "" if t.chunks_exact else "~"
    snapshot = str(t.snapshot_rows) if t.rows_estimate is None else f"{t.snapshot_rows}/~{t.rows_estimate}"
    lag = "n/a" if t.lag_s is None else f"{t.lag_s:.1f}s"
    chunks = "-" if t.phase == "pending" or not t.chunks_total else f"{t.chunks_done}/{approx}{t.chunks_total}"
    return (t.table, t.phase, chunks, snapshot, str(t.change_rows), t.position or "-", lag, _when(t.last_commit_ms))
