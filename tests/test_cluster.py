"""The job on a real Spark standalone cluster (a master and two workers on loopback), submitted as
a user submits it: ``spark-submit --master spark://... cdc_job.py --config job.yaml``.

Proven here, with a random writer running throughout:

* the snapshot and the stream are exact when the tasks run in executors of other processes;
* a worker SIGKILLed mid-snapshot (its JVM, its executor and their Python workers: a lost node)
  and another SIGKILLed in the binlog phase: Spark reschedules the tasks, exactly-once holds;
* the driver SIGKILLed mid-run, then the job resubmitted: it resumes from the checkpoint.

Checkpoint, state and lake are local paths here, which every process of this one-machine cluster
sees; on a real cluster they must be on shared storage (README, "Run on a cluster").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pipeline import (
    Pipeline,
    RandomWriter,
    assert_changelog_exact,
    assert_mirror_equals_source,
    writing,
)
from spark_cluster import SparkCluster, Worker

from binlog.mysql.reader import current_offset
from cdc.app.sandbox.mysql import Sandbox

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    c = SparkCluster(workers=2).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def pipeline(spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(spark, mysql_server, database, tmp_path)
    yield p
    p.cleanup()


def job_file(p: Pipeline) -> Path:
    raw = {**p.raw_config(), "trigger_interval": "300ms"}
    path = p.workdir / "job.yaml"
    path.write_text(json.dumps(raw))  # JSON is YAML
    return path


def commits(p: Pipeline) -> int:
    folder = p.checkpoint / "commits"
    return sum(1 for f in folder.iterdir() if f.name.isdigit()) if folder.is_dir() else 0


def streaming(p: Pipeline) -> bool:
    """True once the newest offset has every table in the binlog phase."""
    folder = p.checkpoint / "offsets"
    if not folder.is_dir():
        return False
    numbered = sorted((f for f in folder.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    if not numbered:
        return False
    offset = json.loads(numbered[-1].read_text().splitlines()[-1])
    return bool(offset["tables"]) and all(t["state"] == "stream" for t in offset["tables"].values())


def wait_until(ready: Any, what: str, driver: Any, log: Path, timeout: float = 300.0) -> None:
    started = time.monotonic()
    deadline = started + timeout
    while not ready():
        assert driver.poll() is None, f"the driver exited ({driver.returncode}) before {what}:\n{tail(log)}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f}s:\n{tail(log)}"
        time.sleep(0.2)
    print(f"{what}: after {time.monotonic() - started:.1f}s", flush=True)  # the progress, in the report


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""


def busy_worker(cluster: SparkCluster) -> Worker:
    """A live worker that runs an executor of the job."""
    live = [w for w in cluster.nodes if w.process.poll() is None]
    return next((w for w in live if w.executor_running()), live[0])


def job_process(group: int) -> int:
    """The pid of the Python driver that spark-submit's JVM started in process group ``group``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if os.getpgid(int(entry.name)) == group and any(a.endswith(b"cdc_job.py") for a in cmdline) \
                    and b"java" not in cmdline[0]:
                return int(entry.name)
    raise AssertionError("no Python driver process under spark-submit")


def check_all(p: Pipeline) -> None:
    for table_id, schema in p.schemas().items():
        assert_mirror_equals_source(p, table_id.table, schema)
        assert_changelog_exact(p, table_id.table, schema)


def test_submitted_job_survives_lost_workers_and_a_killed_driver(
    cluster: SparkCluster, pipeline: Pipeline, admin: Any, mysql_server: Sandbox
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i * 2}, 'v{i}', {i})" for i in range(1600)))
    with contextlib.closing(mysql_server.admin.connect()) as conn:
        pipeline.started_at = current_offset(conn)
    config, log = job_file(pipeline), pipeline.workdir / "driver.log"
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=31, pause_s=0.02)  # ~50 writes/s
    with writing(writer):
        # 1. a worker dies mid-snapshot: its tasks are rescheduled on the other worker
        driver = cluster.submit(config, log=log)
        wait_until(lambda: commits(pipeline) >= 2, "two committed batches", driver, log)
        assert not streaming(pipeline), "the snapshot should still be running (make the table larger)"
        busy_worker(cluster).kill()
        cluster.add_worker()
        # 2. a worker dies in the binlog phase
        wait_until(lambda: streaming(pipeline), "the binlog phase", driver, log)
        reached = commits(pipeline)
        busy_worker(cluster).kill()
        cluster.add_worker()
        wait_until(lambda: commits(pipeline) >= reached + 3, "batches after the lost worker", driver, log)
        # 3. the driver dies mid-run (its JVM and Python with it), then the job is resubmitted
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=60)
        driver = cluster.submit(config, log=log)
        reached = commits(pipeline)
        wait_until(lambda: commits(pipeline) >= reached + 2, "batches after the resubmit", driver, log)
        os.kill(job_process(driver.pid), signal.SIGTERM)  # a clean stop, as Ctrl-C does
        assert driver.wait(timeout=120) == 0, tail(log)
    assert writer.statements > 50
    final = cluster.submit(config, "--once", log=log)  # catch up with the last writes
    assert final.wait(timeout=300) == 0, tail(log)
    assert mysql_server.cdc.password not in log.read_text(errors="replace")
    check_all(pipeline)


def test_a_state_dir_the_executors_cannot_see_is_refused_before_anything_is_written(
    pipeline: Pipeline, admin: Any
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.execute("INSERT INTO t VALUES (1, 'a', 1)")
    blind = SparkCluster(workers=1, hide=pipeline.workdir).start()  # its node has its own /tmp there
    try:
        log = pipeline.workdir / "driver.log"
        driver = blind.submit(job_file(pipeline), "--once", log=log)
        assert driver.wait(timeout=300) == 2, tail(log)
    finally:
        blind.stop()
    text = log.read_text(errors="replace")
    assert f"error: state_dir {pipeline.state_dir} is not visible from the executors" in text, tail(log)
    assert "shared file system" in text
    assert not pipeline.lake.exists(), "nothing may be written"
    assert not (pipeline.checkpoint / "offsets").exists()
    assert [p.name for p in pipeline.state_dir.iterdir()] == [], "the probe is removed"
