"""What the sandboxes of JVM servers share (:mod:`cdc.app.sandbox.kafka`, :mod:`cdc.app.sandbox.pulsar`).

:class:`JvmServer` is one server process in a temp folder of its own, on the machine that calls it
(the driver or a test process): a subclass writes its configuration before the first start, names
its command line and says when it answers; this class starts the JVM (its output to
``stdout.log`` in the folder), waits for it, kills it (SIGKILL, keeping its data), starts it
again on the same ports and data, and stops it (the folder removed). No Docker, no download: the
jars come from ``make setup``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

from cdc.app.sandbox.mysql import SandboxError

T = TypeVar("T", bound="JvmServer")

# For a throwaway server that moves little data (the demo's brokers, the tests'): C1 only. C2 makes
# its start dearer and keeps compiling while it idles. Kafka, Pulsar and Pravega started side by side
# on 2 cores, then idle for a minute (2026-12-07): starts of 4.3, 9.9 and 6.9 CPU s against 6.6, 17.2
# and 17.5 with both compilers; idle 1.5, 0.9 and 4.0 CPU s a minute against 1.9, 0.9 and 4.7. Under
# load C1 costs a little: the tests' MariaDB SIGKILL fan-out to all three took 340 CPU s against 323
# (one run each). The benchmarks' brokers keep both compilers.
LIGHT_SERVER_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def java_binary() -> str:
    """The ``java`` on PATH.

    Raises:
        SandboxError: none is installed (the message names ``make setup``).
    """
    java = shutil.which("java")
    if java is None:
        raise SandboxError("java not found: install a JDK 17+ (`make setup` does it: "
                           "apt-get install openjdk-17-jre-headless)")
    return java


class JvmServer(ABC):
    """One server JVM in its own temp folder (driver side).

    Args:
        prefix: the temp folder's name prefix.
        base_dir: where to create the folder (a fresh temp dir by default; removed on stop).
        jvm_options: more JVM options, ahead of the subclass's own (the tests start theirs with
            C1 only: light servers that start in less CPU and do not keep compiling while idle).
    """

    name: ClassVar[str] = "server"  # in messages
    start_timeout: ClassVar[float] = 90.0  # seconds to wait for a start by default
    poll_s: ClassVar[float] = 0.2  # between readiness probes

    def __init__(self, prefix: str, base_dir: str | None = None, jvm_options: Sequence[str] = ()) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir))
        self.jvm_options = tuple(jvm_options)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    @abstractmethod
    def log_file(self) -> Path:
        """The server's own log (its tail goes into a failed start's error)."""

    @abstractmethod
    def address(self) -> str:
        """Where clients reach it (for messages)."""

    @abstractmethod
    def prepare(self) -> None:
        """Write what the server needs before it starts (called at every start: skip what exists)."""

    @abstractmethod
    def command(self) -> list[str]:
        """The JVM's command line."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether it answers now (an exception counts as not yet)."""

    def start(self: T, timeout: float | None = None) -> T:
        """Prepare, start the JVM, wait until it answers.

        Raises:
            SandboxError: no java, the jars are missing, or the server did not come up in time.
        """
        self.prepare()
        command = self.command()
        out = open(self.dir / "stdout.log", "ab")  # noqa: SIM115 - the child keeps it open
        try:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                                         start_new_session=True)
        finally:
            out.close()
        self._wait_ready(self.start_timeout if timeout is None else timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_file.read_text(errors="replace")[-3000:] if self.log_file.exists() else ""
                raise SandboxError(f"{self.name} exited with code {self.proc.returncode} during start-up:\n{tail}")
            try:
                if self.ready():
                    return
            except Exception as exc:  # not listening yet
                last = exc
            time.sleep(self.poll_s)
        raise SandboxError(f"{self.name} on {self.address()} not ready after {timeout:.0f}s: {last}")

    def kill(self) -> None:
        """Kill the JVM at once (SIGKILL), keeping its data: the server is lost."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self, timeout: float | None = None) -> None:
        """Kill the JVM and start it again on the same ports and data."""
        self.kill()
        self.start(timeout)

    def stop(self) -> None:
        """Kill the JVM and remove the folder."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def started(box: T) -> T:
    """``box`` started, or stopped (its folder removed) when the start fails."""
    try:
        return box.start()
    except BaseException:
        box.stop()
        raise
