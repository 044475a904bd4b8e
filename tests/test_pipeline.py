"""MySQL -> Spark -> Delta, exactly once, with real MariaDB, real Spark and real Delta tables.

Chunk size 100 and 4 chunks per batch, so every test goes through many chunks and batches while
random writers change the rows being snapshotted.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import pymysql
import pytest
from faults import InjectedFault
from pipeline import (
    PACE_S,
    STREAM_STORES,
    Pipeline,
    RandomWriter,
    StreamStore,
    assert_changelog_exact,
    assert_mirror_equals_source,
    every_stream_store,
    files_of_last_batch,
    restarted_pravega,
    stream_store,
    writing,
)

from binlog.mysql.reader import current_offset
from cdc.app.runner import JobFailed
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.schema import TableId

ROWS = 1500


def create_table(admin: pymysql.connections.Connection, name: str = "t", rows: int = ROWS) -> None:
    with admin.cursor() as cur:
        cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.execute(f"INSERT INTO {name} VALUES " + ",".join(f"({i * 2}, 'v{i}', {i})" for i in range(rows)))


# Both Delta engines run keys of every kind and the SIGKILLs (a snapshot under writers with the
# mirror following, killed at random: one job fanned out to a lake of each kind). The crash after the sink's commit and before Spark's commit
# log, and a mirror MERGE that dies, run on delta-rs (both mirror kinds); on delta-spark the sink
# contract (tests/test_sink_contract.py) crashes its async mirror after staging and in the middle
# of a commit, and replays committed batches, with the same committer (CI time). Cases decided before the
# sink (a staging, emit or stream task dies, the plan is cut, a purged binlog, a new table, a
# split catch-up), the inline mirror, the plain snapshot under writers and the fan-out (the
# committer's order between sinks) run on the default engine only: the executors write the same
# files and the driver commits them the same way on both, and the SIGKILL suite covers the
# rest on delta-spark (CI time: each delta-spark MERGE is several Spark jobs; the engine's own
# contract is tests/test_delta_tables.py and tests/test_sink_contract.py). The delta-spark cases
# below are `slow` (tests/conftest.py, SLOW_ON_DELTA_SPARK): `make test` and CI run them.
# delta-rs writes the mirror with deletion vectors (sink.deletion_vectors: auto, its own commits);
# the copy-on-write mirror (deletion_vectors: false) runs the cases where the mirror is written,
# and the SIGKILLs.
_RS, _SPARK, _COW = "delta-rs", "delta-spark", "delta-rs-copy-on-write"
ENGINES = pytest.mark.parametrize("pipeline", [_RS, _SPARK, _COW], indirect=True)


@pytest.fixture
def pipeline(request: pytest.FixtureRequest, spark: Any, mysql_server: Sandbox, database: str,
             tmp_path: Path) -> Iterator[Pipeline]:
    """The pipeline into Delta, with the engine a test is parametrized with (default delta-rs)."""
    p = Pipeline(spark, mysql_server, database, tmp_path)
    p.engine = getattr(request, "param", _RS)
    if p.engine == _COW:
        p.engine, p.deletion_vectors = _RS, False
    yield p
    p.cleanup()


def check_all(p: Pipeline) -> None:
    for table_id, schema in p.schemas().items():
        assert_mirror_equals_source(p, table_id.table, schema)
        assert_changelog_exact(p, table_id.table, schema)


def assert_deletion_vectors_used(p: Pipeline, table: str) -> None:
    """With delta-rs and ``sink.deletion_vectors`` (on by default) the mirror's MERGEs committed
    deletion vectors; copy-on-write and delta-spark, none of ours."""
    log = (p.lake / p.database / table / "_delta_log").glob("*.json")
    ours = any('"deletionVector"' in f.read_text() for f in log)
    if p.engine == _RS and p.deletion_vectors is not False:
        assert ours, f"{table}: no deletion vector was written"
    elif p.engine == _RS:
        assert not ours, f"{table}: deletion vectors in a copy-on-write mirror"


def assert_maintained(p: Pipeline, table: str) -> None:
    """Maintenance ran between the batches: both tables have compaction commits."""
    for name in (table, f"{table}_changelog"):
        history = deltalake.DeltaTable(str(p.lake / p.database / name)).history()
        assert any(h["operation"] == "OPTIMIZE" for h in history), f"{name} was never compacted"


@pytest.mark.parametrize(("async_mirror", "pipeline"), [(True, _RS), (False, _RS), (True, _COW)],
                         ids=["mirror-follows-delta-rs", "mirror-inline-delta-rs", "mirror-follows-copy-on-write"],
                         indirect=["pipeline"])
def test_snapshot_with_concurrent_writers_is_exact(async_mirror: bool, pipeline: Pipeline, admin: Any,
                                                   mysql_server: Sandbox) -> None:
    pipeline.async_mirror = async_mirror
    create_table(admin)
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=11, pause_s=PACE_S)
    with writing(writer):
        first = pipeline.run()
    second = pipeline.run()  # catch up with what the writer did during the first run
    assert writer.statements > 50
    assert len(first) >= 4, "many batches: chunks are staged and emitted across batches"
    assert second
    check_all(pipeline)
    reads = sum(1 for op in pipeline.changelog("t")["op"].to_pylist() if op == "r")
    assert sum(b.snapshot_rows for b in first + second) == reads, "snapshot rows went through executors"
    leftovers = [p for p in pipeline.state_dir.rglob("*") if p.is_file() and ("staged" in p.parts or "chunks" in p.parts)]
    assert not leftovers, f"state of committed batches was not cleaned up: {leftovers[:3]}"
    assert_maintained(pipeline, "t")
    assert_deletion_vectors_used(pipeline, "t")


@pytest.mark.parametrize(("point", "after", "pipeline"), [
    ("stage", 1, _RS),              # a staging task dies (second chunk staged)
    ("plan", 1, _RS),               # after staging, before the next plan (driver)
    ("emit", 1, _RS),               # an emit task dies
    *[("after_sink_commit", 1, e) for e in (_RS, _COW)],  # Delta committed, Spark's commit log not
    ("stream", 0, _RS),                                  # the binlog phase dies
    *[("mirror", 0, e) for e in (_RS, _COW)],             # a background mirror MERGE dies
    ("maintenance", 1, _RS),        # before the changelog's compaction, in the maintainer's background
], indirect=["pipeline"])
def test_crash_and_restart_is_exact(point: str, after: int, pipeline: Pipeline, admin: Any,
                                    mysql_server: Sandbox) -> None:
    create_table(admin)
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=hash(point) % 1000, pause_s=PACE_S)
    pipeline.arm(point, after=after)
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
            pipeline.run()  # a failed background MERGE may surface only when the run drains
        restarted = pipeline.run()
    pipeline.run()
    assert_deletion_vectors_used(pipeline, "t")
    if point == "after_sink_commit":
        replayed = restarted[0]  # Spark replays the batch whose commit log it never wrote
        assert replayed.snapshot_rows + replayed.change_rows > 0, "the replayed batch had rows"
        assert not replayed.wrote, f"the replay wrote again: {replayed}"
    check_all(pipeline)


@ENGINES
def test_keys_of_every_kind_through_one_stream(pipeline: Pipeline, admin: Any, mysql_server: Sandbox) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE composite (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))")
        cur.execute("INSERT INTO composite VALUES " + ",".join(f"({i % 50}, 'k{i}', {i})" for i in range(600)))
        cur.execute("CREATE TABLE strkey (id VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO strkey VALUES " + ",".join(f"('{c}{i:04d}', {i})" for c in "aBcD" for i in range(150)))
        cur.execute("CREATE TABLE nokey (id INT, v VARCHAR(10))")
        cur.execute("INSERT INTO nokey VALUES " + ",".join(f"({i % 300}, 'x{i}')" for i in range(600)))
    pipeline.source["chunk_key_columns"] = {f"{pipeline.database}.nokey": "id"}
    pipeline.run()
    with admin.cursor() as cur:
        cur.execute("UPDATE composite SET b = 'moved' WHERE a = 3 AND b = 'k3'")
        cur.execute("DELETE FROM composite WHERE a = 7")
        cur.execute("UPDATE strkey SET id = 'A9999' WHERE id = 'a0001'")
        cur.execute("INSERT INTO strkey VALUES ('e0000', 1)")
        cur.execute("DELETE FROM nokey WHERE id = 5")
        cur.execute("INSERT INTO nokey VALUES (5, 'back')")
    pipeline.run()
    schemas = pipeline.schemas()
    assert {t.table for t in schemas} == {"composite", "strkey", "nokey"}
    check_all(pipeline)
    assert pipeline.mirror("strkey").num_rows == 601


def test_catch_up_read_by_several_stream_tasks_is_exact(pipeline: Pipeline, admin: Any,
                                                       mysql_server: Sandbox) -> None:
    """A backlog over two binlog files, cut into three pieces read by three tasks, lands once and
    in binlog order: keys changed in several pieces end with their last value."""
    create_table(admin, "t")
    create_table(admin, "u")
    pipeline.run()
    writers = [RandomWriter(mysql_server, pipeline.database, t, seed=i, pause_s=PACE_S) for i, t in enumerate("tu")]
    with writing(*writers):
        time.sleep(1.5)
        with admin.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        time.sleep(1.5)
    pipeline.source["stream_split_bytes"] = 4096
    pipeline.job["parallelism"] = 3
    catch_up = pipeline.run()
    assert [b.change_rows > 0 for b in catch_up] == [True], "one catch-up batch"
    check_all(pipeline)
    for table in "tu":
        changelog = pipeline.lake / pipeline.database / f"{table}_changelog"
        assert files_of_last_batch(changelog) == 3, f"{table}: the catch-up commit holds one file per stream task"


def purge_before(admin: Any, newest: str, timeout: float = 15.0) -> None:
    """PURGE BINARY LOGS, retried while the server still closes a finished reader's dump thread."""
    deadline = time.monotonic() + timeout
    with admin.cursor() as cur:
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()]
            if files == [newest]:
                return
            assert time.monotonic() < deadline, f"binlogs {files} still in use after {timeout}s"
            time.sleep(0.5)


def test_purged_binlog_stops_with_a_clear_error_and_writes_nothing(
    pipeline: Pipeline, admin: Any, mysql_server: Sandbox,
) -> None:
    create_table(admin, rows=200)
    pipeline.run()
    before = pipeline.mirror("t").num_rows
    with admin.cursor() as cur:
        cur.execute("DELETE FROM t WHERE id < 100")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        newest = cur.fetchone()[0]
    purge_before(admin, newest)
    with pytest.raises(JobFailed, match=r"binlog position .* is gone from .* take a new snapshot"):
        pipeline.run()
    assert pipeline.mirror("t").num_rows == before


def test_table_added_to_a_running_checkpoint_is_snapshotted_then_streamed(
    pipeline: Pipeline, admin: Any, mysql_server: Sandbox,
) -> None:
    create_table(admin, "first", rows=300)
    pipeline.run()
    create_table(admin, "second", rows=300)
    with admin.cursor() as cur:
        cur.execute("UPDATE first SET v = 'later' WHERE id < 20")
    pipeline.run()
    with admin.cursor() as cur:
        cur.execute("UPDATE second SET v = 'streamed' WHERE id < 20")
    pipeline.run()
    check_all(pipeline)
    assert TableId(pipeline.database, "second") in pipeline.schemas()


# The random SIGKILLs run one job that fans out to a lake per Delta mirror kind (delta-rs with
# deletion vectors, delta-spark, delta-rs copy-on-write), each checked on its own: the same kills
# reach each sink's steps, and between one sink's commit and the next one's. One job costs less
# CPU than three (CI time: every driver start and every delta-spark MERGE under C1).
_KINDS = {_RS: {"engine": "delta-rs", "deletion_vectors": "auto"},
          _SPARK: {"engine": "delta-spark", "deletion_vectors": "auto", "register_tables": True},
          _COW: {"engine": "delta-rs", "deletion_vectors": False}}


@pytest.mark.slow
def test_delta_mirrors_of_each_kind_fanned_out_to_are_each_exact_across_driver_sigkills(
        pipeline: Pipeline, admin: Any, mysql_server: Sandbox) -> None:
    """SIGKILL the driver process several times while writers run, then catch up and check each lake."""
    create_table(admin, rows=2000)
    lakes = {kind: pipeline.workdir / f"lake-{kind}" for kind in _KINDS}
    pipeline.sinks = [{"type": "delta", "path": str(lakes[kind]), "async_mirror": True, "register_tables": False,
                       "maintenance": pipeline.maintenance, **settings} for kind, settings in _KINDS.items()]
    pipeline.started_at = None
    spec = json.dumps(pipeline.raw_config())
    with contextlib.closing(mysql_server.admin.connect()) as conn:
        pipeline.started_at = current_offset(conn)
    rng = random.Random(7)
    kills = 0
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=5, pause_s=PACE_S)
    with writing(writer):
        for attempt in range(3):  # land anywhere in a batch: planning, tasks, one lake's commit or the next's
            kill_a_driver_at_random(spec, rng, pipeline.workdir / f"driver-{attempt}.err")
            kills += 1
    pipeline.run()  # restart from the checkpoint and catch up
    assert kills == 3
    for kind, settings in _KINDS.items():
        pipeline.lake, pipeline.engine = lakes[kind], settings["engine"]
        pipeline.deletion_vectors = settings["deletion_vectors"]
        check_all(pipeline)
        assert_maintained(pipeline, "t")
        assert_deletion_vectors_used(pipeline, "t")


def kill_a_driver_at_random(spec: str, rng: random.Random, errors: Path, batches: tuple[int, int] = (1, 4),
                            within_s: float = 1.5) -> None:
    """Start a driver process of the job ``spec`` (tests/driver_process.py), wait until it has
    committed a random number of batches (``batches``: the inclusive range), let it run on for up to
    ``within_s``, then SIGKILL it with its JVM and Python workers at once. Its stderr goes to
    ``errors``; a driver that makes no progress fails the test with that file's tail."""
    with open(errors, "w") as err:
        driver = subprocess.Popen([sys.executable, str(Path(__file__).parent / "driver_process.py"), spec],
                                  stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    try:
        wait_for_batches(driver, rng.randint(*batches))
    except AssertionError:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        raise AssertionError(f"{errors.name}: {errors.read_text()[-3000:]}") from None
    time.sleep(rng.uniform(0, within_s))
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)


def wait_for_batches(driver: subprocess.Popen[str], n: int, timeout: float = 300.0) -> None:
    """Read the driver's output until ``n`` batch lines (a fresh driver starts slowly on busy cores)."""
    deadline = time.monotonic() + timeout
    seen = 0
    assert driver.stdout is not None
    while seen < n:
        assert time.monotonic() < deadline, "driver made no progress"
        line = driver.stdout.readline()
        assert line, f"driver exited early with {driver.poll()}"
        seen += line.startswith("batch ")


@pytest.mark.slow
def test_fan_out_to_two_sinks_is_exact_in_each_across_a_crash_between_their_commits(
    pipeline: Pipeline, admin: Any, mysql_server: Sandbox,
) -> None:
    """``sink:`` as a list: each sink gets every change exactly once, also when the driver dies
    after the first sink committed a batch and before the second did (the replay completes the
    second and changes nothing in the first)."""
    create_table(admin)
    lakes = [pipeline.workdir / "lake-a", pipeline.workdir / "lake-b"]
    pipeline.sinks = [{"type": "delta", "path": str(lake), "engine": pipeline.engine, "catalog_prefix": prefix}
                      for lake, prefix in zip(lakes, ["a_", "b_"], strict=True)]
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=23, pause_s=PACE_S)
    pipeline.arm("between_sinks", after=2)
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match="injected fault at between_sinks"):
            pipeline.run()
        restarted = pipeline.run()
    pipeline.run()
    assert [len(b.committed) for b in restarted] == [2] * len(restarted)
    replayed = restarted[0]
    first, second = replayed.committed
    assert not any(c.snapshot or c.changes for c in first), "the first sink already held the batch"
    assert any(c.snapshot or c.changes for c in second), "the second sink got it on replay"
    for lake in lakes:
        pipeline.lake = lake
        check_all(pipeline)


# ------------------------------------------------- the same guarantees into the stream stores

STORES = pytest.mark.parametrize("store", STREAM_STORES, indirect=True)
# Pravega runs the strongest of these cases only (CI time: each Pravega read-back waits out the
# reader's idle slice, and its sink's protocol has no per-table or per-task step the others would
# reach): the random SIGKILLs, the crash between its transactions' commit and its `committed`
# record (below), and PostgreSQL's crash after its commit and SIGKILLs (tests/test_kafka_postgres.py). Left
# out: the fan-out (Delta's commit then a crash before the stream store's: for the Pravega sink
# that is a batch never begun, which the SIGKILLs and the contract's crashes reach) and Kafka's
# snapshot-under-writers case (every Pravega case snapshots under a writer).
NOT_PRAVEGA = [s for s in STREAM_STORES if s != "pravega"]


@pytest.fixture
def store(request: pytest.FixtureRequest) -> StreamStore:
    """The stream store a test is parametrized with (``kafka``, ``pulsar``, ``pravega``), on the
    session's broker."""
    return stream_store(request)


@pytest.fixture
def stream_pipeline(spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> Iterator[Pipeline]:
    """A pipeline whose sinks the test sets (a stream store, or Delta with the job's default
    engine and a stream store): one run, not one per Delta engine."""
    p = Pipeline(spark, mysql_server, database, tmp_path)
    yield p
    p.cleanup()


# Kafka only: Pulsar's crash cases below snapshot the same table under the same writer
@pytest.mark.parametrize("store", ["kafka"], indirect=True)
def test_stream_store_snapshot_with_concurrent_writers_is_exact(store: StreamStore, stream_pipeline: Pipeline,
                                                                admin: Any, mysql_server: Sandbox) -> None:
    prefix = f"eo{stream_pipeline.database}"
    stream_pipeline.sinks = [store.sink(stream_pipeline.workdir, prefix)]
    create_table(admin)
    writer = RandomWriter(mysql_server, stream_pipeline.database, "t", seed=11, pause_s=PACE_S)
    with writing(writer):
        first = stream_pipeline.run()
    second = stream_pipeline.run()
    assert writer.statements > 50 and len(first) >= 4 and second
    store.assert_exact(stream_pipeline, prefix)
    staged = [p for p in (stream_pipeline.workdir / f"{store.kind}-staging").rglob("*") if p.is_file()]
    assert not staged, f"staged messages of committed batches were left behind: {staged[:3]}"


@pytest.mark.parametrize(("store", "point", "after"), [
    # A staging task or the plan dying is decided before any sink (test_crash_and_restart_is_exact);
    # an emit task dies after the stream store's writer staged some messages.
    ("kafka", "emit", 1),               # an emit task dies
    ("kafka", "stream", 0),             # the binlog phase dies
    ("kafka", "sink_commit", 2),        # inside the Kafka transaction: produced, not committed
    ("kafka", "after_sink_commit", 1),  # Kafka committed, Spark's commit log not written
    # Pulsar: the cases its sink decides (the replay adds exactly what the brokers lack: deduplication
    # by producer name and sequence id)
    ("pulsar", "sink_commit", 0),        # part of the batch sent (its first table's messages), no marker
    ("pulsar", "after_sink_commit", 1),  # Pulsar has the batch and its marker, Spark's commit log not written
    # Pravega: its stream's transaction committed, the control stream's `committed` record not
    # written (the restart finds `prepared` and a closed transaction: it records the batch, the
    # replay writes nothing); after that record, Spark's commit log not: tests/test_kafka_postgres.py
    pytest.param("pravega", "sink_commit", 1, marks=pytest.mark.slow),  # ~50 s: each read-back waits out the reader
], indirect=["store"])
def test_stream_store_crash_and_restart_is_exact(store: StreamStore, point: str, after: int,
                                                 stream_pipeline: Pipeline, admin: Any,
                                                 mysql_server: Sandbox) -> None:
    prefix = f"eo{stream_pipeline.database}"
    stream_pipeline.sinks = [store.sink(stream_pipeline.workdir, prefix)]
    crash_and_restart(stream_pipeline, point, after, admin, mysql_server)
    store.assert_exact(stream_pipeline, prefix)


def crash_and_restart(p: Pipeline, point: str, after: int, admin: Any, mysql_server: Sandbox) -> None:
    """Snapshot a table under a random writer, crash at ``point`` (after ``after`` passes), run
    again until done; a crash after the sink's commit replays its batch without writing."""
    create_table(admin)
    writer = RandomWriter(mysql_server, p.database, "t", seed=hash(point) % 1000, pause_s=PACE_S)
    p.arm(point, after=after)
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
            p.run()
        restarted = p.run()
    p.run()
    if point == "after_sink_commit":
        replayed = restarted[0]  # Spark replays the batch whose commit log it never wrote
        assert replayed.snapshot_rows + replayed.change_rows > 0, "the replayed batch had rows"
        assert not replayed.wrote, f"the replay wrote again: {replayed}"


@pytest.mark.parametrize("store", NOT_PRAVEGA, indirect=True)
def test_fan_out_to_delta_and_a_stream_store_is_exact_in_each_across_a_crash_between_their_commits(
    store: StreamStore, stream_pipeline: Pipeline, admin: Any, mysql_server: Sandbox,
) -> None:
    """Delta commits a batch, the driver dies before the stream store does: the replay completes
    the stream store's share and changes nothing in Delta."""
    prefix = f"eo{stream_pipeline.database}"
    create_table(admin)
    # delta-rs: this test is about a stream store next to Delta; the Delta engines have their own fan-out test
    stream_pipeline.sinks = [{"type": "delta", "path": str(stream_pipeline.lake), "engine": "delta-rs"},
                             store.sink(stream_pipeline.workdir, prefix)]
    writer = RandomWriter(mysql_server, stream_pipeline.database, "t", seed=29, pause_s=PACE_S)
    stream_pipeline.arm("between_sinks", after=2)
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match="injected fault at between_sinks"):
            stream_pipeline.run()
        restarted = stream_pipeline.run()
    stream_pipeline.run()
    first, second = restarted[0].committed
    assert not any(c.snapshot or c.changes for c in first), "Delta already held the batch"
    assert any(c.snapshot or c.changes for c in second), f"{store.kind} got it on replay"
    check_all(stream_pipeline)
    store.assert_exact(stream_pipeline, prefix)


@pytest.mark.slow
def test_stream_stores_fanned_out_to_are_each_exact_across_driver_sigkills(
        stream_pipeline: Pipeline, admin: Any, mysql_server: Sandbox, request: pytest.FixtureRequest) -> None:
    """One job fans out to Kafka, Pulsar and Pravega (``sink:`` as a list). SIGKILL its driver
    several times while writers run, wherever it is: planning, tasks, a Kafka transaction open, a
    Pulsar batch partly sent, a Pravega batch prepared and not all committed, one store's batch
    committed and the next one's not. Each restart fences the dead producers (or finishes the
    recorded batch) in each store, and each change lands once in each. One job for the three
    stores: each kill costs one driver start, not three (CI time)."""
    stores = every_stream_store(request)
    prefix = f"eo{stream_pipeline.database}"
    stream_pipeline.sinks = [store.sink(stream_pipeline.workdir, prefix) for store in stores]
    create_table(admin, rows=2000)
    spec = json.dumps(stream_pipeline.raw_config())
    with contextlib.closing(mysql_server.admin.connect()) as conn:
        stream_pipeline.started_at = current_offset(conn)
    rng = random.Random(13)
    writer = RandomWriter(mysql_server, stream_pipeline.database, "t", seed=8, pause_s=PACE_S)
    with writing(writer):
        for attempt in range(3):  # land anywhere in a batch, a store's commit included
            kill_a_driver_at_random(spec, rng, stream_pipeline.workdir / f"driver-{attempt}.err")
    stream_pipeline.run()
    for store in stores:
        store.assert_exact(stream_pipeline, prefix)


class KillServerAt:
    """Hooks that SIGKILL a server's process groups at a pass through ``sink_commit`` once ``armed``
    (a file) appears: the pass that finds the file holding 1 (each pass before counts it down), and
    do nothing elsewhere (picklable: executors get them)."""

    def __init__(self, pgids: list[int], armed: Path) -> None:
        self.pgids, self.armed = pgids, str(armed)

    def reached(self, point: str) -> None:
        if point != "sink_commit" or not os.path.exists(self.armed):
            return
        left = int(Path(self.armed).read_text())
        if left > 1:
            Path(self.armed).write_text(str(left - 1))
            return
        os.unlink(self.armed)
        for pgid in self.pgids:
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_pravega_killed_after_a_commit_stops_the_job_and_restarted_with_its_data_the_batch_lands_once(
        stream_pipeline: Pipeline, admin: Any, tmp_path: Path) -> None:
    """A Pravega of its own that keeps its data (cdc/app/sandbox/pravega_durable.py: ZooKeeper, a
    bookie, the controller and the segment store; the session's standalone server stays up), all
    SIGKILLed once the sink asked Pravega to commit the first batch with rows and before it recorded
    that: the job stops within ``operation_timeout_s`` x (``commit_retries`` + 1) with an error
    naming the controller, and Spark's commit log does not pass the batch. Restarted on its
    folders, the server still has the control stream's ``prepared`` record and the transaction
    (committing or committed): the restarted job takes the batch as committed and writes nothing
    for it, and what follows lands once. A reader group sees each change once, in key order."""
    pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for CPython 3.10 and 3.11 only")
    from pipeline import pravega_entry

    from cdc.app.sandbox.pravega_durable import start_durable_pravega_sandbox

    server = start_durable_pravega_sandbox(base_dir=str(tmp_path))
    try:
        p, prefix = stream_pipeline, f"gone{stream_pipeline.database}"
        p.sinks = [{**pravega_entry(p.workdir, server.controller_uri, prefix), "operation_timeout_s": 5,
                    "commit_retries": 1, "retry_backoff_s": 0.1}]
        create_table(admin, rows=300)  # batch 0 stages the 3 chunks, batch 1 emits them
        armed = tmp_path / "kill-armed"
        p.faults = KillServerAt(server.pgids(), armed)  # type: ignore[assignment]
        armed.write_text("2")  # the 1st pass: the transaction written; the 2nd: its commit asked for
        with pytest.raises(JobFailed, match=rf"could not commit batch 1 to Pravega at "
                                            rf"controller_uri={re.escape(server.controller_uri)} in 2 attempts"):
            p.run()
        assert not armed.exists(), "the server was killed mid-batch"
        commits = p.checkpoint / "commits"
        assert not (commits / "1").exists() and (p.checkpoint / "offsets" / "1").exists()
        server.kill()  # reaps the killed processes
        server.start()  # same ports and folders: the data is back
        with admin.cursor() as cur:
            cur.execute("UPDATE t SET v = 'after', n = n + 1 WHERE id < 40")
            cur.execute("DELETE FROM t WHERE id BETWEEN 100 AND 110")
        replayed = p.run()
        restarted_pravega(server).assert_exact(p, prefix)
        assert replayed[0].batch_id == 1 and replayed[0].snapshot_rows > 0, replayed[0]
        assert not replayed[0].wrote, f"the replay wrote again: {replayed[0]}"
        assert any(b.wrote for b in replayed[1:]), "the changes after the restart were written"
    finally:
        server.stop()
