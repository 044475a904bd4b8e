"""A process that has the Python processes of a job's session imported before Spark starts them.

Spark creates every Python process of the driver's JVM under one JVM-wide lock
(``SparkEnv.createPythonWorker`` is synchronized), and holds it while a daemon starts, until the
daemon has forked its first worker: through :mod:`cdc.spark.daemon`'s preload (0.76 s of an
interpreter start and imports for a Postgres job here, 1.19 s for MySQL's, whose numba kernels load
there). A stream's planner processes (``plan_data_source_read`` among them) waited behind it at the
query's start, and each of them, and the streaming source's runner, started an interpreter and
imported PySpark (and the runner the job's dialect) on the query's critical path
(``benchmarks/process_timeline.py``).

So a job's local session starts this zygote first (:func:`start`), in parallel with the JVM's own
start: an interpreter that imports what those processes import (the daemon's preload and
:data:`PLANNERS`), then waits on a Unix socket. The session gives Spark a script as its Python
(``sc.pythonExec``: :data:`WRAPPER`). When Spark runs it as ``python -m <module> ...`` (the
workers' daemon, a planner's ``pyspark.daemon``, the streaming source's runner), the script hands
the zygote its standard streams (``SCM_RIGHTS``), its arguments and its environment
(:func:`cdc.spark.daemon.hand_over`); the zygote forks, and the child takes them over and runs the
module as the launched interpreter would have. Spark's lock is then held for a small interpreter
start and a fork.

The launched process stays until the process it handed over to exits, and passes on the SIGTERM
with which Spark stops a daemon, so to Spark it is that process. A daemon reads its end of Spark's
stdin pipe, and exits when the JVM closes it, as PySpark's does. Whatever goes wrong on the way (no
zygote, another interpreter, another hash seed, anything but ``-m``) makes the launched process run
the real interpreter instead (:func:`cdc.spark.daemon.launch`; the workers' daemon then preloads
itself, :func:`cdc.spark.daemon.main`), so the zygote only ever saves time. A fork names itself
after its module (``comm``, as ``ps`` shows it: ``plan_data_sourc``, ``python_streamin``).

The zygote ends when the driver's Python process does (its stdin is a pipe from the driver), or
when :func:`stop` is called; the processes it forked live on until Spark stops them. It holds about
100 MiB of RSS of its own while the job runs (most of it pages its forks share).

Measured on 2026-11-29 (2 cores, alternating runs): forking only the workers' daemon, a 300k-update
catch-up took 3.95-4.24 s instead of 4.03-5.08 s (MySQL, ``benchmarks/tpcds_customer.py --scale 100
--burst 300000 --catch-up-only``) and 4.68-4.96 s instead of 4.84-5.32 s (Postgres,
``benchmarks/postgres_bench.py --scale 100 --catch-up-variants ""``); forking the planners and the
runner too, 2.77-3.14 s instead of 3.60-3.95 s (MySQL, six runs each) and
3.00-3.41 s instead of 3.79-4.28 s (Postgres, four each).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cdc.spark.daemon import MODULES_ENV, PRELOAD, preload, read_exactly

# What a daemon forked by the zygote inherits from it rather than from Spark's launch, so it must
# be the same in both: the interpreter, and the hash seed PySpark gives its workers.
HASH_SEED = "PYTHONHASHSEED"

_MAX_REQUEST = 1 << 20

FOLDER_PREFIX = "spark-cdc-zygote-"  # a zygote's folder: its socket and its script (WRAPPER)

# What Spark's planner processes of a job's query import, besides the daemon's preload: PySpark's
# daemon and planner modules, the streaming source's runner, and the stream reader it builds
# (cdc.spark.packed builds cdc.spark.source's CdcStreamReader there).
PLANNERS: tuple[str, ...] = (
    "pyspark.daemon",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "cdc.spark.source",
)

# The session's Python for Spark: for `-m`, an interpreter start, then a hand-over to the zygote
# (cdc.spark.daemon.launch); anything else (Spark's `python -c` version check) runs the interpreter
# at once. A shell script, so that any interpreter path works (a #! line cannot quote one with a
# blank, and older kernels cut it at 127 bytes); the shell costs about 1 ms.
WRAPPER = """#!/bin/sh
[ "$1" = -m ] || exec {python} "$@"
exec {python} -c {code} "$@"
"""


def script(path: str | Path, python: str = sys.executable) -> str:
    """The text of the session's Python (:data:`WRAPPER`) for the zygote at ``path``."""
    code = f"from cdc.spark.daemon import launch; launch({str(path)!r}, {python!r})"
    return WRAPPER.format(python=shlex.quote(python), code=shlex.quote(code))


class Zygote:
    """A running zygote, started by :func:`start` (driver)."""

    def __init__(self, process: subprocess.Popen[bytes], path: Path, modules: tuple[str, ...]) -> None:
        self.process, self.path, self.modules = process, path, modules
        self.python = path.parent / "python"  # the script for sc.pythonExec (WRAPPER)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """End the zygote (closing its stdin), and remove its folder."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _remove(self.path)


_current: Zygote | None = None


def start(modules: Sequence[str]) -> Zygote:
    """The zygote of a job whose daemon preloads ``modules``, started now unless one for the same
    modules is still running (driver, before its JVM starts); the one before is stopped.

    Its script :attr:`Zygote.python`, set as the session's Python (``sc.pythonExec``), has every
    Python process of the session's JVM forked by the zygote, the workers' daemon among them.
    """
    global _current
    wanted = tuple(modules)
    if _current is not None and _current.modules == wanted and _current.alive():
        return _current
    stop()
    path = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX)) / "zygote.sock"
    env = {**os.environ, MODULES_ENV: ",".join(wanted), HASH_SEED: os.environ.get(HASH_SEED, "0")}
    process = subprocess.Popen([sys.executable, "-m", "cdc.spark.zygote", str(path)], stdin=subprocess.PIPE,
                               env=env, start_new_session=True)  # Ctrl-C goes to the driver, which ends it
    _current = Zygote(process, path, wanted)
    _current.python.write_text(script(path))
    _current.python.chmod(0o755)
    return _current


@atexit.register
def stop() -> None:
    """Stop the running zygote, if any (driver)."""
    global _current
    if _current is not None:
        _current.stop()
        _current = None


def _refusal(request: dict[str, Any]) -> str | None:
    """Why a daemon launched with ``request`` cannot be forked from this process, if it cannot."""
    if request.get("executable") != os.path.realpath(sys.executable):
        return f"another interpreter ({request.get('executable')})"
    env = request.get("env")
    if not isinstance(env, dict) or env.get(HASH_SEED) != os.environ.get(HASH_SEED):
        return "another hash seed"
    return None


def _become(conn: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
    """In the forked child: take the launched process's streams, arguments and environment, and
    run its module as ``python -m`` would (PySpark's daemon loop for :mod:`cdc.spark.daemon`,
    whose preload is done); never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(str(request["cwd"]))
        sys.argv[:] = request["argv"]  # the worker module, if any
        sys.path[:] = request["path"]
        os.environ.clear()
        os.environ.update(request["env"])
        if os.environ.get("PYTHONUNBUFFERED"):  # as Spark starts its Python processes: -u
            sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True,
                                                       errors="backslashreplace") for fd in (1, 2))
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        conn.sendall(b"ok" + struct.pack(">i", os.getpid()))
        conn.close()
        module = request["module"]
        if module == "cdc.spark.daemon":
            from pyspark.daemon import manager

            manager()
        else:
            _name(module, sys.argv[1:])
            with warnings.catch_warnings():  # that the module was imported (preloaded) before it runs
                warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def comm(module: str) -> str:
    """The name (``comm``, as ``ps`` shows it) of a fork that runs ``module``: its last part, as
    the kernel keeps it (15 characters); ``benchmarks/`` tell the forks apart by it."""
    return module.rsplit(".", 1)[-1][:15]


def _name(module: str, args: list[str]) -> None:
    """Name the process after what it runs (:func:`comm` of the module, or of the worker module
    PySpark's daemon is given)."""
    what = args[0] if module == "pyspark.daemon" and args else module
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(comm(what))


def serve(path: str) -> None:
    """The zygote: bind ``path``, import what the session's Python processes import, then fork a
    process for each launched one that hands over, until stdin closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the forked daemons are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.new")  # first: a daemon launched during the preload waits for it
    listener.listen(64)
    os.rename(f"{path}.new", path)  # the path exists only once it accepts
    preload(modules=PRELOAD + PLANNERS, job=os.environ.get(MODULES_ENV))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        while True:
            ready = select.select([0, listener.fileno()], [], [])[0]
            if 0 in ready and not os.read(0, 4096):
                return  # the driver has gone
            if listener.fileno() in ready:
                conn, _ = listener.accept()
                with conn:
                    try:
                        _fork(conn, listener)
                    except Exception as e:  # that launched process runs the real interpreter instead
                        print(f"spark-cdc zygote: nothing forked: {e!r}", file=sys.stderr, flush=True)
    finally:
        listener.close()
        _remove(Path(path))


def _remove(path: Path) -> None:
    """Remove the socket at ``path`` and, in a folder that :func:`start` made, the folder and its
    script: a driver killed with SIGKILL leaves nothing behind."""
    leftovers = [path]
    if path.parent.name.startswith(FOLDER_PREFIX):
        leftovers += [path.parent / "python", path.parent]
    for leftover in leftovers:
        with contextlib.suppress(OSError):
            leftover.rmdir() if leftover.is_dir() else leftover.unlink()


def _fork(conn: socket.socket, listener: socket.socket) -> None:
    """Fork the process a launched one hands over on ``conn``, unless :func:`_refusal` says no."""
    header, fds, _, _ = socket.recv_fds(conn, 4, 3)
    try:
        if len(header) != 4 or len(fds) != 3:
            conn.sendall(b"no")
            return
        (size,) = struct.unpack(">I", header)
        request = json.loads(read_exactly(conn, min(size, _MAX_REQUEST)))
        refusal = _refusal(request)
        if refusal is not None:
            conn.sendall(b"no" + refusal.encode())
            return
        if os.fork() == 0:
            listener.close()
            _become(conn, fds, request)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1])
    # Nothing is left to do: skip the interpreter's teardown of what the preload imported (pandas,
    # pyarrow, the dialect's kernels), which the driver's exit waited for (0.57 s of a 2-change
    # catch-up's run, py-spy, 2026-12-07).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
