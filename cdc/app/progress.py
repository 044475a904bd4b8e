"""Progress of a running job: one log line per micro-batch, and a summary at the end.

Runs on the driver, fed by Spark's own progress reports (``query.recentProgress``): each holds
the batch's end offset (cdc/planner.py's :class:`~cdc.spark.planner.SourceOffset` as JSON), so the
snapshot progress of every table, the binlog position and when it was read come straight from
what the checkpoint records. A line looks like::

    batch 7: 4096 rows (3120 rows/s) | shop.orders 12/40 chunks, shop.items done | binlog mysql-bin.000003:1547 lag 0.8s

Total chunks is the splitter's estimate (row count / chunk size) until the table's last chunk is
cut. Lag is 0 when the batch ended at the server's current binlog position (nothing newer to
read), else the age of the batch's binlog end: the mirror holds every change up to that moment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from binlog.mysql.connection import ConnectionSettings
from binlog.mysql.reader import current_offset
from cdc.model.schema import TableId, TableSchema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableCounts:
    """Rows in a table's Delta mirror and changelog (from the Delta log's file statistics)."""

    mirror: int | None
    changelog: int | None


@dataclass
class RunSummary:
    """What a run did: batches, rows, the last binlog position, each table's Delta row counts."""

    batches: int
    rows: int
    duration_s: float
    binlog: str | None
    tables: dict[str, TableCounts] = field(default_factory=dict)
    snapshot_chunks: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        """A one-screen text summary."""
        width = max([len(t) for t in self.tables] + [5])
        lines = [f"run finished in {self.duration_s:.1f}s: {self.batches} batch(es), {self.rows} rows read, "
                 f"binlog at {self.binlog or 'n/a'}",
                 f"  {'table':<{width}}  {'mirror rows':>12}  {'changelog rows':>14}  {'chunks':>6}"]
        for name, counts in sorted(self.tables.items()):
            chunks = self.snapshot_chunks.get(name)
            lines.append(f"  {name:<{width}}  {_n(counts.mirror):>12}  {_n(counts.changelog):>14}  "
                         f"{'-' if chunks is None else chunks:>6}")
        return "\n".join(lines)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def table_counts(sink_config: Any, schemas: dict[TableId, TableSchema]) -> dict[str, TableCounts]:
    """Row counts of every table's mirror and changelog (None where a table was not written)."""
    from deltalake import DeltaTable

    def count(uri: str) -> int | None:
        try:
            return int(DeltaTable(uri, storage_options=sink_config.storage_options or None).count())
        except Exception:  # not created yet (nothing written), or unreadable: the summary says "-"
            return None

    return {str(t): TableCounts(count(sink_config.uri(t, "mirror")), count(sink_config.uri(t, "changelog")))
            for t in sorted(schemas)}


def end_offset(progress: dict[str, Any]) -> dict[str, Any] | None:
    """The source's end offset in a progress report (a dict), or None."""
    sources = progress.get("sources") or []
    if not sources:
        return None
    end = sources[0].get("endOffset")
    if isinstance(end, str):
        with contextlib.suppress(ValueError):
            end = json.loads(end)
    return end if isinstance(end, dict) and "binlog" in end else None


def _idle(progress: dict[str, Any]) -> bool:
    """Spark's idle reports (no batch ran) repeat the last offset as start and end."""
    sources = progress.get("sources") or []
    return bool(sources) and sources[0].get("startOffset") == sources[0].get("endOffset")


class ProgressTracker:
    """Turns Spark's progress reports into log lines and the run's totals.

    Args:
        chunk_size: the configured rows per chunk (for the total-chunks estimate).
        connection: where to read the server's current binlog position (for the lag); None to
            skip the lag.
    """

    def __init__(self, chunk_size: int, connection: ConnectionSettings | None = None) -> None:
        self.chunk_size = chunk_size
        self.connection = connection
        self._conn: Any = None
        self.seen: set[int] = set()
        self.rows = 0
        self.binlog: str | None = None
        self.chunks: dict[str, int] = {}

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def update(self, progresses: list[dict[str, Any]]) -> list[str]:
        """Log one line per batch not seen yet; returns the lines."""
        lines = []
        for p in progresses:
            batch = int(p.get("batchId", -1))
            if batch in self.seen or batch < 0 or _idle(p):
                continue
            line = self.batch_line(p)
            if line:
                self.seen.add(batch)
                log.info("%s", line)
                lines.append(line)
        return lines

    def batch_line(self, progress: dict[str, Any]) -> str | None:
        """The line for one batch (None for a report without a batch end)."""
        end = end_offset(progress)
        if end is None:
            return None
        rows = int(progress.get("numInputRows") or 0)
        self.rows += rows
        rate = float(progress.get("processedRowsPerSecond") or 0.0)
        binlog = end["binlog"]
        self.binlog = f"{binlog['file']}:{binlog['pos']}"
        tables = ", ".join(self._table_part(name, t, end.get("emit", {}).get(name))
                           for name, t in sorted(end.get("tables", {}).items()))
        lag = self._lag(binlog, int(end.get("ts_ms", 0)))
        lag_text = "n/a" if lag is None else f"{lag:.1f}s"
        return (f"batch {progress['batchId']}: {rows} rows ({rate:.0f} rows/s) | {tables} | "
                f"binlog {self.binlog} lag {lag_text}")

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

    def _lag(self, binlog: dict[str, Any], ts_ms: int) -> float | None:
        if self.connection is None:
            return None
        try:
            if self._conn is None:
                self._conn = self.connection.connect()
            now = current_offset(self._conn)
        except Exception as exc:  # the lag is informative only; never fail the job for it
            log.debug("lag unavailable: %s", type(exc).__name__)
            self.close()
            return None
        if (now.file, now.pos) == (binlog["file"], binlog["pos"]):
            return 0.0
        return max(0.0, time.time() - ts_ms / 1000)

    def summary(self, counts: dict[str, TableCounts], duration_s: float) -> RunSummary:
        """The run's totals."""
        return RunSummary(batches=len(self.seen), rows=self.rows, duration_s=duration_s, binlog=self.binlog,
                          tables=counts, snapshot_chunks=dict(self.chunks))
