"""Progress of a running job (cdc/app/progress.py, cdc/app/live.py): it counts change rows per
table and in total, not the manifests Spark sees; plain lines off a terminal, bars on one.

The jobs run for real against the MariaDB fixture, in-process on the session's Spark.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_job import _password, config_of, raw_config  # noqa: F401 - _password: the job files read it

from cdc.app.live import RichView, choose_view
from cdc.app.progress import PROGRESS_FILE, JobTotals, PlainView
from cdc.app.runner import JobRunner
from cdc.app.sandbox.mysql import Sandbox
from cdc.spark.commit import BatchRecord
from cdc.spark.metrics import OBSERVATION
from cdc.spark.state import StateStore

LINE = re.compile(r"^batch (\d+): (\d+) changes \(\d+/s\) \| (.*) \| log (\S+) lag (\S+)$")


def two_tables(admin: Any) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a VALUES " + ",".join(f"({i}, {i})" for i in range(250)))
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO b VALUES " + ",".join(f"({i}, {i})" for i in range(40)))


def batch_lines(caplog: pytest.LogCaptureFixture) -> list[re.Match[str]]:
    lines = [r.getMessage() for r in caplog.records if r.name in ("cdc.app.progress", "cdc.app.live")
             and r.getMessage().startswith("batch ") and " changes (" in r.getMessage()]
    matches = [LINE.match(line) for line in lines]
    assert lines and all(matches), lines
    return [m for m in matches if m]


def per_table(matches: list[re.Match[str]], table: str) -> int:
    """The sum of ``<table> +N`` over the lines."""
    return sum(int(n) for m in matches for n in re.findall(rf"{re.escape(table)} \+(\d+)", m.group(3)))


@pytest.mark.slow  # two runs of a real job (about 20 s each on a loaded 2-core machine)
def test_change_rows_per_table_in_bars_lines_and_summary(
    spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    two_tables(admin)
    config = config_of(raw_config(mysql_server, database, tmp_path))
    a, b = f"{database}.a", f"{database}.b"
    # the snapshot on a (forced) terminal: bars per table, then the stream's heartbeat line
    out = io.StringIO()
    with caplog.at_level("DEBUG", logger="cdc.app.live"):
        first = JobRunner(config, spark).run(once=True, view=RichView(
            Console(file=out, force_terminal=True, width=160, color_system=None)))
    screen = out.getvalue()
    assert "\x1b[" in screen, "drawn in place with terminal control codes"
    final = "".join(screen.rsplit("\x1b[2K", 3)[-3:])  # the last frame: two bars and the status line
    assert re.search(rf"{a}\s.*━.*3/3 chunks\s+250 rows", final), final
    assert re.search(rf"{b}\s.*━.*1/1 chunks\s+40 rows", final), final
    assert re.search(r"stream \| log mysql-bin\.\d+:\d+ \| lag \d+\.\ds \| .*290 changes this run", final), final
    assert re.search(r"\d+/~?\d+ chunks\s+\d+/~\d+ rows", screen), "rows done of total while it ran"
    # every batch's line (logged at DEBUG under the bars) counts change rows, not manifests
    lines = batch_lines(caplog)
    assert sum(int(m.group(2)) for m in lines) == 290
    assert (per_table(lines, a), per_table(lines, b)) == (250, 40)
    assert any(f"{a} +" in m.group(3) and "rows 250, snapshot done" in m.group(3) for m in lines), lines
    assert first.rows == 290 and first.run == {a: (250, 0), b: (40, 0)}
    rendered = first.render()
    assert "290 change rows committed (290 snapshot, 0 log)" in rendered
    assert re.search(rf"{re.escape(a)}\s+250\s+0\s", rendered), rendered

    # the stream off a terminal: plain INFO lines, one per batch
    with admin.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (1000, 1), (1001, 1), (1002, 1)")
        cur.execute("UPDATE b SET v = -1 WHERE id = 3")
        cur.execute("DELETE FROM b WHERE id = 4")
    caplog.clear()
    with caplog.at_level("INFO"):
        second = JobRunner(config, spark).run(once=True, view=PlainView())
    lines = batch_lines(caplog)
    assert sum(int(m.group(2)) for m in lines) == 5
    assert (per_table(lines, a), per_table(lines, b)) == (3, 2)
    assert second.rows == 5 and second.run == {a: (0, 3), b: (0, 2)}

    totals = JobTotals.load(StateStore(str(tmp_path / "checkpoint_state")))
    assert {t: (v.snapshot_rows, v.change_rows) for t, v in totals.tables.items()} == {a: (250, 3), b: (40, 2)}


def test_the_view_follows_the_terminal() -> None:
    assert isinstance(choose_view(Console(file=io.StringIO())), PlainView)
    view = choose_view(Console(file=io.StringIO(), force_terminal=True))
    assert isinstance(view, RichView)
    view.close()


def test_totals_count_a_replayed_batch_once_and_survive_a_restart(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    totals = JobTotals.load(store)
    totals.add(BatchRecord(0, tables={"d.t": (100, 0)}, committed_ms=1000))
    totals.add(BatchRecord(1, tables={"d.t": (50, 2), "d.u": (0, 0)}, committed_ms=2000))
    totals.add(BatchRecord(1, tables={"d.t": (50, 2)}, committed_ms=3000))  # Spark replays batch 1
    again = JobTotals.load(store)
    assert (tmp_path / "state" / PROGRESS_FILE).exists()
    assert again.batch == 1 and again.committed_ms == 2000
    assert again.tables["d.t"].to_dict() == {"snapshot_rows": 150, "change_rows": 2, "last_commit_ms": 2000}
    assert again.tables["d.u"].last_commit_ms is None, "a table without rows in a batch keeps its last commit"


class _Progress:
    """A ``StreamingQueryListener`` that keeps every batch's observed ``cdc`` metrics."""

    def __init__(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        seen: list[dict[str, Any]] = []

        class Listener(StreamingQueryListener):  # type: ignore[misc]
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                metrics = event.progress.observedMetrics.get(OBSERVATION)
                if metrics is not None:
                    seen.append(metrics.asDict())

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.seen, self.listener = seen, Listener()

    def total(self, key: str, expected: int, timeout: float = 30.0) -> int:
        """The sum of ``key`` over the batches, once it reaches ``expected`` (events arrive on
        Spark's listener bus, after the run returns) or the timeout passes."""
        deadline = time.monotonic() + timeout
        while sum(m[key] for m in self.seen) < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        return sum(m[key] for m in self.seen)


def test_changes_and_lag_are_in_spark_streaming_progress(spark: Any, mysql_server: Sandbox, database: str,
                                                          admin: Any, tmp_path: Path) -> None:
    two_tables(admin)
    config = config_of(raw_config(mysql_server, database, tmp_path))
    progress = _Progress()
    spark.streams.addListener(progress.listener)
    try:
        JobRunner(config, spark).run(once=True, view=PlainView())
        assert progress.total("changes", 290) == 290, progress.seen
        assert sum(m["snapshot_rows"] for m in progress.seen) == 290
        assert all(m["log_changes"] == 0 and m["lag_ms"] is None for m in progress.seen), progress.seen
        progress.seen.clear()
        with admin.cursor() as cur:
            cur.execute("INSERT INTO a VALUES (1000, 1), (1001, 1), (1002, 1)")
            cur.execute("DELETE FROM b WHERE id = 4")
        before = int(time.time() * 1000)
        JobRunner(config, spark).run(once=True, view=PlainView())
        assert progress.total("log_changes", 4) == 4, progress.seen
        newest = max(m["newest_event_ts_ms"] for m in progress.seen if m["log_changes"])
        assert before - 5_000 <= newest <= int(time.time() * 1000), "the source's time of the DELETE"
        assert all(m["lag_ms"] >= 0 for m in progress.seen if m["log_changes"]), progress.seen
    finally:
        spark.streams.removeListener(progress.listener)
