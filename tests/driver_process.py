"""A driver process for the crash tests: runs the job continuously until it is killed.

Usage: python tests/driver_process.py '<json: the job file's tree>' [<pause directory>]
It runs :meth:`JobRunner.run` without ``once``: the long-running mode, which looks for new and
dropped tables every ``source.table_discovery_interval`` and restarts its query for them. It
prints "batch N" after each batch the sinks committed, so a test can kill it mid-flight. With a
pause directory, a pass through a hook point armed there (a file named after the point) stops
for good, so a test can SIGKILL the driver at that very point (:class:`Driver` does both sides).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc.app.checkpoint import CheckpointFiles
from cdc.app.config import parse_config
from cdc.app.runner import JobRunner, job_session

TIMEOUT_S = 300.0  # the longest a step may take: a fresh driver starts slowly on 2 busy cores


class PrintCommits:
    """Hooks that print each committed batch and stop at armed points (pickled by value to the
    workers: a __main__ class).

    Args:
        pauses: a directory where a file ``<point>`` arms a pause at that point (None: none). A
            pass through an armed point writes ``<point>.reached`` and then waits until the
            process is killed; so does every later pass (concurrent tasks may all stop there).
    """

    def __init__(self, pauses: str | None = None) -> None:
        self.batch = 0
        self.pauses = pauses

    def reached(self, point: str) -> None:
        if point == "after_sink_commit":
            print(f"batch {self.batch}", flush=True)
            self.batch += 1
        if self.pauses is not None and os.path.exists(os.path.join(self.pauses, point)):
            Path(self.pauses, f"{point}.reached").write_text(str(os.getpid()))
            parent = os.getppid()
            while True:  # until the test SIGKILLs the driver; never goes on
                time.sleep(0.2)
                if os.getppid() != parent:  # a Python worker whose daemon ended with the JVM
                    os._exit(1)


def main(arg: str, pauses: str | None = None) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("cdc").setLevel(logging.INFO)  # the job's own lines, for a failing test's message
    config = parse_config({**json.loads(arg), "trigger_interval": "200ms"}, warn_plain_password=False)
    spark = job_session(config)  # the job's own: its catalog too, so a restart finds its names recorded
    print("started", flush=True)
    JobRunner(config, spark, hooks=PrintCommits(pauses)).run()


# ---- the test's side -------------------------------------------------------------------------


MOMENTS = {  # where a test lands its DDL and its SIGKILL while a table joins (Driver.reach)
    "batch": "one more batch committed",
    "joining": "the query restarted with the new table: its first batch that stages its chunks is planned",
    "emitting": "a task emitting a chunk of the new table is held by a pause (its stage committed, its emit not)",
}


class Driver:
    """A driver process a test started: its committed batches, its pauses, its SIGKILL.

    A thread reads the driver's output, so a test may wait for batches, for a file in the
    checkpoint or for a pause without the pipe filling up.

    Args:
        raw: the job file's tree (the test pipeline's ``raw_config()``).
        workdir: where its pause directory and its stderr file (``driver-<n>.err``) go.
    """

    def __init__(self, raw: dict[str, Any], workdir: Path) -> None:
        self.pauses = workdir / "pauses"
        self.pauses.mkdir(parents=True, exist_ok=True)
        for old in self.pauses.iterdir():  # the last driver's armed and reached points
            old.unlink()
        n = len(list(workdir.glob("driver-*.err")))
        self.stderr = workdir / f"driver-{n}.err"
        self.checkpoint = CheckpointFiles(str(raw["checkpoint"]))
        self.batches = 0
        self._changed = threading.Condition()
        with open(self.stderr, "w") as err:
            self.process = subprocess.Popen([sys.executable, __file__, json.dumps(raw), str(self.pauses)],
                                            stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("batch "):
                with self._changed:
                    self.batches += 1
                    self._changed.notify_all()

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
        """Poll ``condition`` until it holds; fails naming ``what`` (and the driver's last words)
        when the driver exits or the time is up."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"the driver exited with {self.process.returncode} while waiting for {what}: "
                                     f"{self.stderr.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.stderr.read_text()[-3000:]}")
            time.sleep(0.02)

    def wait_for_batches(self, n: int = 1) -> None:
        """Block until the driver committed ``n`` more batches than it had when called."""
        target = self.batches + n
        self.wait_until(lambda: self.batches >= target, f"{n} more committed batch(es)")

    def pause_at(self, point: str) -> None:
        """Every later pass through ``point`` (cdc/model/hooks.py) stops until the kill."""
        (self.pauses / point).write_text("")

    def paused(self, point: str) -> bool:
        """A pass through ``point`` has stopped."""
        return (self.pauses / f"{point}.reached").exists()

    def planned(self) -> dict[str, Any] | None:
        """The newest batch's offset Spark wrote (planned, maybe not committed), or None."""
        last = self.checkpoint.last("offsets")
        if last is None:
            return None
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return self.checkpoint.offset(last)
        return None  # being written

    def committed(self) -> dict[str, Any] | None:
        """The offset of the newest batch Spark committed, or None."""
        last = self.checkpoint.last("commits")
        return None if last is None else self.checkpoint.offset(last)

    def reach(self, moment: str, table: str) -> None:
        """Block until a moment of a table's join (:data:`MOMENTS`) comes."""
        if moment == "batch":
            self.wait_for_batches(1)
        elif moment == "joining":
            self.wait_until(lambda: stages(self.planned(), table), MOMENTS[moment])
        else:
            self.pause_at("emit")  # the caller's other tables stream: only the joining one emits chunks
            self.wait_until(lambda: self.paused("emit"), MOMENTS[moment])

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and its Python workers at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)


def table_state(offset: dict[str, Any] | None, table: str) -> str | None:
    """A table's state (``pending``, ``snapshot``, ``stream``) in an offset; None when absent."""
    progress = None if offset is None else offset["tables"].get(table)
    return None if progress is None else str(progress["state"])


def stages(offset: dict[str, Any] | None, table: str) -> bool:
    """The offset's batch stages chunks of ``table`` (a joining table's snapshot is under way)."""
    return offset is not None and table in offset.get("stage", {})


if __name__ == "__main__":
    main(*sys.argv[1:3])
