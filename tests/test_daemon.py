"""The executors' Python daemon (``cdc.spark.daemon``): workers forked from it have the tasks'
modules already, and they work after the fork."""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import Any

from cdc.spark.daemon import preload

# imported by a task of the job, by none of PySpark's own worker modules
TASK_MODULES = ("pandas", "cdc.spark.tasks", "binlog.mysql.dialect", "binlog.postgres.dialect",
                "sinks.delta.files", "sinks.kafka.sink")


def _worker_state(_: Any) -> Any:
    import os
    import sys

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().split(b"\0")
    kernels = sys.modules.get("binlog.mysql.rows_kernels")  # loaded by the MySQL dialect's prepare_worker
    ready = kernels is not None and all(set(signatures) <= set(kernel.signatures)
                                        for kernel, signatures in kernels.ENTRY_SIGNATURES.items())
    return [b.decode() for b in parent], [m for m in TASK_MODULES if m in sys.modules], ready


def test_a_sessions_workers_are_forked_from_the_preloading_daemon(spark: Any) -> None:
    (parent, loaded, _), = spark.sparkContext.parallelize([0], 1).map(_worker_state).collect()
    assert "cdc.spark.daemon" in parent, parent
    assert loaded == list(TASK_MODULES)


def test_a_module_that_does_not_import_is_left_to_the_worker() -> None:
    assert preload(("json", "no_such_module_here")) == ["no_such_module_here"]


FORKS = """
import os, shutil, sys, tempfile
from cdc.spark.daemon import preload
assert preload() == [], preload()
import numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
children = []
for i in range(6):
    pid = os.fork()
    if pid == 0:  # what a worker does: Arrow's thread pools, Parquet, delta-rs's runtime, NumPy
        try:
            d = tempfile.mkdtemp()
            t = pa.table({"k": np.arange(200_000) * (i + 1), "v": pa.array(np.random.rand(200_000))})
            pq.write_table(t, f"{d}/a.parquet")
            back = pq.read_table(f"{d}/a.parquet", use_threads=True)
            assert pc.sum(back["k"]).as_py() == sum(range(200_000)) * (i + 1)
            write_deltalake(f"{d}/t", back)
            assert DeltaTable(f"{d}/t").to_pyarrow_table().num_rows == 200_000
            assert float(np.dot(back["v"].to_numpy(), back["v"].to_numpy())) > 0
            from binlog.mysql import rows_kernels as k  # loaded by the daemon, and one new overload
            raw = bytes(range(64))
            starts = np.arange(i, 32, 4, dtype=np.int64)
            want = [int.from_bytes(raw[s:s + 4], "little") for s in starts]
            assert k.int_le(np.frombuffer(raw, np.uint8), starts, 4, False).tolist() == want
            assert k.int_le(np.frombuffer(bytearray(raw), np.uint8), starts, 4, False).tolist() == want
            shutil.rmtree(d)
            os._exit(0)
        except BaseException as e:
            print(repr(e), file=sys.stderr)
            os._exit(1)
    children.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in children])
"""


def test_workers_forked_after_the_preload_use_arrow_delta_and_numpy() -> None:
    """The preloaded libraries' threads (jemalloc's purgers, OpenBLAS's pool) and the loaded
    numba kernels survive a fork: six forked children each run threaded Arrow, a delta-rs write,
    NumPy and a kernel (one overload of it new to the child), and exit cleanly (a deadlock
    would time out)."""
    out = subprocess.run([sys.executable, "-c", FORKS], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == str([0] * 6), out.stdout + out.stderr[-3000:]


JOB_SESSION = """
from cdc.spark.session import local_session
from tests.test_daemon import _worker_state
spark = local_session("t", parallelism=1, preload=("binlog.mysql.dialect", "sinks.delta.sink"))
(parent, loaded, ready), = spark.sparkContext.parallelize([0], 1).map(_worker_state).collect()
print("cdc.spark.zygote" in parent, loaded, ready)  # the daemon forked by the job's zygote
"""


def test_a_jobs_session_preloads_only_its_own_dialect_and_sinks() -> None:
    """A MySQL job into Delta (``preload`` of its session: :func:`cdc.app.runner.job_modules`):
    its workers, forked from the daemon that its zygote forked, have the MySQL dialect, with its rows kernels loaded, and the Delta sink, and
    neither Postgres's nor Kafka's."""
    out = subprocess.run([sys.executable, "-c", JOB_SESSION], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = [m for m in TASK_MODULES if m not in ("binlog.postgres.dialect", "sinks.kafka.sink")]
    assert out.stdout.splitlines()[-1] == f"True {expected} True", out.stdout + out.stderr[-3000:]


WARM_SESSION = """
import os, time
import pyarrow as pa
from cdc.spark.session import local_session

def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

def line_of(pid):
    line = []
    while pid > 1:
        pid = parent_of(pid)
        line.append(pid)
    return line

def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]

def daemons():  # this session's: forked by its zygote (cdc.spark.zygote), a child of this process
    found = []
    for pid in children(os.getpid()):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"cdc.spark.zygote" in f.read().split(b"\\0"):
                found += children(pid)
    return sorted(found)

def ancestors(batches):
    for b in batches:
        yield pa.RecordBatch.from_pydict({"pids": [line_of(os.getpid())] * b.num_rows})

spark = local_session("t", parallelism=1, preload=("binlog.mysql.dialect",))
deadline = time.monotonic() + 120
while not daemons() and time.monotonic() < deadline:
    time.sleep(0.05)
started = daemons()
line = spark.range(0, 1, 1, 1).mapInArrow(ancestors, "pids array<long>").collect()[0].pids
print(started, [p for p in line if p in started], daemons())
"""


def test_a_jobs_session_starts_the_daemon_that_its_sql_tasks_use_before_any_task() -> None:
    """The daemon starts with a job's session, not at the query's first batch: the source's
    tasks (SQL ones, like this test's) get their workers from it."""
    out = subprocess.run([sys.executable, "-c", WARM_SESSION], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    started, forked_from, after = (ast.literal_eval(f"[{s.strip('[]')}]")
                                   for s in out.stdout.splitlines()[-1].split("] ["))
    assert started, f"no daemon before the first task: {out.stdout}"
    assert forked_from == started == after, f"the task's worker came from another daemon: {out.stdout}"
