"""A process that has the workers' daemon's preload done before Spark asks for the daemon.

Spark creates every Python process of the driver's JVM under one JVM-wide lock
(``PythonWorkerManager.createPythonWorker`` is synchronized), and holds it while a daemon starts,
until the daemon has forked its first worker: through :mod:`cdc.spark.daemon`'s preload (0.76 s of
an interpreter start and imports for a Postgres job here, 1.19 s for MySQL's, whose numba kernels
load there). A stream's planner processes (``plan_data_source_read`` among them) waited behind it
at the query's start (``benchmarks/process_timeline.py``).

So a job's local session starts this zygote first (:func:`start`), in parallel with the JVM's own
start: an interpreter that does the daemon's preload, then waits on a Unix socket. When Spark
launches ``python -m cdc.spark.daemon``, that process only hands the zygote its standard streams
(``SCM_RIGHTS``), its arguments and its environment (:func:`cdc.spark.daemon.hand_over`); the zygote forks, and the
child takes them over and runs PySpark's daemon loop as the launched process would have. Spark's
lock is then held for an interpreter start and a fork, not for the preload.

The launched process stays until the daemon it handed over to exits, and passes on the SIGTERM
with which Spark stops a daemon, so to Spark it is the daemon. The daemon itself reads its end of
Spark's stdin pipe, and exits when the JVM closes it, as PySpark's does. Whatever goes wrong on the
way (no zygote, another interpreter, another hash seed) makes the launched process do its own
preload instead (:func:`cdc.spark.daemon.main`), so the zygote only ever saves time.

The zygote ends when the driver's Python process does (its stdin is a pipe from the driver), or
when :func:`stop` is called; the daemons it forked live on until Spark stops them. It holds about
100 MiB of RSS of its own while the job runs (most of it pages the daemon shares).

Measured on 2026-11-29 (2 cores, alternating runs with and without it): a 300k-update catch-up
took 3.95-4.24 s instead of 4.03-5.08 s (MySQL, ``benchmarks/tpcds_customer.py --scale 100 --burst
300000 --catch-up-only``) and 4.68-4.96 s instead of 4.84-5.32 s (Postgres,
``benchmarks/postgres_bench.py --scale 100 --catch-up-variants ""``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cdc.spark.daemon import MODULES_ENV, preload, read_exactly

# What a daemon forked by the zygote inherits from it rather than from Spark's launch, so it must
# be the same in both: the interpreter, and the hash seed PySpark gives its workers.
HASH_SEED = "PYTHONHASHSEED"

_MAX_REQUEST = 1 << 20


class Zygote:
    """A running zygote, started by :func:`start` (driver)."""

    def __init__(self, process: subprocess.Popen[bytes], path: Path, modules: tuple[str, ...]) -> None:
        self.process, self.path, self.modules = process, path, modules

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """End the zygote (closing its stdin), and remove its socket's folder."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for leftover in (self.path, self.path.parent):
            with contextlib.suppress(OSError):
                leftover.rmdir() if leftover.is_dir() else leftover.unlink()


_current: Zygote | None = None


def start(modules: Sequence[str]) -> Zygote:
    """The zygote of a job whose daemon preloads ``modules``, started now unless one for the same
    modules is still running (driver, before its JVM starts); the one before is stopped.

    Its socket's path goes into the daemon's environment as :data:`cdc.spark.daemon.ZYGOTE_ENV`.
    """
    global _current
    wanted = tuple(modules)
    if _current is not None and _current.modules == wanted and _current.alive():
        return _current
    stop()
    path = Path(tempfile.mkdtemp(prefix="spark-cdc-zygote-")) / "zygote.sock"
    env = {**os.environ, MODULES_ENV: ",".join(wanted), HASH_SEED: os.environ.get(HASH_SEED, "0")}
    process = subprocess.Popen([sys.executable, "-m", "cdc.spark.zygote", str(path)], stdin=subprocess.PIPE,
                               env=env, start_new_session=True)  # Ctrl-C goes to the driver, which ends it
    _current = Zygote(process, path, wanted)
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


def _become_daemon(conn: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
    """In the forked child: take the launched process's streams, arguments and environment, and
    run PySpark's daemon loop; never returns."""
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
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        conn.sendall(b"ok" + struct.pack(">i", os.getpid()))
        conn.close()
        from pyspark.daemon import manager

        manager()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        os._exit(code)


def serve(path: str) -> None:
    """The zygote: bind ``path``, preload as the daemon would, then fork a daemon for each
    launched process that hands over, until stdin closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the forked daemons are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.new")  # first: a daemon launched during the preload waits for it
    listener.listen(64)
    os.rename(f"{path}.new", path)  # the path exists only once it accepts
    preload(job=os.environ.get(MODULES_ENV))
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
                        _fork_daemon(conn, listener)
                    except Exception as e:  # that launched process preloads itself instead
                        print(f"spark-cdc zygote: no daemon forked: {e!r}", file=sys.stderr, flush=True)
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def _fork_daemon(conn: socket.socket, listener: socket.socket) -> None:
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
            _become_daemon(conn, fds, request)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1])
