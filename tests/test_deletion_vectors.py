"""The mirror's MERGE as deletion vectors (``sink.deletion_vectors``): every batch leaves the mirror
equal to the model, read the same by delta-rs, DuckDB, Polars and Spark; files are not rewritten;
replays, a new process, compaction and VACUUM keep it exact (real Delta tables, no server; the
exactly-once suites run it too: tests/test_pipeline.py)."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import change_batches as cb
import deltalake
import pyarrow as pa
import pytest
from pydantic import ValidationError

from cdc.model.schema import TableId
from sinks.changes import mirror_schema
from sinks.delta import deletion_vectors
from sinks.delta.config import DeltaSinkConfig, MaintenanceConfig
from sinks.delta.conflicts import CommitConflict
from sinks.delta.deletion_vectors import _commit, serialize, unused_files, z85
from sinks.delta.engines import DeltaTables
from sinks.delta.files import MIRROR_REMOVES, MIRROR_UPSERTS, write_change_files
from sinks.delta.follower import merge_into_mirror
from sinks.delta.maintenance import Maintainer
from sinks.delta.sink import DeltaSink
from sinks.delta.tables import ensure_table

S, C = cb.SINGLE_KEY, cb.COMPOSITE_KEY


def dv_tables(tmp_path: Path, vectors: bool = True, **maintenance: Any) -> DeltaTables:
    config = DeltaSinkConfig(path=str(tmp_path / "lake"), engine="delta-rs", deletion_vectors=vectors,
                             maintenance=MaintenanceConfig.model_construct(**{"every": 0, **maintenance}))
    return DeltaTables(config, query_id="q")


def log_actions(sink: DeltaTables, schema: Any) -> list[dict[str, Any]]:
    folder = Path(sink.config.uri(schema.table_id, "mirror")) / "_delta_log"
    return [json.loads(line) for f in sorted(folder.glob("*.json")) for line in f.read_text().splitlines() if line]


def start(sink: DeltaTables, schema: Any, rows: list[dict[str, Any]], model: dict[Any, Any],
          vectors: bool = True) -> None:
    """A snapshot in four files, then the job's open: deletion vectors enabled (or not)."""
    for part in range(4):
        events = [cb.event("r", None, r, 1) for r in rows[part::4]]
        cb.write_batch(sink, schema, cb.batch(schema, events), part, snapshot_append=True)
        cb.apply(model, schema, events)
    Maintainer(sink).prepare_mirror(schema.table_id)
    features = deltalake.DeltaTable(sink.config.uri(schema.table_id, "mirror")).protocol().reader_features or []
    assert ("deletionVectors" in features) == vectors


def test_z85_and_the_bitmap_format_match_the_delta_protocol_examples() -> None:
    # PROTOCOL.md "Deletion Vector Descriptor Schema", JSON example 1 (random prefix "ab") and 3
    assert z85(bytes.fromhex("d2c639aa8816431aaaf6d3fe2512ff61")) == "^-aqEH.-t@S}K{vb[*k^"
    import numpy as np

    # example 3 is in Delta's older "native" layout (magic 1681511376, then the bitmap's size); the
    # 32-bit RoaringBitmap of rows 3, 4, 7, 11, 18, 29 inside it is the standard serialization
    standard = bytes.fromhex("3a300000010000000000050010000000030004000700" "0b0012001d00")
    data = serialize(np.array([3, 4, 7, 11, 18, 29]))
    assert data == struct.pack("<iqI", 1681511377, 1, 0) + standard  # the portable layout, one bucket


def test_random_batches_become_deletion_vectors_that_every_reader_applies(tmp_path: Path, spark: Any) -> None:
    sink, model = dv_tables(tmp_path), dict[Any, Any]()
    start(sink, S, [cb.row(S, (k,), c_int=k, c_str=f"s{k}") for k in range(100, 140)], model)
    snapshot_files = {a["add"]["path"] for a in log_actions(sink, S) if "add" in a}
    batches = cb.random_batches(25, seed=23)  # keys 0..15: created, updated, deleted
    for batch_id, events in enumerate(batches, start=10):
        events = events + [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-batch_id), 0)
                           for k in range(100 + batch_id % 7, 140, 7)]  # and the snapshot's rows
        assert cb.write_batch(sink, S, cb.batch(S, events), batch_id).mirror_written
        cb.apply(model, S, events)
        assert cb.mirror_rows(sink, S) == cb.model_rows(model), f"after batch {batch_id}"
    actions = log_actions(sink, S)
    mirror = deltalake.DeltaTable(sink.config.uri(S.table_id, "mirror"))
    live = set(pa.table(mirror.get_add_actions()).column("path").to_pylist())
    assert snapshot_files <= live, "a snapshot file was rewritten instead of given a deletion vector"
    assert {b["filepath"].rsplit("/", 1)[1] for r in mirror.deletion_vectors() for b in pa.record_batch(r).to_pylist()} \
        >= snapshot_files, "every snapshot file had changed rows: each has a deletion vector"
    assert any("deletionVector" in a.get("add", {}) for a in actions)
    seen = cb.read_with_every_reader(sink.config.uri(S.table_id, "mirror"), spark)  # type: ignore[arg-type]
    for reader, rows in seen.items():
        assert cb.frozen_rows(rows) == cb.model_rows(model), f"{reader} reads the mirror differently"

    # a replay is recognised; a new process (nothing remembered) reads the vectors back from the log
    assert not sink.write_mirror(S, cb.batch(S, batches[-1]), 34)
    again = dv_tables(tmp_path)
    events = [cb.event("u", image, {**image, "c_str": "again"}, 1000 + i) for i, image in enumerate(model.values())]
    assert again.write_mirror(S, cb.batch(S, events), 40)
    cb.apply(model, S, events)
    assert cb.mirror_rows(again, S) == cb.model_rows(model)


def test_a_merge_reads_each_files_keys_once_and_another_writers_vectors_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The files' keys are read from disk by the first MERGE that needs them, then found in
    memory (sinks/delta/key_index.py); the rows a MERGE hid are remembered, until another writer
    commits: then its deletion vectors are read back, and the rows it hid stay hidden."""
    sink, model = dv_tables(tmp_path), dict[Any, Any]()
    start(sink, S, [cb.row(S, (k,), c_int=k) for k in range(100, 140)], model)  # 4 files, keys interleaved

    def merge(tables: DeltaTables, batch_id: int, keys: range) -> int:
        events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-batch_id), batch_id) for k in keys]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=deletion_vectors.__name__):
            cb.write_batch(tables, S, cb.batch(S, events), batch_id)
        cb.apply(model, S, events)
        assert cb.mirror_rows(tables, S) == cb.model_rows(model), f"after batch {batch_id}"
        found = re.search(r"\((\d+) key columns read from disk\)", caplog.text)
        assert found, caplog.text
        return int(found.group(1))

    assert merge(sink, 10, range(100, 140, 3)) == 4, "the snapshot's four files"
    assert merge(sink, 11, range(101, 140, 3)) == 1, "batch 10's new file only"
    merge(dv_tables(tmp_path), 12, range(102, 140, 3))  # another writer hides rows in the same files
    assert merge(sink, 13, range(100, 140, 2)) == 2, "the new files of batches 11 and 12"


def test_compaction_and_vacuum_keep_the_rows_deletion_vectors_hide_hidden(tmp_path: Path) -> None:
    sink, model = dv_tables(tmp_path, vacuum_retention_hours=0), dict[Any, Any]()
    start(sink, S, [cb.row(S, (k,), c_int=k) for k in range(40)], model)
    for batch_id in range(10, 16):
        events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-k * batch_id), batch_id)
                  for k in range(batch_id % 3, 40, 5) if (k,) in model and k != batch_id]
        events.append(cb.event("d", model[(batch_id,)], None, batch_id))
        cb.write_batch(sink, S, cb.batch(S, events), batch_id)
        cb.apply(model, S, events)
    root = Path(sink.config.uri(S.table_id, "mirror"))  # type: ignore[arg-type]
    vectors = sorted(root.glob("deletion_vector_*.bin"))
    assert len(vectors) == 6, "one deletion-vector file per batch"
    for f in vectors:  # written 10 days ago; the compaction below removes their files now
        os.utime(f, (f.stat().st_atime - 10 * 86400, f.stat().st_mtime - 10 * 86400))
    Maintainer(dv_tables(tmp_path, vacuum_retention_hours=168)).maintain(S.table_id)
    assert sorted(root.glob("deletion_vector_*.bin")) == vectors, "removed within the retention: kept"
    Maintainer(sink).maintain(S.table_id)  # retention 0
    mirror = deltalake.DeltaTable(str(root))
    assert not list(mirror.deletion_vectors()), "compaction wrote files without deletion vectors"
    assert not list(root.glob("deletion_vector_*.bin")), "VACUUM deleted the deletion vectors no file uses"
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=k), 20) for k in (20, 21)]
    cb.write_batch(sink, S, cb.batch(S, events), 20)  # deletion vectors on the compacted files
    cb.apply(model, S, events)
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    mirror.update_incremental()
    mirror.create_checkpoint()  # the replay starts from a checkpoint now
    assert len(list(root.glob("deletion_vector_*.bin"))) == 1
    assert unused_files(mirror, 0) == [], "the live file's deletion vector would be deleted"


def test_composite_keys_and_a_key_updated_twice(tmp_path: Path) -> None:
    sink, model = dv_tables(tmp_path), dict[Any, Any]()
    start(sink, C, [cb.row(C, (k, f"b{k % 3}"), c_int=k) for k in range(24)], model)
    for batch_id in range(10, 14):
        events = [cb.event("u", model[(k, f"b{k % 3}")], cb.row(C, (k, f"b{k % 3}"), c_int=batch_id), batch_id)
                  for k in range(batch_id - 10, 24, 4)]
        events.append(cb.event("c", None, cb.row(C, (100 + batch_id, "new"), c_int=1), batch_id))
        cb.write_batch(sink, C, cb.batch(C, events), batch_id)
        cb.apply(model, C, events)
        assert cb.mirror_rows(sink, C) == cb.model_rows(model)


def test_a_commit_another_writer_took_is_refused_naming_the_cause(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "_delta_log")
    _commit(str(tmp_path), 1, [{"commitInfo": {}}])
    with pytest.raises(CommitConflict, match=r"another writer committed version 1 "):
        _commit(str(tmp_path), 1, [{"commitInfo": {}}])


def test_deletion_vectors_on_an_object_store_are_refused_naming_the_fix() -> None:
    with pytest.raises(ValidationError, match=r"sink.deletion_vectors needs a local sink.path.*deletion_vectors: false"):
        DeltaSinkConfig(path="s3://bucket/lake", deletion_vectors=True)
    assert DeltaSinkConfig(path="file:///tmp/lake", deletion_vectors=True).deletion_vectors


def test_maintenance_purges_mostly_hidden_files_and_leaves_the_snapshot_files(tmp_path: Path) -> None:
    """Files whose deletion vector hides half their rows or more are rewritten without them;
    compaction takes only the small files, not the snapshot's (rewriting those stalled the
    mirror for 28 s at TPC-DS SF1000)."""
    sink, model = dv_tables(tmp_path), dict[Any, Any]()
    start(sink, S, [cb.row(S, (k,), c_int=k, c_str="x" * 200) for k in range(400)], model)
    root = Path(sink.config.uri(S.table_id, "mirror"))  # type: ignore[arg-type]
    mirror = deltalake.DeltaTable(str(root))
    snapshot = {p: s for p, s in zip(*pa.table(mirror.get_add_actions()).select(["path", "size_bytes"]).to_pydict()
                                     .values(), strict=True)}
    events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-k), 10) for k in range(0, 240, 4)]  # file 0: 60%
    events += [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-k), 10) for k in range(1, 40, 4)]  # file 1: 10%
    cb.write_batch(sink, S, cb.batch(S, events), 10)
    cb.apply(model, S, events)
    for batch_id in (11, 12, 13):  # small files of new rows
        events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=batch_id), batch_id) for k in (2, 3)]
        cb.write_batch(sink, S, cb.batch(S, events), batch_id)
        cb.apply(model, S, events)
    config = sink.config.model_copy(update={"maintenance": MaintenanceConfig(mirror_file_size=int(min(snapshot.values()) * 1.9))})
    Maintainer(DeltaTables(config, query_id="q")).maintain(S.table_id)
    mirror.update_incremental()
    live = set(pa.table(mirror.get_add_actions()).column("path").to_pylist())
    hidden = {b["filepath"].rsplit("/", 1)[1] for r in mirror.deletion_vectors() for b in pa.record_batch(r).to_pylist()}
    assert len(snapshot.keys() - live) == 1, "the mostly hidden snapshot file is rewritten, the others stay"
    assert len(snapshot.keys() & hidden) == 3, "the files with few hidden rows keep their deletion vectors"
    assert "REORG" in [h["operation"] for h in mirror.history()]
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    seen = cb.read_with_every_reader(str(root))
    for reader, rows in seen.items():
        assert cb.frozen_rows(rows) == cb.model_rows(model), f"{reader} reads the mirror differently"


def test_a_mirror_with_deletion_vectors_keeps_them_when_the_option_is_turned_off(tmp_path: Path) -> None:
    """A copy-on-write MERGE would read the files without their vectors (rows come back): the
    table's property, not the option, decides."""
    sink, model = dv_tables(tmp_path), dict[Any, Any]()
    start(sink, S, [cb.row(S, (k,), c_int=k) for k in range(20)], model)
    events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-k), 10) for k in range(0, 20, 3)]
    cb.write_batch(sink, S, cb.batch(S, events), 10)
    cb.apply(model, S, events)
    off = DeltaTables(sink.config.model_copy(update={"deletion_vectors": False}), query_id="q")
    events = [cb.event("d", model[(k,)], None, 11) for k in range(0, 20, 4)]
    cb.write_batch(off, S, cb.batch(S, events), 11)
    cb.apply(model, S, events)
    assert cb.mirror_rows(off, S) == cb.model_rows(model)
    assert '"deletionVector"' in (Path(sink.config.uri(S.table_id, "mirror")) / "_delta_log"  # type: ignore[arg-type]
                                   / f"{deltalake.DeltaTable(sink.config.uri(S.table_id, 'mirror')).version():020d}.json").read_text()


def test_auto_gives_the_mirrors_a_job_creates_deletion_vectors_and_leaves_existing_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``auto`` (the default): a mirror just created gets deletion vectors; one that already holds
    copy-on-write data stays so (its pyarrow readers keep working) until ``true``; an object
    store stays copy-on-write."""
    def reader_features(sink: DeltaTables) -> list[str]:
        return deltalake.DeltaTable(sink.config.uri(S.table_id, "mirror")).protocol().reader_features or []

    def tables(root: Path, **options: Any) -> DeltaTables:
        return DeltaTables(DeltaSinkConfig(path=str(root), engine="delta-rs", **options), query_id="q")

    new, model = tables(tmp_path / "new"), dict[Any, Any]()
    assert new.config.deletion_vectors == "auto"
    ensure_table(new.config.uri(S.table_id, "mirror"), {}, S, "mirror", mirror_schema(S))  # as the job's open does
    with caplog.at_level("INFO", logger="sinks.delta.maintenance"):
        Maintainer(new).prepare_mirror(S.table_id)
        Maintainer(new).prepare_mirror(S.table_id)  # a restart: said once, when turned on
    assert "deletionVectors" in reader_features(new)
    told = [r.getMessage() for r in caplog.records if "deletion vectors" in r.getMessage()]
    assert len(told) == 1 and "not delta-rs's to_pandas()" in told[0], told
    for batch_id, op in enumerate(("r", "u"), start=1):  # a snapshot, then updates of three keys
        events = [cb.event(op, model.get((k,)), cb.row(S, (k,), c_int=k * batch_id), batch_id)
                  for k in range(10 if op == "r" else 3)]
        cb.write_batch(new, S, cb.batch(S, events), batch_id, snapshot_append=op == "r")
        cb.apply(model, S, events)
    assert cb.mirror_rows(new, S) == cb.model_rows(model)
    assert any("deletionVector" in a.get("add", {}) and a["add"]["deletionVector"] for a in log_actions(new, S))

    old, model = tables(tmp_path / "old", deletion_vectors=False), {}
    start_events = [cb.event("r", None, cb.row(S, (k,), c_int=k), 1) for k in range(10)]
    cb.write_batch(old, S, cb.batch(S, start_events), 1, snapshot_append=True)
    cb.apply(model, S, start_events)
    Maintainer(old).prepare_mirror(S.table_id)
    auto = tables(tmp_path / "old")  # the job restarted with the default
    Maintainer(auto).prepare_mirror(S.table_id)
    assert "deletionVectors" not in reader_features(auto)
    events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-k), 2) for k in range(3)]
    cb.write_batch(auto, S, cb.batch(S, events), 2)
    cb.apply(model, S, events)
    assert cb.frozen_rows(deltalake.DeltaTable(auto.config.uri(S.table_id, "mirror")).to_pyarrow_table().to_pylist()) \
        == cb.model_rows(model), "an existing mirror's pyarrow readers keep working"
    on = tables(tmp_path / "old", deletion_vectors=True)
    Maintainer(on).prepare_mirror(S.table_id)
    assert "deletionVectors" in reader_features(on)

    assert not DeltaSinkConfig(path="s3://bucket/lake").wants_deletion_vectors(new=True)
    assert DeltaSinkConfig(path="file:///tmp/lake").wants_deletion_vectors(new=True)


def test_a_checkpoint_follows_every_hundred_versions_whoever_wrote_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers replay at most ``CHECKPOINT_EVERY`` JSON commits: the job checkpoints after its
    own commits by distance from the last checkpoint, since other commits (delta-rs's, which
    checkpoint only at multiples of their own interval) may take the multiples."""
    monkeypatch.setattr(deletion_vectors, "CHECKPOINT_EVERY", 5)
    sink, model = dv_tables(tmp_path), dict[Any, Any]()
    start(sink, S, [cb.row(S, (k,), c_int=k) for k in range(40)], model)
    uri = sink.config.uri(S.table_id, "mirror")
    for batch_id in range(10, 30):
        if batch_id % 4 == 0:  # another writer's commit in between
            deltalake.DeltaTable(uri).alter.set_table_properties({"delta.logRetentionDuration": f"interval {batch_id} days"})
        events = [cb.event("u", model[(k,)], cb.row(S, (k,), c_int=-batch_id), batch_id) for k in (batch_id % 40, 3)]
        cb.write_batch(sink, S, cb.batch(S, events), batch_id)
        cb.apply(model, S, events)
        version = deltalake.DeltaTable(uri).version()
        assert version - deletion_vectors._last_checkpoint(uri) < 5, f"version {version}: no checkpoint for 5 versions"
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    assert cb.frozen_rows(cb.read_with_every_reader(uri)["duckdb"]) == cb.model_rows(model)


def _pieces(rng: random.Random, live: dict[int, dict[str, Any]], pos: int) -> tuple[list[list[dict[str, Any]]], int]:
    """One batch of random c/u/d events and primary-key updates over keys 0..23 and the
    snapshot's, cut into 1-3 pieces at random points (a cut slice's tasks), each valid in turn."""
    events = []
    for _ in range(rng.randint(1, 20)):
        pos += 1
        key = rng.choice([*range(24), *range(100, 140)])
        image = cb.row(S, (key,), c_int=rng.randint(0, 10**6), c_str=f"v{pos}")
        if key not in live:
            events.append(cb.event("c", None, image, pos))
            live[key] = image
        elif rng.random() < 0.2:
            events.append(cb.event("d", live.pop(key), None, pos))
        elif rng.random() < 0.25 and (moved := rng.randint(0, 23)) not in live:  # the key itself changes
            image = cb.row(S, (moved,), c_int=key, c_str=f"moved{pos}")
            events.append(cb.event("u", live.pop(key), image, pos))
            live[moved] = image
        else:
            events.append(cb.event("u", live[key], image, pos))
            live[key] = image
    cuts = sorted(rng.sample(range(1, len(events)), min(rng.randint(0, 2), len(events) - 1)))
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)], pos


@pytest.mark.parametrize("vectors", [True, False], ids=["deletion-vectors", "copy-on-write"])
def test_the_tasks_reduced_pieces_merge_into_the_mirror_as_the_changelog_rows_would(
    tmp_path: Path, spark: Any, vectors: bool,
) -> None:
    """Each task stages its piece of a batch reduced per key (``write_mirror_effects``). With
    deletion vectors the merge adds the upsert files as they are and hides a key's row in an
    earlier piece's file when a later piece (or a later batch of a coalesced merge) changes the
    key again. A copy-on-write mirror does not take them (the job's writer stages none for it:
    measured, that was slower): the changelog's rows are merged. Either way the files that no
    commit references are deleted."""
    sink, model, rng = dv_tables(tmp_path, vectors=vectors), dict[Any, Any](), random.Random(5)
    start(sink, S, [cb.row(S, (k,), c_int=k, c_str=f"s{k}") for k in range(100, 140)], model, vectors=vectors)
    live, pos, upsert_files = {k[0]: dict(v) for k, v in model.items()}, 0, set()
    mirror_dir = Path(sink.config.uri(S.table_id, "mirror"))
    batch_id = 10
    while batch_id < 40:
        group = []  # one to three batches, merged as one (the follower coalesces a queue)
        for _ in range(rng.randint(1, 3)):
            pieces, pos = _pieces(rng, live, pos)
            files = [f for piece in pieces
                     for f in write_change_files(sink.config, S, cb.batch(S, piece), reduce=True)]
            assert {f.stream for f in files} >= {"changes", MIRROR_UPSERTS} or any(
                f.stream == MIRROR_REMOVES for f in files)
            group.append(files)
            upsert_files |= {f.path for f in files if f.stream == MIRROR_UPSERTS}
            for piece in pieces:
                cb.apply(model, S, piece)
            batch_id += 1
        how = merge_into_mirror(sink, S, group, batch_id - 1)
        assert ("reduced files of the tasks" if vectors else "change rows read") in how, how
        assert cb.mirror_rows(sink, S) == cb.model_rows(model), f"after batch {batch_id - 1}"
        on_disk = {p.name for p in mirror_dir.glob("*.parquet")}
        for f in (f for files in group for f in files if f.kind == "mirror"):
            kept = vectors and f.stream == MIRROR_UPSERTS
            assert (f.path in on_disk) == kept, f"{f.stream} file {f.path} (kept or not)"
    added = [a["add"] for a in log_actions(sink, S) if a.get("add", {}).get("path") in upsert_files]
    if vectors:
        assert {a["path"] for a in added} == upsert_files
        assert any("deletionVector" in a and json.loads(a["stats"])["tightBounds"] is False for a in added), \
            "some key recurred in a later piece: the earlier piece's file came with a deletion vector"
    else:
        assert not added
    for reader, rows in cb.read_with_every_reader(str(mirror_dir), spark).items():
        assert cb.frozen_rows(rows) == cb.model_rows(model), f"{reader} reads the mirror differently"

    # a replay of the last batch adds nothing and leaves none of its files behind
    image = next(iter(model.values()))
    replay = write_change_files(sink.config, S, cb.batch(S, [cb.event("u", image, {**image, "c_str": "x"}, 1)]),
                                reduce=True)
    merge_into_mirror(sink, S, [replay], batch_id - 1)
    assert cb.mirror_rows(sink, S) == cb.model_rows(model), "the replay's row (c_str 'x') reached the mirror"
    assert not (mirror_dir / replay[1].path).exists()

    # a batch whose tasks did not all reduce (a task of an older writer): the changelog rows are
    # merged, and the reduced files there are deleted
    first, pos = _pieces(rng, live, pos)
    second, pos = _pieces(rng, live, pos)
    pieces = first + second
    files = [f for i, piece in enumerate(pieces)
             for f in write_change_files(sink.config, S, cb.batch(S, piece), reduce=i > 0)]
    for piece in pieces:
        cb.apply(model, S, piece)
    assert "change rows read" in merge_into_mirror(sink, S, [files], batch_id)
    assert cb.mirror_rows(sink, S) == cb.model_rows(model)
    assert not any((mirror_dir / f.path).exists() for f in files if f.kind == "mirror")


@pytest.mark.parametrize("vectors", [True, False], ids=["deletion-vectors", "copy-on-write"])
def test_the_jobs_writer_reduces_in_its_tasks_for_keyed_mirrors_with_deletion_vectors(
    tmp_path: Path, vectors: bool,
) -> None:
    """The writer a job's tasks get after the sink opened (DeltaSink.writer) stages the reduced
    files for the mirrors that merge them; a copy-on-write mirror and a table without a key get
    the changelog file alone."""
    keyless = replace(S, table_id=TableId("shop", "keyless"), primary_key=())
    config = DeltaSinkConfig(path=str(tmp_path / "lake"), engine="delta-rs", deletion_vectors=vectors,
                             register_tables=False)
    sink = DeltaSink(config, "job")
    sink.open({t.table_id: t for t in (S, C, keyless)})
    try:
        writer = sink.writer()
        assert writer.reduced_mirrors == ({str(S.table_id), str(C.table_id)} if vectors else set())  # type: ignore[attr-defined]
        for schema in (S, C, keyless):
            key = tuple(cb.KEY_VALUES[k][1] for k in schema.primary_key)
            image = cb.row(schema, key, c_int=1, **({} if key else {"id": 7}))
            staged = writer.write(schema, cb.batch(schema, [cb.event("c", None, image, 1)]), "changes")
            kinds = [d["kind"] for d in staged]
            assert kinds == (["changelog", "mirror"] if vectors and schema.primary_key else ["changelog"]), schema
    finally:
        sink.close()
