"""Spark's Python daemon, with the modules of the project's tasks imported once, before it forks.

Spark starts one daemon per executor (``spark.python.daemon.module``) and forks a worker from it
for each Python task that finds no idle worker. PySpark's own daemon imports none of the task's
modules, so every worker imported pyarrow, pandas (pyarrow's first ``pa.array`` of a NumPy array
imports it), NumPy, the dialect and the sink writers itself: 1.0 to 2.0 s of CPU per worker on
this 2-core machine, most of a short stream batch (py-spy, ``benchmarks/py_spy_summary.py``). A worker forked from
this daemon has them already, in pages it shares with the daemon.

Forking after these imports is safe: the only threads they start are jemalloc's background purgers
(pyarrow's and delta-rs's allocators) and OpenBLAS's pool (NumPy), and each of those libraries
handles ``fork`` itself (its at-fork hooks stop or reset the threads). None of them starts a
thread pool of its own at import; pyarrow's and delta-rs's start on first use, which only a
worker does.

A job's local session names its own modules in :data:`MODULES_ENV` (its dialect's and its
sinks'), and the daemon preloads only those: a MySQL job into Delta does not pay for psycopg nor
for the Kafka client (the preload took 0.72-0.81 s instead of 0.93-0.94 s here). Without it, every registered dialect and
sink is preloaded.

A job module may define ``prepare_worker()``, which the daemon calls after the imports: the MySQL
dialect loads its numba kernels there (``binlog.mysql.dialect.prepare_worker``), which a worker
forked afterwards then calls at once instead of paying 0.7 CPU s for numba and its first kernels.

A job's local session starts this daemon as soon as the session is up, rather than at the query's
first task (:func:`cdc.spark.session.start_workers`), and has its preload done ahead by a zygote
process that it starts before its JVM (:mod:`cdc.spark.zygote`): the process Spark launches then
only hands over to the zygote (:func:`hand_over`), which forks the daemon: the session's Python for
Spark (:func:`launch`) does so for every ``python -m`` process Spark starts.

Runs on the executors only: ``python -m cdc.spark.daemon <worker module>``, as Spark launches it.
Only the task workers' daemon uses it; the daemons of PySpark's planners (``lookup_data_sources``,
``create_data_source``, ``plan_data_source_read``) stay ``pyspark.daemon``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import time

# What every task imports: Arrow, NumPy, pandas, PySpark's worker and the task code.
PRELOAD: tuple[str, ...] = (
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.ipc",
    "pyarrow.parquet",
    "pandas",
    "pyspark.worker",
    "cdc.spark.tasks",
)

# A job module's function that the daemon calls once, after the imports and before any fork.
PREPARE = "prepare_worker"

# The job's dialect and sink modules, comma-separated (``spark.executorEnv`` of the job's session:
# :func:`cdc.spark.session.local_session`); unset: every registered dialect and sink.
MODULES_ENV = "SPARK_CDC_PRELOAD"

def preload(modules: tuple[str, ...] = PRELOAD, job: str | None = None) -> list[str]:
    """Import ``modules``, then the job's modules (``job``, comma-separated) or, without them,
    every registered dialect and sink, and call the :data:`PREPARE` function of each that has
    one; returns what did not import or prepare.

    A module that does not import or prepare (an optional dependency missing) is left to the
    worker that needs it, which then raises the error a user can act on.
    """
    if job:
        extra = tuple(m for m in job.split(",") if m)
    else:
        from binlog.registry import DIALECT_NAMES, dialect_module
        from sinks.registry import SINK_NAMES, sink_module

        extra = (*(dialect_module(name) for name in DIALECT_NAMES),
                 *(sink_module(name) for name in SINK_NAMES))
    failed = []
    for name in (*modules, *extra):
        try:
            prepare = getattr(importlib.import_module(name), PREPARE, None)
            if prepare is not None:
                prepare()
        except Exception as e:
            logging.getLogger(__name__).debug("not preloaded: %s (%s)", name, e)
            failed.append(name)
    return failed


def hand_over(path: str, module: str, argv: list[str]) -> int | None:
    """Have the zygote at ``path`` fork a process that runs ``module`` as ``python -m`` would
    (with ``argv``), with this process's streams and environment, then
    stand for it until it exits: its exit status, or None when the zygote cannot (the caller then
    runs the module itself)."""
    request = json.dumps({"executable": os.path.realpath(sys.executable), "module": module,
                          "argv": argv, "env": dict(os.environ),
                          "path": sys.path, "cwd": os.getcwd()}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            socket.send_fds(conn, [struct.pack(">I", len(request)) + request], [0, 1, 2])
            reply = read_exactly(conn, 6)
    except OSError:
        return None
    if reply[:2] != b"ok":
        return None
    (pid,) = struct.unpack(">i", reply[2:])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: _signal(pid, number))
    _wait_gone(pid)
    return 0


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def _wait_gone(pid: int) -> None:
    """Until process ``pid`` (not a child of this one) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # a kernel before 5.3: poll (the zygote reaps its daemons, so none stays a zombie)
        while _alive(pid):
            time.sleep(0.2)
        return
    try:
        while True:
            try:
                if select.select([fd], [], [])[0]:
                    return
            except InterruptedError:
                continue
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_exactly(conn: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``conn``, or fewer if it closes first."""
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            break
        data += part
    return data


def launch(path: str, python: str) -> None:
    """The session's Python for Spark (:func:`cdc.spark.zygote.start` writes a script that calls
    this): ``-m <module> [args]`` is forked by the zygote at ``path``; any other use of it, or a
    zygote that cannot serve, runs the real interpreter ``python`` with the same arguments."""
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "-m":
        sys.path[0] = os.getcwd()  # as `python -m` has it, not this script's folder
        code = hand_over(path, args[1], [args[1], *args[2:]])
        if code is not None:
            sys.exit(code)
    os.execv(python, [python, *args])


def main() -> None:
    """The daemon without a zygote (a cluster's executors, or a zygote that could not serve)."""
    preload(job=os.environ.get(MODULES_ENV))
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
