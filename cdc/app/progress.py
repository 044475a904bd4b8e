"""Progress of a running job: one log line per micro-batch, and a summary at the end.

Runs on the driver, fed by Spark's own progress reports (``query.recentProgress``), whose end
offsets (:class:`~cdc.spark.offsets.SourceOffset` as JSON) carry the snapshot progress of every
table and the log position, and by the batch committer's records, which count the change rows
each batch committed (Spark's own row count is the manifests'). A line looks like::

    batch 7: 4096 changes (3120/s) | shop.orders 12/40 chunks, shop.items done | log mysql-bin.000003:1547 lag 0.8s

Total chunks is the splitter's estimate (row count / chunk size) until the table's last chunk is
cut. Lag is 0 when the batch ended at the server's current log position (nothing newer to read),
else the age of the batch's end: the sinks hold every change up to that moment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from binlog.dialect import Dialect
from cdc.model.schema import TableId, TableSchema
from cdc.spark.commit import BatchCommitter
from sinks.base import Sink

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    """What a run did: batches, change rows, the last log position, each table's counts."""

    batches: int
    rows: int
    duration_s: float
    position: str | None
    tables: dict[str, dict[str, int | None]] = field(default_factory=dict)
    snapshot_chunks: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        """A one-screen text summary."""
        width = max([len(t) for t in self.tables] + [5])
        kinds = sorted({k for counts in self.tables.values() for k in counts})
        lines = [f"run finished in {self.duration_s:.1f}s: {self.batches} batch(es), {self.rows} change rows "
                 f"committed, log at {self.position or 'n/a'}",
                 f"  {'table':<{width}}" + "".join(f"  {k:>15}" for k in kinds) + f"  {'chunks':>6}"]
        for name, counts in sorted(self.tables.items()):
            chunks = self.snapshot_chunks.get(name)
            lines.append(f"  {name:<{width}}" + "".join(f"  {_n(counts.get(k)):>15}" for k in kinds)
                         + f"  {'-' if chunks is None else chunks:>6}")
        return "\n".join(lines)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


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
    """Turns Spark's progress reports into log lines and the run's totals.

    Args:
        dialect: the source's dialect (to read the current position for the lag, and to print
            positions); None to skip the lag.
        chunk_size: the configured rows per chunk (for the total-chunks estimate).
    """

    def __init__(self, dialect: Dialect | None, chunk_size: int) -> None:
        self.dialect = dialect
        self.chunk_size = chunk_size
        self._conn: Any = None
        self.seen: set[int] = set()
        self.rows = 0
        self.position: str | None = None
        self.chunks: dict[str, int] = {}

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def update(self, progresses: list[dict[str, Any]], committer: BatchCommitter | None = None) -> list[str]:
        """Log one line per batch not seen yet; returns the lines."""
        counted = {r.batch_id: r.snapshot_rows + r.change_rows for r in committer.batches} if committer else {}
        lines = []
        for p in progresses:
            batch = int(p.get("batchId", -1))
            if batch in self.seen or batch < 0 or _idle(p):
                continue
            line = self.batch_line(p, counted.get(batch))
            if line:
                self.seen.add(batch)
                log.info("%s", line)
                lines.append(line)
        return lines

    def batch_line(self, progress: dict[str, Any], rows: int | None = None) -> str | None:
        """The line for one batch (None for a report without a batch end)."""
        end = end_offset(progress)
        if end is None:
            return None
        if rows is None:  # rows flowed through Spark (no sinks): Spark's count is the rows'
            rows = int(progress.get("numInputRows") or 0)
        self.rows += rows
        seconds = float(progress.get("durationMs", {}).get("triggerExecution", 0)) / 1000
        rate = rows / seconds if seconds > 0 else 0.0
        position = end["position"]
        self.position = self.dialect.describe_offset(position) if self.dialect else json.dumps(position)
        tables = ", ".join(self._table_part(name, t, end.get("emit", {}).get(name))
                           for name, t in sorted(end.get("tables", {}).items()))
        lag = self._lag(position, int(end.get("ts_ms", 0)))
        lag_text = "n/a" if lag is None else f"{lag:.1f}s"
        return (f"batch {progress['batchId']}: {rows} changes ({rate:.0f}/s) | {tables} | "
                f"log {self.position} lag {lag_text}")

    def _table_part(self, name: str, table: dict[str, Any], emitting: list[int] | None) -> str:
        state = table.get("state")
        if state == "stream":  # snapshot finished (maybe by this batch's emits) or not snapshotted
            finished = emitting[1] if emitting else self.chunks.get(name)
            if finished is None:
                return f"{name} streaming"
            self.chunks[name] = finished
            return f"{name} {finished}/{finished} chunks"
        if state == "pending":
            return f"{name} pending"
        done = max(int(table.get("emitted", 0)), emitting[1] if emitting else 0)
        assigned = int(table.get("assigned", 0))
        self.chunks[name] = max(self.chunks.get(name, 0), done)
        return f"{name} {done}/{self._total(table, assigned)} chunks"

    def _total(self, table: dict[str, Any], assigned: int) -> str:
        if table.get("split_done"):
            return str(assigned)
        splitter = table.get("splitter") or {}
        estimate = math.ceil(int(splitter.get("row_count", 0)) / self.chunk_size)
        return f"~{max(estimate, assigned)}"

    def _lag(self, position: dict[str, Any], ts_ms: int) -> float | None:
        if self.dialect is None:
            return None
        try:
            if self._conn is None:
                self._conn = self.dialect.connect()
            now = self.dialect.current_offset(self._conn)
        except Exception as exc:  # the lag is informative only; never fail the job for it
            log.debug("lag unavailable: %s", type(exc).__name__)
            self.close()
            return None
        if now.compare(self.dialect.offset_from_dict(position)) == 0:
            return 0.0
        return max(0.0, time.time() - ts_ms / 1000)

    def summary(self, committer: BatchCommitter, sinks: Sequence[Sink], schemas: dict[TableId, TableSchema],
                duration_s: float) -> RunSummary:
        """The run's totals, with each sink's row counts per table."""
        counts: dict[str, dict[str, int | None]] = {str(t): {} for t in sorted(schemas)}
        for sink in sinks:
            for table, kinds in sink.row_counts(schemas).items():
                prefix = f"{sink.name} " if len(sinks) > 1 else ""
                counts.setdefault(table, {}).update({f"{prefix}{k}": v for k, v in kinds.items()})
        rows = sum(r.snapshot_rows + r.change_rows for r in committer.batches)
        return RunSummary(batches=len(committer.batches), rows=rows, duration_s=duration_s,
                          position=self.position, tables=counts, snapshot_chunks=dict(self.chunks))
