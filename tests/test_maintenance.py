"""The job's table maintenance: compaction and VACUUM keep every row, every batch record and the
mirror's crash recovery, and the mirror's files stay under its target size (real Delta tables,
no server; the exactly-once suites run with maintenance every 3 batches, tests/pipeline.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import change_batches as cb
import deltalake
import pytest
from pydantic import ValidationError

from sinks.delta.config import DeltaSinkConfig, MaintenanceConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.follower import MirrorFollower
from sinks.delta.maintenance import Maintainer
from sinks.delta.tables import read_table

S = cb.SINGLE_KEY


def tables(tmp_path: Path, **maintenance: Any) -> DeltaTables:
    # model_construct: a retention of 0 hours, below the config's floor, so that a test sees VACUUM act
    config = DeltaSinkConfig(path=str(tmp_path / "lake"), engine="delta-rs",
                             maintenance=MaintenanceConfig.model_construct(**maintenance))
    return DeltaTables(config, query_id="q")


def delta(sink: DeltaTables, kind: str) -> deltalake.DeltaTable:
    return deltalake.DeltaTable(sink.config.uri(S.table_id, kind))  # type: ignore[arg-type]


def parquet_on_disk(sink: DeltaTables, kind: str) -> set[str]:
    root = sink.config.uri(S.table_id, kind)  # type: ignore[arg-type]
    return {os.path.join(d, f) for d, _, files in os.walk(root) if "_delta_log" not in d
            for f in files if f.endswith(".parquet")}


def live_files(sink: DeltaTables, kind: str) -> set[str]:
    return {str(Path(u)) for u in delta(sink, kind).file_uris()}


def test_compaction_every_n_batches_keeps_every_row_and_every_batch_record(tmp_path: Path) -> None:
    sink = tables(tmp_path, every=3)
    maintainer = Maintainer(sink)
    follower = MirrorFollower(sink, {S.table_id: S}, maintainer=maintainer)
    batches, model, events_written = cb.random_batches(12), dict[Any, Any](), 0
    for batch_id, events in enumerate(batches):
        sink.write_changelog(S, cb.batch(S, events), batch_id)
        maintainer.wrote(S.table_id)
        follower.submit(batch_id, {S.table_id: cb.batch(S, events)})
        follower.drain()  # one batch at a time: maintenance after batches 2, 5, 8 and 11
        cb.apply(model, S, events)
        events_written += len(events)
    follower.close()
    assert maintainer.runs == 4
    changelog, mirror = delta(sink, "changelog"), delta(sink, "mirror")
    assert [h["operation"] for h in changelog.history()].count("OPTIMIZE") == 4
    assert len(changelog.file_uris()) == 1, "12 batches' files compacted into one"
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    assert read_table(changelog.table_uri).num_rows == events_written
    assert changelog.transaction_version(sink.app_id) == mirror.transaction_version(sink.app_id) == 11
    # a replay after compaction is still recognised: the app transactions survive OPTIMIZE
    assert not sink.write_changelog(S, cb.batch(S, batches[5]), 5)
    assert not sink.write_mirror(S, cb.batch(S, batches[11]), 11)


def test_a_job_run_in_short_runs_is_maintained_too(tmp_path: Path) -> None:
    """Each process counts the batches committed since the last compaction: ``--once`` runs on a
    schedule, each shorter than ``every`` batches, still get maintenance."""
    sink = tables(tmp_path, every=3)
    runs = []
    for batch_id, events in enumerate(cb.random_batches(5, seed=3)):
        maintainer = Maintainer(sink)  # a new run for every batch
        cb.write_batch(sink, S, cb.batch(S, events), batch_id)
        maintainer.wrote(S.table_id)
        maintainer.run_due()
        runs.append(maintainer.runs)
    assert runs == [0, 0, 1, 0, 0]
    assert [h["operation"] for h in delta(sink, "changelog").history()].count("OPTIMIZE") == 1


class Clock:
    """The wall clock, moved forward by the test."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def optimizes(sink: DeltaTables) -> int:
    return [h["operation"] for h in delta(sink, "changelog").history()].count("OPTIMIZE")


def test_a_table_written_since_its_last_maintenance_is_maintained_once_the_interval_has_passed(tmp_path: Path) -> None:
    """A table that gets a few batches an hour is maintained every ``interval_minutes``, far short
    of ``every`` batches; one that nothing wrote since is left alone."""
    sink, clock = tables(tmp_path, every=100, interval_minutes=10), Clock()
    batches = cb.random_batches(4, seed=11)
    maintainer = Maintainer(sink, clock=clock)
    for batch_id in (0, 1):  # the first creates the tables: the interval counts from there
        cb.write_batch(sink, S, cb.batch(S, batches[batch_id]), batch_id)
        maintainer.wrote(S.table_id)
    maintainer.run_due()
    assert maintainer.runs == 0
    assert 9 * 60 < (maintainer.seconds_until_due() or 0) <= 10 * 60
    clock.ahead = 10 * 60 + 1
    assert maintainer.seconds_until_due() == 0
    maintainer.run_due()
    assert (maintainer.runs, optimizes(sink)) == (1, 1)

    clock.ahead = 30 * 60  # nothing written since: no maintenance, and no wake-up planned
    assert maintainer.seconds_until_due() is None
    maintainer.run_due()
    assert maintainer.runs == 1

    cb.write_batch(sink, S, cb.batch(S, batches[2]), 2)
    maintainer.wrote(S.table_id)
    clock.ahead = 15 * 60  # 5 minutes after the last maintenance
    maintainer.run_due()
    assert maintainer.runs == 1
    clock.ahead = 20 * 60 + 1
    maintainer.run_due()
    assert (maintainer.runs, optimizes(sink)) == (2, 2)

    # a new run reads the time of the last compaction back from the changelog's log
    cb.write_batch(sink, S, cb.batch(S, batches[3]), 3)
    later_clock = Clock()
    later_clock.ahead = 10 * 60 + 1  # the next run starts more than 10 minutes after the compaction
    later = Maintainer(sink, clock=later_clock)
    later.wrote(S.table_id)
    later.run_due()
    assert later.runs == 1, "the interval counts from the compaction in the log, not from the run's start"


def test_an_idle_job_is_maintained_when_a_table_falls_due_by_time(tmp_path: Path) -> None:
    """The mirror follower wakes up for maintenance that falls due while no batch comes."""
    sink = tables(tmp_path, every=100, interval_minutes=0.5 / 60)
    maintainer = Maintainer(sink)
    follower = MirrorFollower(sink, {S.table_id: S}, maintainer=maintainer)
    model: dict[Any, Any] = {}
    for batch_id, events in enumerate(cb.random_batches(2, seed=13)):
        sink.write_changelog(S, cb.batch(S, events), batch_id)
        maintainer.wrote(S.table_id)
        follower.submit(batch_id, {S.table_id: cb.batch(S, events)})
        cb.apply(model, S, events)
    follower.drain()
    deadline = time.monotonic() + 30
    while maintainer.runs == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert maintainer.runs == 1, "no batch came, and the follower did not wake up for the maintenance due"
    time.sleep(1)  # written by no batch since: it sleeps, and maintains nothing more
    assert maintainer.runs == 1
    follower.close()
    assert optimizes(sink) == 1
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)


class ChangelogMaintenanceHooks:
    """Hooks that hold, or fail, the changelog's maintenance in the maintainer's background."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.held, self.release = threading.Event(), threading.Event()

    def reached(self, point: str) -> None:
        if point != "maintenance" or not threading.current_thread().name.startswith("changelog-maintenance"):
            return
        if self.fail:
            raise OSError("No space left on device")
        self.held.set()
        assert self.release.wait(60), "never released"


def test_the_mirror_follows_while_its_changelog_is_maintained_in_the_background(tmp_path: Path) -> None:
    """The changelog's first compaction after a snapshot rewrites every snapshot row; in the
    mirror follower's thread it held the mirror back (16 s at TPC-DS SF1000, issue #18). In the
    background, the MERGEs and the mirror's own maintenance go on while it runs."""
    sink, hooks = tables(tmp_path, every=2), ChangelogMaintenanceHooks()
    maintainer = Maintainer(sink, hooks, background=True)
    follower = MirrorFollower(sink, {S.table_id: S}, maintainer=maintainer)
    model: dict[Any, Any] = {}
    events_written = 0
    for batch_id, events in enumerate(cb.random_batches(6, seed=17)):
        sink.write_changelog(S, cb.batch(S, events), batch_id)
        maintainer.wrote(S.table_id)
        follower.submit(batch_id, {S.table_id: cb.batch(S, events)})
        follower.drain()  # maintenance due after batches 1, 3 and 5
        cb.apply(model, S, events)
        events_written += len(events)
        if batch_id == 1:
            assert hooks.held.wait(10), "the changelog's maintenance did not start in the background"
    assert cb.mirror_rows(sink, S) == cb.model_rows(model), "the mirror followed every batch meanwhile"
    assert maintainer.runs == 3, "the mirror was maintained after batches 1, 3 and 5"
    assert optimizes(sink) == 0, "the changelog's maintenance is still held"
    hooks.release.set()
    follower.close()
    maintainer.close()
    assert optimizes(sink) == 1, "one changelog maintenance: the later ones found it still running"
    changelog = delta(sink, "changelog")
    assert read_table(changelog.table_uri).num_rows == events_written
    assert changelog.transaction_version(sink.app_id) == 5


def test_a_changelog_maintenance_that_fails_in_the_background_fails_the_next_call(tmp_path: Path) -> None:
    sink = tables(tmp_path, every=1)
    maintainer = Maintainer(sink, ChangelogMaintenanceHooks(fail=True), background=True)
    cb.write_batch(sink, S, cb.batch(S, cb.random_batches(1, seed=19)[0]), 0)
    maintainer.wrote(S.table_id)
    maintainer.run_due()  # the mirror's maintenance, here; the changelog's fails in the background
    with pytest.raises(OSError, match="No space left"):
        maintainer.drain()
    with pytest.raises(OSError, match="No space left"):
        maintainer.raise_error()  # the sink calls this before each batch: the job fails and restarts
    with pytest.raises(OSError, match="No space left"):
        maintainer.close()
    assert optimizes(sink) == 0


def test_vacuum_keeps_the_changelog_files_that_a_mirror_behind_it_needs(tmp_path: Path) -> None:
    """A crash left the mirror behind: the changelog is compacted and vacuumed, but the files of
    the batches the mirror lacks stay until it has caught up from them."""
    sink = tables(tmp_path, every=1, vacuum_retention_hours=0)
    maintainer, model = Maintainer(sink), dict[Any, Any]()
    for batch_id, events in enumerate(cb.random_batches(6, seed=5)):
        if batch_id < 3:
            cb.write_batch(sink, S, cb.batch(S, events), batch_id)
        else:
            sink.write_changelog(S, cb.batch(S, events), batch_id)  # the mirror's MERGEs never ran
        cb.apply(model, S, events)
        if batch_id == 2:
            maintainer.maintain(S.table_id)  # the mirror holds every batch: nothing to keep
            assert parquet_on_disk(sink, "changelog") == live_files(sink, "changelog")
    maintainer.maintain(S.table_id)  # the mirror lacks batches 3..5, compacted away now
    assert len(delta(sink, "changelog").file_uris()) == 1
    assert len(parquet_on_disk(sink, "mirror")) == len(delta(sink, "mirror").file_uris()), "the mirror was vacuumed"

    assert MirrorFollower(sink, {S.table_id: S}).recover() == 3  # reads the compacted-away files
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    maintainer.maintain(S.table_id)  # the mirror holds every batch again
    assert parquet_on_disk(sink, "changelog") == live_files(sink, "changelog")


def test_merges_in_key_order_keep_the_mirror_files_under_the_target_size(tmp_path: Path) -> None:
    """Without ``delta.targetFileSize`` delta-rs's MERGE writes files of up to 100 MiB: updates in
    key order merged each touched file with the next, into one file that every later MERGE
    rewrote whole (issue #18: a 2M-update backlog at TPC-DS SF100, a 1.9M-row file)."""
    sink = tables(tmp_path, every=0, mirror_file_size=16 * 1024)
    model: dict[Any, Any] = {}
    for chunk in range(10):  # the snapshot: ten files over consecutive key ranges
        events = [cb.event("r", None, cb.row(S, (k,), c_int=k, c_str=f"{k:x}" * 8), 1) for k in range(chunk * 500, chunk * 500 + 500)]
        cb.write_batch(sink, S, cb.batch(S, events), chunk, snapshot_append=True)
        cb.apply(model, S, events)
    Maintainer(sink).prepare_mirror(S.table_id)
    first = max(os.path.getsize(f) for f in parquet_on_disk(sink, "mirror"))
    for batch_id, start in enumerate(range(0, 5000, 400), start=10):  # a burst of updates in key order
        events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-k, c_str=f"{k:o}" * 8), 2) for k in range(start, min(start + 400, 5000))]
        cb.write_batch(sink, S, cb.batch(S, events), batch_id)
        cb.apply(model, S, events)
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    sizes = [os.path.getsize(f) for f in delta(sink, "mirror").file_uris()]
    assert max(sizes) <= max(first, 16 * 1024) * 2, f"a mirror file grew past the target: {sorted(sizes)}"


def test_a_vacuum_retention_under_an_hour_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        DeltaSinkConfig(path="/tmp/lake", maintenance={"vacuum_retention_hours": 0})
