"""The workers' daemon forked by a job's zygote (``cdc.spark.zygote``): Spark's launched daemon
process hands its streams, arguments and environment over, stands for the forked daemon until it
exits, and does its own preload whenever the zygote cannot serve it."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECRET = "a-worker-factory-secret"


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _gone(pid: int, limit: float = 20.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A zygote preloading a small module, as a job's session starts it."""
    path = str(tmp_path / "zygote.sock")
    env = {**os.environ, "SPARK_CDC_PRELOAD": "json", "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "cdc.spark.zygote", path], stdin=subprocess.PIPE, env=env,
                            cwd=ROOT)
    end = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.02)
    try:
        yield proc, path
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(20)


def _python(path: str, folder: Path, interpreter: str = sys.executable) -> Path:
    """The session's Python for Spark (``sc.pythonExec``) for the zygote at ``path``, as
    :func:`cdc.spark.zygote.start` writes it, in ``folder``."""
    from cdc.spark.zygote import script

    python = folder / "python"
    python.write_text(script(path, interpreter))
    python.chmod(0o755)
    return python


def _launch(path: str, **env: str) -> tuple[subprocess.Popen[bytes], int]:
    """``<the session's Python> -m cdc.spark.daemon`` as Spark's worker factory launches it; its
    port."""
    full = {**os.environ, "SPARK_CDC_PRELOAD": "json", "PYTHONHASHSEED": "0",
            "PYTHON_WORKER_FACTORY_SECRET": SECRET, **env}
    python = _python(path, Path(path).parent)
    proc = subprocess.Popen([str(python), "-m", "cdc.spark.daemon"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full, cwd=ROOT)
    assert proc.stdout is not None
    raw = proc.stdout.read(4)
    assert len(raw) == 4, proc.stderr.read().decode() if proc.stderr else ""
    return proc, struct.unpack(">i", raw)[0]


def _worker(port: int, keep: list[socket.socket] | None = None) -> tuple[int, bytes]:
    """A worker forked by the daemon on ``port``: its pid, and its answer to the factory's secret
    (``ok`` only if the daemon has the launched process's environment). Its connection stays open
    in ``keep``, if given (the worker then waits for a task)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    with s.makefile("rwb") as f:
        pid = struct.unpack(">i", f.read(4))[0]
        f.write(struct.pack(">i", len(SECRET)) + SECRET.encode())
        f.flush()
        size = struct.unpack(">i", f.read(4))[0]
        answer = f.read(size)
    if keep is None:
        s.close()
    else:
        keep.append(s)
    return pid, answer


def _served_by(zygote: subprocess.Popen[bytes], path: str) -> bool:
    """Whether a daemon launched now is forked by ``zygote``; it is stopped afterwards."""
    launched, port = _launch(path)
    try:
        return _parent(_worker(port)[0]) in _children(zygote.pid)
    finally:
        assert launched.stdin is not None
        launched.stdin.close()  # as Spark stops a daemon
        launched.wait(20)


def test_the_launched_daemon_hands_over_to_the_zygote_which_forks_it_with_sparks_environment(
        zygote: tuple[subprocess.Popen[bytes], str]) -> None:
    proc, path = zygote
    launched, port = _launch(path)
    try:
        daemons = _children(proc.pid)
        assert len(daemons) == 1, daemons
        worker, answer = _worker(port)
        assert _parent(worker) == daemons[0] != launched.pid  # forked by the zygote's daemon
        assert answer == b"ok"  # the launched process's secret, not the zygote's environment
        assert launched.poll() is None  # it stands for the daemon
    finally:
        launched.kill()
        launched.wait()


@pytest.mark.parametrize("stop", ["sigterm", "stdin closed"])
def test_the_daemon_and_the_launched_process_end_together(zygote: tuple[subprocess.Popen[bytes], str],
                                                          stop: str) -> None:
    """Spark stops a daemon with SIGTERM (``Process.destroy``) or by closing its stdin: the
    forked daemon ends, and then the launched process."""
    proc, path = zygote
    launched, port = _launch(path)
    (daemon,) = _children(proc.pid)
    connections: list[socket.socket] = []
    worker, _ = _worker(port, connections)
    assert not _gone(worker, 0.5)
    if stop == "sigterm":
        launched.send_signal(signal.SIGTERM)
    else:
        assert launched.stdin is not None
        launched.stdin.close()
    assert _gone(daemon), "the daemon outlived its stop"
    assert launched.wait(20) is not None
    assert _gone(worker), "the daemon's worker outlived it"
    assert proc.poll() is None  # the zygote serves on
    connections[0].close()


@pytest.mark.parametrize("why", ["no zygote", "another hash seed"])
def test_a_daemon_the_zygote_cannot_serve_preloads_itself(zygote: tuple[subprocess.Popen[bytes], str],
                                                         tmp_path: Path, why: str) -> None:
    proc, path = zygote
    if why == "no zygote":
        launched, port = _launch(str(tmp_path / "nothing-here.sock"))
    else:
        launched, port = _launch(path, PYTHONHASHSEED="123")
    try:
        worker, answer = _worker(port)
        assert _parent(worker) == launched.pid  # the launched process is the daemon itself
        assert answer == b"ok"
        assert _children(proc.pid) == []
    finally:
        launched.kill()
        launched.wait()
    if why != "no zygote":  # a refusal leaves the zygote serving
        assert _served_by(proc, path)


def test_the_zygote_survives_a_bad_request_and_ends_with_its_driver(
        zygote: tuple[subprocess.Popen[bytes], str]) -> None:
    proc, path = zygote
    with socket.socket(socket.AF_UNIX) as s:  # no descriptors, a truncated request
        s.connect(path)
        s.sendall(b"\x00\x00\x10\x00{")
        assert s.recv(2) == b"no"
    assert _served_by(proc, path)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(20) == 0
    assert not os.path.exists(path)


def test_a_zygote_whose_driver_was_killed_removes_its_folder() -> None:
    """The folder :func:`cdc.spark.zygote.start` makes (the socket and the session's Python) goes
    with the zygote, also when the driver could not remove it (SIGKILL)."""
    import tempfile

    from cdc.spark.zygote import FOLDER_PREFIX

    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    (folder / "python").write_text("#!/bin/sh\n")
    driver = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen("
                               f"[sys.executable, '-m', 'cdc.spark.zygote', {str(folder / 'zygote.sock')!r}], "
                               "stdin=subprocess.PIPE); time.sleep(600)"], cwd=ROOT)
    end = time.monotonic() + 60
    while not (folder / "zygote.sock").exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert (folder / "zygote.sock").exists()
    driver.kill()
    driver.wait()
    end = time.monotonic() + 30
    while folder.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not folder.exists(), list(folder.iterdir())


@pytest.mark.parametrize("interpreter", ["this one", "one whose path has blanks"])
def test_the_sessions_python_has_the_zygote_fork_any_module_and_runs_anything_else_itself(
        zygote: tuple[subprocess.Popen[bytes], str], tmp_path: Path, interpreter: str) -> None:
    """The script a job's session gives Spark as its Python (``sc.pythonExec``): a planner's
    daemon (``-m pyspark.daemon <planner>``) is a fork of the zygote, named after the planner;
    anything else, or any module once the zygote is gone, runs the real interpreter (also one
    whose path a ``#!`` line could not hold)."""
    proc, path = zygote
    real = sys.executable
    if interpreter != "this one":
        (tmp_path / "an interpreter's folder").mkdir()
        real = str(tmp_path / "an interpreter's folder" / "python")
        Path(real).write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        Path(real).chmod(0o755)
    (tmp_path / "bin").mkdir()
    python, work = _python(path, tmp_path / "bin", real), tmp_path / "work"  # apart: `-m` looks in the working folder
    work.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHON_WORKER_FACTORY_SECRET": SECRET}
    planner = subprocess.Popen([str(python), "-m", "pyspark.daemon", "pyspark.sql.worker.lookup_data_sources"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert planner.stdout is not None
        port = struct.unpack(">i", planner.stdout.read(4))[0]
        (daemon,) = _children(proc.pid)
        worker, answer = _worker(port)
        assert (_parent(worker), answer) == (daemon, b"ok")
        with open(f"/proc/{daemon}/comm") as f:
            assert f.read().strip() == "lookup_data_sou"
    finally:
        assert planner.stdin is not None
        planner.stdin.close()
        planner.wait(20)
    (work / "probe.py").write_text("import os, sys\nprint(os.getppid(), sys.argv[1:], flush=True)\n")

    def run(*args: str) -> tuple[int, str]:
        out = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=60,
                             cwd=work, check=True).stdout.split(" ", 1)
        return int(out[0]), out[1].strip()

    assert run("-m", "probe", "x") == (proc.pid, "['x']")  # any module: run by a fork of the zygote
    assert run("-c", "import probe", "x") == (os.getpid(), "['x']")  # anything else: the real interpreter
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(20)
    assert run("-m", "probe", "y") == (os.getpid(), "['y']")  # no zygote: the real interpreter


JOB_SESSION = """
import json, os, sys
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from cdc.spark import zygote
from cdc.spark.session import local_session

def line_of(pid):
    line = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        line.append(pid)
    return line

def lineage(batches):
    for b in batches:
        yield pa.RecordBatch.from_pydict({"line": [line_of(os.getpid())],
                                          "loaded": ["binlog.postgres.dialect" in sys.modules],
                                          "env": [os.environ.get("SPARK_SIMPLIFIED_TRACEBACK", "")]})

class Reader(DataSourceReader):
    def partitions(self):
        return [InputPartition(line_of(os.getpid()))]

    def read(self, partition):
        yield (partition.value, line_of(os.getpid()))

class Source(DataSource):
    @classmethod
    def name(cls):
        return "lineage"

    def schema(self):
        return "planner array<long>, task array<long>"

    def reader(self, schema):
        return Reader()

spark = local_session("t", parallelism=1, preload=("binlog.postgres.dialect",))
z = zygote._current.process.pid
row = spark.range(0, 1, 1, 1).mapInArrow(lineage, "line array<long>, loaded boolean, env string").collect()[0]
spark.dataSource.register(Source)  # the JVM looks up Python data sources first (its own Python)

def forks(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = f.read().split()
    names = []
    for child in children:
        with open(f"/proc/{child}/comm") as f:
            names.append(f.read().strip())
    return names

lookup = "lookup_data_sou" in forks(z)
read = spark.read.format("lineage").load().collect()[0]
print(row.line[1] == z, row.loaded, row.env, read.planner[1] == z, read.task[1] == z, lookup)
"""


def test_a_jobs_session_gets_its_workers_and_planners_from_its_zygote() -> None:
    """A job's local session starts the zygote before its JVM; the SQL tasks' workers are forked
    from a daemon the zygote forked, with the job's modules loaded and Spark's task environment,
    and so are a Python data source's planner and task processes, and the JVM's own lookup of
    Python data sources."""
    out = subprocess.run([sys.executable, "-c", JOB_SESSION], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1] == "True True 1 True True True", out.stdout + out.stderr[-3000:]
