"""The mirror follower: background MERGEs equal inline ones, and a mirror left behind by a crash
catches up from the changelog (real Delta tables, no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pytest
from change_batches import (
    SINGLE_KEY,
    apply,
    batch,
    event,
    mirror_rows,
    model_rows,
    random_batches,
    row,
    write_batch,
)

from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.files import commit_change_files, read_change_files, write_change_files
from sinks.delta.follower import ChangelogGap, MirrorFollower, changelog_batches_after

S = SINGLE_KEY


@pytest.fixture
def sink(tmp_path: Path) -> DeltaTables:
    return DeltaTables(DeltaSinkConfig(path=str(tmp_path / "lake"), engine="delta-rs"), query_id="q")


def test_background_merges_coalesce_and_equal_the_events_applied_in_order(sink: DeltaTables) -> None:
    batches, model = random_batches(12), dict[Any, Any]()
    follower = MirrorFollower(sink, {S.table_id: S})
    for batch_id, events in enumerate(batches):
        sink.write_changelog(S, batch(S, events), batch_id)
        follower.submit(batch_id, {S.table_id: batch(S, events)})
        apply(model, S, events)
    follower.close()
    assert mirror_rows(sink, S) == model_rows(model)
    assert 1 <= follower.merges <= len(batches)
    table = deltalake.DeltaTable(sink.config.uri(S.table_id, "mirror"))
    assert table.transaction_version(sink.app_id) == len(batches) - 1


def test_a_mirror_behind_its_changelog_catches_up_on_recover(sink: DeltaTables) -> None:
    batches, model = random_batches(9, seed=11), dict[Any, Any]()
    for batch_id, events in enumerate(batches):
        if batch_id < 3:
            write_batch(sink, S, batch(S, events), batch_id)  # mirror and changelog
        else:
            sink.write_changelog(S, batch(S, events), batch_id)  # the crash left the mirror behind
        apply(model, S, events)
    assert mirror_rows(sink, S) != model_rows(model)
    assert [b for b, _ in changelog_batches_after(sink, S, 2)] == list(range(3, 9))
    follower = MirrorFollower(sink, {S.table_id: S})
    assert follower.recover() == 6
    assert mirror_rows(sink, S) == model_rows(model)
    assert follower.recover() == 0  # nothing left: a second start finds the mirror current


def test_a_merge_reads_only_the_mirror_files_that_may_hold_its_keys(sink: DeltaTables) -> None:
    """The MERGE hands delta-rs the changed keys' statistics (not a streamed source), and it
    skips the files outside their range (issue #18: with a streamed source, every MERGE of a
    2M-update catch-up read the whole mirror, and the driver's peak was 95-225 MiB higher)."""
    model: dict[Any, Any] = {}
    for i in range(4):  # four files, over disjoint key ranges
        events = [event("r", None, row(S, (k,), c_int=k), 1) for k in range(100 * i, 100 * i + 100)]
        write_batch(sink, S, batch(S, events), i, snapshot_append=True)
        apply(model, S, events)
    follower = MirrorFollower(sink, {S.table_id: S})
    events = [event("u", model[(5,)], row(S, (5,), c_int=-5), 2), event("d", model[(7,)], None, 3)]
    follower.submit(4, {S.table_id: batch(S, events)})
    follower.close()
    apply(model, S, events)
    assert mirror_rows(sink, S) == model_rows(model)
    merge = deltalake.DeltaTable(sink.config.uri(S.table_id, "mirror")).history(1)[0]
    assert merge["operation"] == "MERGE"
    assert merge["operationMetrics"]["num_target_files_scanned"] == 1


def test_recover_refuses_when_the_changelog_lost_the_commits(sink: DeltaTables) -> None:
    for batch_id, events in enumerate(random_batches(4, seed=3)):
        if batch_id == 0:
            write_batch(sink, S, batch(S, events), batch_id)
        else:
            sink.write_changelog(S, batch(S, events), batch_id)
    uri = sink.config.uri(S.table_id, "changelog")
    deltalake.DeltaTable(uri).create_checkpoint()
    (Path(uri) / "_delta_log" / f"{2:020d}.json").unlink()  # log retention, behind the checkpoint
    with pytest.raises(ChangelogGap, match="take a new snapshot"):
        MirrorFollower(sink, {S.table_id: S}).recover()


def test_a_failed_merge_surfaces_on_the_next_submit_or_drain(sink: DeltaTables) -> None:
    class DiskFull:
        def reached(self, point: str) -> None:
            raise RuntimeError("disk full")

    follower = MirrorFollower(sink, {S.table_id: S}, hooks=DiskFull())
    events = random_batches(1)[0]
    follower.submit(0, {S.table_id: batch(S, events)})
    with pytest.raises(RuntimeError, match="disk full"):
        follower.drain()
    with pytest.raises(RuntimeError, match="disk full"):
        follower.submit(1, {S.table_id: batch(S, events)})


def test_change_files_commit_once_per_batch_and_read_back_in_order(sink: DeltaTables) -> None:
    config = sink.config
    events = random_batches(3, seed=5)
    for batch_id, evs in enumerate(events):
        staged = write_change_files(config, S, batch(S, evs))
        assert [f.stream for f in staged] == ["changes"]
        assert commit_change_files(config, S, staged, sink.query_id, batch_id)
        replay = write_change_files(config, S, batch(S, evs))  # a replayed batch writes new files
        assert not commit_change_files(config, S, replay, sink.query_id, batch_id)
        back = read_change_files(config, S, staged)
        assert back["op"].to_pylist() == [e["op"] for e in evs]
    assert [b for b, _ in changelog_batches_after(sink, S, -1)] == [0, 1, 2]
    changelog = deltalake.DeltaTable(config.uri(S.table_id, "changelog")).to_pyarrow_table()
    assert changelog.num_rows == sum(map(len, events))
