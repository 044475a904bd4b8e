"""Postgres -> Spark -> Delta, exactly once, with a real PostgreSQL, real Spark and real Delta.

Chunk size 100 and 4 chunks per batch, so every test goes through many chunks and batches while
random writers (primary-key updates and multi-statement transactions included) change the rows
being snapshotted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import InjectedFault
from pipeline import PACE_S, files_of_last_batch, writing
from pipeline_pg import (
    PgPipeline,
    PgRandomWriter,
    assert_changelog_exact,
    assert_mirror_equals_source,
)
from test_pipeline import kill_a_driver_at_random

from binlog.postgres.positions import LsnOffset
from binlog.registry import create_dialect
from cdc.app.runner import JobFailed
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.schema import TableId
from chunking.chunks import SnapshotSplit

ROWS = 1500


def create_table(admin: Any, name: str = "t", rows: int = ROWS) -> None:
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text, n int)")
    admin.execute(f"INSERT INTO {name} SELECT i * 2, 'v' || i, i FROM generate_series(0, {rows - 1}) AS i")


@pytest.fixture
def pipeline(spark: Any, postgres_server: PostgresSandbox, pg_database: str, tmp_path: Path) -> Iterator[PgPipeline]:
    p = PgPipeline(spark, postgres_server, pg_database, tmp_path)
    yield p
    p.cleanup()


@pytest.fixture
def pg_admin(pipeline: PgPipeline) -> Iterator[Any]:
    """An autocommit superuser connection to the pipeline's schema."""
    with contextlib.closing(pipeline.admin()) as conn:
        yield conn


def check_all(p: PgPipeline) -> None:
    for table_id, schema in p.schemas().items():
        assert_mirror_equals_source(p, table_id.table, schema)
        assert_changelog_exact(p, table_id.table, schema)


@pytest.mark.parametrize("async_mirror", [True, False], ids=["mirror-follows", "mirror-inline"])
def test_snapshot_with_concurrent_writers_is_exact(async_mirror: bool, pipeline: PgPipeline, pg_admin: Any,
                                                   postgres_server: PostgresSandbox) -> None:
    pipeline.async_mirror = async_mirror
    create_table(pg_admin)
    writer = PgRandomWriter(pipeline, "t", seed=11, pause_s=PACE_S)
    with writing(writer):  # type: ignore[arg-type]
        first = pipeline.run()
    second = pipeline.run()
    assert writer.statements > 50
    assert len(first) >= 4, "many batches: chunks are staged and emitted across batches"
    assert second
    check_all(pipeline)
    log = (pipeline.lake / pipeline.schema / "t" / "_delta_log").glob("*.json")
    assert any('"deletionVector"' in f.read_text() for f in log), "the mirror's MERGEs wrote no deletion vector"
    reads = sum(1 for op in pipeline.changelog("t")["op"].to_pylist() if op == "r")
    assert sum(b.snapshot_rows for b in first + second) == reads
    leftovers = [p for p in pipeline.state_dir.rglob("*") if p.is_file() and ("staged" in p.parts or "chunks" in p.parts)]
    assert not leftovers, f"state of committed batches was not cleaned up: {leftovers[:3]}"
    assert pipeline.started_at is not None and pipeline.started_at.is_before(pipeline.slot_confirmed()), \
        "committed batches released the slot"


def test_one_log_reader_emits_every_chunk_in_the_stream_task(pipeline: PgPipeline, pg_admin: Any) -> None:
    """With ``log_readers: 1`` no two tasks of a batch read the slot: the stream task emits the
    chunks itself. (The other tests run the default, where emit tasks and the stream take turns
    on the slot.)"""
    pipeline.source["log_readers"] = 1
    create_table(pg_admin)
    writer = PgRandomWriter(pipeline, "t", seed=17, pause_s=PACE_S)
    with writing(writer):  # type: ignore[arg-type]
        first = pipeline.run()
    pipeline.run()
    assert len(first) >= 4
    check_all(pipeline)


def test_catch_up_read_by_several_stream_tasks_is_exact(pipeline: PgPipeline, pg_admin: Any) -> None:
    """A backlog cut into three pieces, read by three tasks (the later two from temporary copies
    of the slot), lands once and in commit order: keys changed in several pieces end with their
    last value. Then a piece's task dies in the next catch-up, and the replay is exact too."""
    create_table(pg_admin)
    create_table(pg_admin, "u")
    pipeline.run()
    pipeline.source["stream_split_bytes"] = 4096
    pipeline.job["parallelism"] = 3
    for round_, fault in enumerate((False, True)):
        writers = [PgRandomWriter(pipeline, t, seed=10 * round_ + i, pause_s=PACE_S) for i, t in enumerate("tu")]
        with writing(*writers):  # type: ignore[arg-type]
            time.sleep(3)
        if fault:
            pipeline.arm("stream", after=1)
            with pytest.raises((JobFailed, InjectedFault), match="injected fault at stream"):
                pipeline.run()
        catch_up = pipeline.run()
        with_rows = [b.change_rows > 0 for b in catch_up]
        # After the fault Spark replays the failed run's batch, which ends where that run's
        # available-now target was. Its tasks may have made their temporary slots before the
        # fault (creating a logical slot writes WAL), so the new run's target can lie past that
        # end: one more batch then moves the position over WAL without changes.
        if fault:
            assert with_rows[0] and not any(with_rows[1:]), with_rows
        else:
            assert with_rows == [True], "one catch-up batch"
        check_all(pipeline)
        for table in "tu":
            changelog = pipeline.lake / pipeline.schema / f"{table}_changelog"
            assert files_of_last_batch(changelog) == 3, f"{table}: one file per stream task"
    slots = [r[0] for r in pg_admin.execute("SELECT slot_name FROM pg_replication_slots").fetchall()]
    assert pipeline.config().source.slot in slots and not [s for s in slots if "_piece_" in s], slots


def _lsn(conn: Any) -> LsnOffset:
    return LsnOffset.parse(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])


def _offsets(p: PgPipeline) -> list[dict[str, Any]]:
    """Every offset Spark logged for the query, in batch order."""
    logged = sorted((f for f in (p.checkpoint / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    return [json.loads(f.read_text().splitlines()[-1]) for f in logged]


def _positions(p: PgPipeline) -> list[LsnOffset]:
    """The end position of every offset Spark logged for the query, in batch order."""
    return [LsnOffset.from_dict(o["position"]) for o in _offsets(p)]


def _backlog(pipeline: PgPipeline, pg_admin: Any) -> tuple[int, int]:
    """Random writes for 3 s, then one transaction that updates every row of t; the WAL bytes
    written, and the big transaction's row count."""
    before = _lsn(pg_admin)
    writers = [PgRandomWriter(pipeline, t, seed=i, pause_s=PACE_S) for i, t in enumerate("tu")]
    with writing(*writers):  # type: ignore[arg-type]
        time.sleep(3)
    big = pg_admin.execute("UPDATE t SET n = n + 1000000").rowcount
    return _lsn(pg_admin).lsn - before.lsn, big


@pytest.mark.parametrize(("split", "parallelism"), [(False, 2), (True, 3)], ids=["one-reader", "split-readers"])
def test_capped_catch_up_over_many_batches_is_exact(split: bool, parallelism: int, pipeline: PgPipeline,
                                                    pg_admin: Any) -> None:
    """A backlog of many times ``max_batch_bytes`` is read in batches that each end that many WAL
    bytes on; each transaction lands in the batch its commit lies in, whole, even the one larger
    than the cap; every change once (also with each capped batch cut for several readers)."""
    create_table(pg_admin)
    create_table(pg_admin, "u")
    pipeline.run()
    start = _positions(pipeline)[-1]
    total, big = _backlog(pipeline, pg_admin)
    cap = max(4096, total // 15)
    pipeline.source["max_batch_bytes"] = cap
    if split:
        pipeline.source["stream_split_bytes"] = cap // 8
    pipeline.job["parallelism"] = parallelism
    catch_up = pipeline.run()
    batches = [b for b in catch_up if b.change_rows]
    assert len(batches) >= 8, f"{total} WAL bytes in batches of {cap}: only {len(batches)} batches"
    assert max(b.change_rows for b in batches) >= big, "the transaction larger than the cap was split"
    ends = [e for e in _positions(pipeline) if start.is_before(e)]
    assert all(b.lsn - a.lsn <= cap for a, b in itertools.pairwise([start, *ends])), "a batch read more than the cap"
    check_all(pipeline)


def test_capped_catch_up_across_a_crash_is_exact(pipeline: PgPipeline, pg_admin: Any) -> None:
    """The driver dies after the sinks committed the third capped batch, before Spark recorded
    it: the restart replays that batch's slice (the same bounds, from the offset log) without
    writing it again, and goes on."""
    create_table(pg_admin)
    create_table(pg_admin, "u")
    pipeline.run()
    total, _ = _backlog(pipeline, pg_admin)
    pipeline.source["max_batch_bytes"] = max(4096, total // 10)
    pipeline.arm("after_sink_commit", after=2)
    with pytest.raises((JobFailed, InjectedFault), match="injected fault at after_sink_commit"):
        pipeline.run()
    restarted = pipeline.run()
    assert restarted[0].change_rows and not restarted[0].wrote, f"the replay wrote again: {restarted[0]}"
    assert len([b for b in restarted if b.change_rows]) >= 3
    check_all(pipeline)


@pytest.mark.parametrize(("point", "after"), [
    ("stage", 1),              # a staging task dies (second chunk staged)
    ("plan", 1),               # after staging, before the next plan (driver)
    ("emit", 1),               # an emit task dies
    ("after_sink_commit", 1),  # Delta committed, Spark's commit log not written
    ("stream", 0),             # the log phase dies
    ("mirror", 0),             # a background mirror MERGE dies: the changelog is ahead of it
])
def test_crash_and_restart_is_exact(point: str, after: int, pipeline: PgPipeline, pg_admin: Any,
                                    postgres_server: PostgresSandbox) -> None:
    create_table(pg_admin)
    writer = PgRandomWriter(pipeline, "t", seed=hash(point) % 1000, pause_s=PACE_S)
    pipeline.arm(point, after=after)
    with writing(writer):  # type: ignore[arg-type]
        with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
            pipeline.run()
        restarted = pipeline.run()
    pipeline.run()
    if point == "after_sink_commit":
        replayed = restarted[0]
        assert replayed.snapshot_rows + replayed.change_rows > 0, "the replayed batch had rows"
        assert not replayed.wrote, f"the replay wrote again: {replayed}"
    check_all(pipeline)


def test_replica_identity_full_and_toast_through_the_pipeline(pipeline: PgPipeline, pg_admin: Any) -> None:
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(200_000))
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
    pg_admin.execute("ALTER TABLE t ALTER COLUMN v SET STORAGE EXTERNAL")
    pg_admin.execute("INSERT INTO t SELECT i, CASE WHEN i %% 100 = 0 THEN %s ELSE 'v' || i END, i "
                     "FROM generate_series(0, 499) AS i", (big,))
    pipeline.run()
    pg_admin.execute("UPDATE t SET n = n + 1 WHERE id % 50 = 0")  # TOASTed v unchanged on the even hundreds
    pg_admin.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    pg_admin.execute("UPDATE t SET n = n + 1 WHERE id % 100 = 0")
    pg_admin.execute("UPDATE t SET id = id + 1000 WHERE id = 200")
    pipeline.run()
    check_all(pipeline)
    mirror = {r["id"]: r["v"] for r in pipeline.mirror("t").to_pylist()}
    assert mirror[0] == big and mirror[1200] == big and mirror[50] == "v50"


def test_every_type_lands_in_delta_as_the_snapshot_and_the_stream_read_it(pipeline: PgPipeline, pg_admin: Any) -> None:
    from test_postgres import TYPE_ROWS, TYPES_DDL

    pg_admin.execute(TYPES_DDL)
    pg_admin.execute("ALTER TABLE types ADD COLUMN touch int DEFAULT 0")
    pg_admin.execute("INSERT INTO types VALUES " + ", ".join(TYPE_ROWS))
    pipeline.run()
    pg_admin.execute("UPDATE types SET touch = 1")
    pipeline.run()
    dialect = create_dialect(pipeline.config().source)
    schema = pipeline.schemas()[TableId(pipeline.schema, "types")]
    _, rows = dialect.read_chunk(schema, SnapshotSplit(schema.table_id, 0, "id", None, None))
    expected = {r["id"]: _stored(r) for r in rows.to_pylist()}
    mirror = {r["id"]: _stored(r) for r in pipeline.mirror("types").to_pylist()}
    assert mirror == expected
    log = pipeline.changelog("types").to_pylist()
    reads = {r["after"]["id"]: _stored(r["after"]) for r in log if r["op"] == "r"}
    updates = {r["after"]["id"]: _stored(r["after"]) for r in log if r["op"] == "u"}
    assert {k: {**v, "touch": 1} for k, v in reads.items()} == updates == expected


def _stored(row: dict[str, Any]) -> dict[str, Any]:
    """A row as Delta stores it (durations as int64 microseconds), NaN comparable."""
    out = {}
    for k, v in row.items():
        if isinstance(v, dt.timedelta):
            v = v // dt.timedelta(microseconds=1)
        if isinstance(v, float) and v != v:
            v = "NaN"
        out[k] = v
    return out


@pytest.mark.slow  # three fresh drivers (a JVM and Spark's streaming start each): minutes on 2 busy cores
@pytest.mark.parametrize("capped", [False, True], ids=["defaults", "capped-and-cut"])
def test_driver_killed_at_random_moments_is_exact(capped: bool, pipeline: PgPipeline, pg_admin: Any) -> None:
    """SIGKILL the driver process (its JVM, Python workers and open peeks) several times while a
    writer runs, then catch up and check: the slot is freed by the server and taken again.
    ``capped-and-cut``: a short snapshot, then stream batches of at most 8 KiB of WAL, each cut
    for three tasks, so that kills land while pieces read their temporary copies of the slot
    (the server drops a killed session's copy).

    Where its time goes (measured): each new driver's start-up (the JVM, then Spark's streaming
    query and Python planner) and its batches; the restarted drivers measured waited 0 s for the
    slot (a killed reader's peek ends within seconds; ``check_source`` waits only for SQL sessions)."""
    create_table(pg_admin, rows=300 if capped else 2000)
    if capped:
        pipeline.source.update(max_batch_bytes=8192, stream_split_bytes=1024)
        pipeline.job["parallelism"] = 3
    pipeline.start_reference()
    spec = json.dumps(pipeline.raw_config())
    rng = random.Random(7)
    kills = 0
    # Capped, the final catch-up reads the writer's whole backlog in 8 KiB batches (about 2.5 s
    # each): a tenth of the pace still fills each batch of the kill rounds past the cap.
    writer = PgRandomWriter(pipeline, "t", seed=5, pause_s=10 * PACE_S if capped else PACE_S)
    with writing(writer):  # type: ignore[arg-type]
        for attempt in range(3):  # land anywhere in a batch: planning, tasks, commits
            kill_a_driver_at_random(spec, rng, pipeline.workdir / f"driver-{attempt}.err")
            kills += 1
    pipeline.run()
    assert kills == 3
    check_all(pipeline)
    if capped:  # the batches that read only the log stayed under the cap, and some were long enough to cut
        logged = _offsets(pipeline)
        slices = [(LsnOffset.from_dict(b["position"]).lsn - LsnOffset.from_dict(a["position"]).lsn)
                  for a, b in itertools.pairwise(logged) if not b["emit"] and not b["stage"]]
        assert slices and max(slices) <= 8192 and max(slices) >= 2 * 1024, slices


# --- startup modes that start in the slot's log ----------------------------------------------------

@pytest.mark.parametrize(("mode", "first", "second"), [
    ("earliest-offset", 10, 13),  # the slot's position: every insert since the slot was made
    ("specific-offset", 6, 9),    # from a WAL position taken after the 4th insert
    ("timestamp", 6, 9),          # from the first transaction that committed at or after a time
])
def test_startup_modes_from_the_slot(mode: str, first: int, second: int, pipeline: PgPipeline,
                                     pg_admin: Any) -> None:
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    dialect = create_dialect(pipeline.config().source)
    with contextlib.closing(dialect.connect()) as conn:
        dialect.check_source(conn)  # the publication and the slot, as the job's start makes them
    for i in range(4):  # one transaction each
        pg_admin.execute("INSERT INTO t VALUES (%s, 'v')", (i,))
    row = pg_admin.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    time.sleep(0.05)
    pipeline.source = {"startup_mode": mode}
    if mode == "specific-offset":
        pipeline.source["startup_offset"] = {"lsn": row[0]}
    if mode == "timestamp":
        pipeline.source["startup_timestamp_ms"] = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(4, 10):
        pg_admin.execute("INSERT INTO t VALUES (%s, 'v')", (i,))
    pipeline.run()
    assert (pipeline.mirror("t").num_rows if (pipeline.lake / pipeline.schema / "t").exists() else 0) == first
    for i in range(10, 13):
        pg_admin.execute("INSERT INTO t VALUES (%s, 'v')", (i,))
    pg_admin.execute("UPDATE t SET v = 'changed' WHERE id = 10")
    pipeline.run()
    mirror = pipeline.mirror("t")
    assert mirror.num_rows == second
    assert {r["id"]: r["v"] for r in mirror.to_pylist()}[10] == "changed"


def test_a_specific_offset_the_slot_no_longer_holds_is_refused(pipeline: PgPipeline, pg_admin: Any) -> None:
    """The job stops at its first plan, before a batch: no row written, the slot not moved."""
    pg_admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg_admin.execute("INSERT INTO t VALUES (1, 'v')")
    pipeline.source = {"startup_mode": "specific-offset", "startup_offset": {"lsn": "0/10"}}
    with pytest.raises(Exception, match=r"startup_offset 0/10 is before replication slot .* confirmed position"):
        pipeline.run()
    confirmed = pipeline.slot_confirmed()
    pg_admin.execute("INSERT INTO t VALUES (2, 'v')")
    with pytest.raises(Exception, match=r"startup_offset 0/10 is before replication slot .* confirmed position"):
        pipeline.run()
    assert pipeline.slot_confirmed() == confirmed
    assert (pipeline.mirror("t").num_rows if (pipeline.lake / pipeline.schema / "t").exists() else 0) == 0


def test_a_startup_offset_that_is_not_an_lsn_is_a_config_error(pipeline: PgPipeline) -> None:
    pipeline.source = {"startup_mode": "specific-offset", "startup_offset": {"lsn": "16B3748"}}
    with pytest.raises(Exception, match="not a WAL position like '0/16B3748'"):
        pipeline.config()
    pipeline.source = {"startup_mode": "specific-offset"}
    with pytest.raises(Exception, match="needs startup_offset"):
        pipeline.config()
