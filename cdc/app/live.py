"""How ``python -m cdc run`` shows progress: plain log lines, or live bars on a terminal.

Runs on the driver (the main thread polls the query every half second, see
:mod:`cdc.app.runner`). :func:`choose_view` picks :class:`RichView` when stderr is a terminal and
:class:`~cdc.app.progress.PlainView` otherwise (a file, a pipe, a log collector), so that logs stay one line per
batch. Both show the same :class:`~cdc.app.progress.Progress`.

On a terminal (rich)::

    tpcds.customer  ━━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━━━  12/20 chunks   6000/~10000 rows
    snapshot | batch 7: 4096 changes (3120/s) | log mysql-bin.000003:1547 | lag 0.8s

and once every snapshot is done, the bars stay complete and the last line becomes the heartbeat,
refreshed between batches: ``stream | log mysql-bin.000003:1547 | lag 0.0s | 96 changes/s |
10096 changes this run | last batch 9 at 12:00:01``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, TaskID, TextColumn
from rich.progress import Progress as Bars
from rich.text import Text

from cdc.app.progress import PlainView, Progress, ProgressView, TableProgressView

log = logging.getLogger(__name__)


def _lag(lag_s: float | None) -> str:
    return "n/a" if lag_s is None else f"{lag_s:.1f}s"


class RichView:
    """Per-table bars (chunks and rows done of total) and a status line, redrawn in place.

    Args:
        console: where to draw (default: stderr). Tests pass a forced-terminal console that
            writes to a buffer.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.bars = Bars(TextColumn("{task.description}"), BarColumn(),
                         TextColumn("{task.fields[chunks]}", justify="right"),
                         TextColumn("{task.fields[rows]}", justify="right"),
                         console=self.console, auto_refresh=False)
        self.tasks: dict[str, TaskID] = {}
        self.status = "starting: planning the first batch"
        stderr = sys.stderr
        to_stderr = self.console.file is stderr
        self.live = Live(console=self.console, get_renderable=self._render, refresh_per_second=4,
                         redirect_stdout=False, redirect_stderr=to_stderr)
        self.live.start()
        # log lines print above the bars (through Live's stderr proxy) instead of tearing them
        self._rerouted = _reroute_logs(stderr, sys.stderr) if to_stderr else []
        self._stderr = stderr

    def _render(self) -> RenderableType:
        return Group(self.bars, Text(self.status))

    def batch(self, progress: Progress) -> None:
        log.debug("%s", progress.line())
        for table in progress.tables:
            self._bar(table)
        self._status(progress, progress.lag_s)

    def heartbeat(self, progress: Progress | None, lag_s: float | None) -> None:
        if progress is not None:
            self._status(progress, lag_s)

    def _bar(self, t: TableProgressView) -> None:
        if t.phase == "stream" and not t.snapshot_finished and t.name not in self.tasks:
            return  # never snapshotted (or done in an earlier run): streams only, no bar
        if t.name not in self.tasks:
            self.tasks[t.name] = self.bars.add_task(t.name, total=None, chunks="pending", rows="")
        if t.phase == "pending":
            return
        if t.phase == "stream":  # finished: fill the bar, keep the final counts
            self.bars.update(self.tasks[t.name], total=t.chunks_total or 1, completed=t.chunks_total or 1,
                             chunks=f"{t.chunks_done}/{t.chunks_total} chunks", rows=f"{t.rows_done} rows")
            return
        approx = "" if t.chunks_exact else "~"
        self.bars.update(self.tasks[t.name], total=max(t.chunks_total, 1), completed=t.chunks_done,
                         chunks=f"{t.chunks_done}/{approx}{t.chunks_total} chunks",
                         rows=f"{t.rows_done}/~{t.rows_total} rows")

    def _status(self, p: Progress, lag_s: float | None) -> None:
        if p.snapshotting:
            self.status = (f"snapshot | batch {p.batch_id}: {p.rows} changes ({p.rate:.0f}/s) | "
                           f"log {p.position} | lag {_lag(lag_s)}")
        else:
            at = time.strftime("%H:%M:%S", time.localtime(p.at))
            self.status = (f"stream | log {p.position} | lag {_lag(lag_s)} | {p.rate:.0f} changes/s | "
                           f"{p.run_rows} changes this run | last batch {p.batch_id} at {at}")
        self.live.refresh()

    def close(self) -> None:
        for h in self._rerouted:
            h.setStream(self._stderr)
        self.live.stop()


def _reroute_logs(stderr: Any, proxy: Any) -> list[logging.StreamHandler[Any]]:
    """Point the root logger's handlers that write to ``stderr`` at ``proxy``; returns them."""
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and h.stream is stderr]
    for h in handlers:
        h.setStream(proxy)
    return handlers


def choose_view(console: Console | None = None) -> ProgressView:
    """Bars on a terminal, log lines elsewhere."""
    console = console if console is not None else Console(stderr=True)
    return RichView(console) if console.is_terminal else PlainView()
