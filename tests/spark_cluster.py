"""A real Spark standalone cluster for the tests: one master and N workers on loopback.

Started from the scripts and jars that pyspark ships (``spark-class``), each process in its own
process group, each worker with its own work folder and one core, so a test can SIGKILL a worker
(its JVM, its executor and the executor's Python workers: a lost node) and see Spark reschedule
the tasks on the others. Jobs go in through ``spark-submit --master spark://...`` exactly as a
user submits ``cdc_job.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from cdc.spark.jars import spark_jars
from cdc.spark.session import DELTA_CONF, LIGHT_JVM_OPTIONS

SPARK_HOME = Path(pyspark.__file__).parent
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    """The environment of the cluster's processes. The master and the workers only schedule and
    idle: they start with the light options (C1, the serial collector) that the tests give every
    short-lived JVM, instead of C2's compiler threads and G1's on 2 shared cores."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_JAVA_OPTS": LIGHT_JVM_OPTIONS}


@dataclass
class Worker:
    """One worker process (and, once an application runs, its executor and Python workers)."""

    process: subprocess.Popen[bytes]
    work_dir: Path

    def kill(self) -> None:
        """SIGKILL the worker's whole process group: the node is gone."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def executor_running(self) -> bool:
        """True while an executor of some application runs under this worker."""
        return any(p.is_dir() for p in self.work_dir.glob("app-*/*"))


@dataclass
class SparkCluster:
    """A master and ``workers`` workers, one core and ``memory`` each, in a temp folder.

    ``hide``: the workers run in a mount namespace of their own with an empty tmpfs over this
    folder: a node that does not see the driver's local files.
    """

    workers: int = 2
    memory: str = "2g"
    hide: Path | None = None
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="spark-cluster-")))
    port: int = 0
    ui_port: int = 0
    nodes: list[Worker] = field(default_factory=list)
    drivers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _master: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> SparkCluster:
        self.port, self.ui_port = free_port(), free_port()
        log = open(self.folder / "master.log", "wb")  # noqa: SIM115 - closed with the process
        self._master = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port)],
            env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait(lambda s: s.get("status") == "ALIVE", "the master")
            for _ in range(self.workers):
                self.add_worker()
        except BaseException:  # a cluster that did not come up leaves no process or folder behind
            self.stop()
            raise
        return self

    def add_worker(self) -> Worker:
        n = len(self.nodes)
        work = self.folder / f"worker-{n}"
        work.mkdir()
        log = open(self.folder / f"worker-{n}.log", "wb")  # noqa: SIM115 - closed with the process
        command = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                   "--host", "127.0.0.1", "--cores", "1", "--memory", self.memory, "--work-dir", str(work),
                   "--webui-port", str(free_port()), self.url]
        if self.hide is not None:
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f'mount -t tmpfs none "{self.hide}" && exec "$@"', "sh", *command]
        process = subprocess.Popen(command, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.nodes.append(Worker(process, work))
        alive = sum(1 for w in self.nodes if w.process.poll() is None)
        self._wait(lambda s: sum(1 for w in s.get("workers", []) if w["state"] == "ALIVE") >= alive,
                   f"{alive} workers")
        return self.nodes[-1]

    def state(self) -> dict[str, Any]:
        """The master's JSON status, from the port its log says its UI bound: the one asked for, or
        the next free one if something took it meanwhile.

        Raises:
            OSError, ValueError: no answer yet, or not this master's JSON.
        """
        log = self.folder / "master.log"
        bound = re.search(r"Successfully started service 'MasterUI' on port (\d+)",
                          log.read_text(errors="replace") if log.exists() else "")
        port = int(bound.group(1)) if bound else self.ui_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as r:
            data: dict[str, Any] = json.load(r)
        if data.get("url") != self.url:
            raise ValueError(f"port {port} answers for {data.get('url')}, not {self.url}")
        return data

    def _wait(self, ready: Any, what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._master is not None and self._master.poll() is None, self._log("master.log")
            try:
                if ready(self.state()):
                    return
            except (OSError, ValueError):  # not listening yet, or (as it starts) its page, not its JSON
                pass
            time.sleep(0.3)
        raise AssertionError(f"{what} did not come up in {timeout:.0f}s:\n{self._log('master.log')}")

    def _log(self, name: str) -> str:
        path = self.folder / name
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def submit(self, config: Path, *args: str, log: Path) -> subprocess.Popen[bytes]:
        """``spark-submit cdc_job.py --config <config> <args>`` against this cluster (the driver
        runs here, in client mode, in its own process group)."""
        conf = {**DELTA_CONF, "spark.pyspark.python": sys.executable, "spark.executor.memory": "1g",
                "spark.driver.memory": "1g", "spark.ui.enabled": "false", "spark.log.level": "WARN",
                "spark.task.maxFailures": "8", "spark.sql.shuffle.partitions": "2",
                # the executors' temp files (native libraries unpacked) stay in the cluster's folder:
                # an executor SIGKILLed with its worker never removes them. Their JVMs move the
                # Python workers' rows and small manifests (the job's default engine merges in
                # Python): the light options, as the job's own local session has them.
                "spark.executor.extraJavaOptions": f"{LIGHT_JVM_OPTIONS} -Djava.io.tmpdir={self.folder}"}
        command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.url,
                   "--jars", ",".join(spark_jars())]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        command += [str(ROOT / "cdc_job.py"), "--config", str(config), *args]
        out = open(log, "ab")  # noqa: SIM115 - closed with the process
        driver = subprocess.Popen(command, env=_env(), cwd=self.folder, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        self.drivers.append(driver)
        return driver

    def stop(self) -> None:
        for d in self.drivers:  # a test that failed midway leaves its driver running
            if d.poll() is None:
                os.killpg(d.pid, signal.SIGKILL)
                d.wait(timeout=30)
        for w in self.nodes:
            w.kill()
        if self._master is not None and self._master.poll() is None:
            os.killpg(self._master.pid, signal.SIGKILL)
            self._master.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)
