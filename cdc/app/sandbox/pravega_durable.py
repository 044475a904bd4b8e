"""A Pravega that keeps its data when its processes die: for the server-restart tests and for users.

Runs on the machine that calls it (the driver or a test process). :class:`DurablePravegaSandbox`
starts Pravega's parts as four JVMs from ``jars/pravega`` in one folder, on loopback ports chosen
at the first start and kept in ``ports.json``:

* ZooKeeper (``org.apache.zookeeper.server.ZooKeeperServerMain``, data in ``zookeeper/data``);
* one bookie (``org.apache.bookkeeper.server.Main``, journal and ledgers under ``bookie/``), the
  segment store's durable log (tier 1); the cluster's metadata is written once by BookKeeper's
  ``BookieShell initnewcluster``;
* the controller (``io.pravega.controller.server.Main``; its REST server cannot be switched off,
  so it listens too, on loopback);
* the segment store (``io.pravega.segmentstore.server.host.ServiceStarter``), with the bookie as
  its log and ``segmentstore/tier2`` as long-term storage (``FILESYSTEM``).

:meth:`~DurablePravegaSandbox.kill` SIGKILLs all four; :meth:`~DurablePravegaSandbox.start` brings
them back on the same ports and folders, and the scopes, streams, transactions and events written
before are there again. No part calls fsync (ZooKeeper ``forceSync=no``, the bookie
``journalSyncData=false``): the data survives the processes, not the machine losing power.

The standalone server (:class:`cdc.app.sandbox.pravega.PravegaSandbox`) cannot be made to keep
its data: ``InProcPravegaCluster`` 0.13 names its cluster ``singlenode-<random UUID>`` at each
start (the controller's ZooKeeper namespace), deletes ``/pravega``, ``/store``, ``/hostIndex``
and ``/taskIndex`` from ZooKeeper at start, and runs its ZooKeeper in a temp folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from cdc.app.sandbox.jvm import JvmServer, java_binary
from cdc.app.sandbox.mysql import SandboxError, free_port
from cdc.app.sandbox.pravega import PROBE_SCOPE, client_module, pravega_jars

PORTS = ("zookeeper", "bookie", "controller", "controller_rest", "segment_store")
CONTAINERS = 4  # segment containers (the controller and the segment store must agree)
SESSION_MS = 3000  # ZooKeeper sessions: a killed part's registrations expire this long after a restart
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")  # start fast, on little memory


class _Part(JvmServer):
    """One of the sandbox's JVMs, in ``<folder>/<name>`` (fixed: a restart finds its data). Its
    readiness looks only at what it logged since this start (the log is appended to)."""

    heap: ClassVar[str] = "256m"
    main: ClassVar[str] = ""
    port_name: ClassVar[str] = ""

    def __init__(self, sandbox: DurablePravegaSandbox) -> None:  # JvmServer.__init__ makes a temp folder: not here
        self.sandbox = sandbox
        self.dir = sandbox.dir / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_mark = 0

    @property
    def port(self) -> int:
        return self.sandbox.ports[self.port_name]

    @property
    def log_file(self) -> Path:
        return self.dir / "stdout.log"

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def prepare(self) -> None:
        self.log_mark = self.log_file.stat().st_size if self.log_file.exists() else 0

    def logged(self, line: str) -> bool:
        """``line`` is in what the part logged since this start."""
        with open(self.log_file, "rb") as f:
            f.seek(self.log_mark)
            return line.encode() in f.read()

    def java(self, *args: str, classpath: str | None = None) -> list[str]:
        return [java_binary(), f"-Xmx{self.heap}", *JVM_FLAGS, *args, "-cp", classpath or pravega_jars(),
                self.main]

    def ready(self) -> bool:
        """It takes a TCP connection."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True


class ZooKeeper(_Part):
    name = "zookeeper"
    heap = "128m"
    main = "org.apache.zookeeper.server.ZooKeeperServerMain"
    port_name = "zookeeper"

    def prepare(self) -> None:
        super().prepare()
        (self.dir / "zoo.cfg").write_text(
            f"dataDir={self.dir / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "tickTime=500\nadmin.enableServer=false\nforceSync=no\n")

    def command(self) -> list[str]:
        return [*self.java(), str(self.dir / "zoo.cfg")]


class Bookie(_Part):
    name = "bookie"
    main = "org.apache.bookkeeper.server.Main"
    port_name = "bookie"

    def prepare(self) -> None:
        """Its configuration, and BookKeeper's metadata in ZooKeeper at the first start."""
        super().prepare()
        zk = self.sandbox.ports["zookeeper"]
        conf = self.dir / "bookie.conf"
        conf.write_text(
            f"bookiePort={self.port}\nadvertisedAddress=127.0.0.1\nallowLoopback=true\n"
            f"journalDirectories={self.dir / 'journal'}\nledgerDirectories={self.dir / 'ledgers'}\n"
            f"metadataServiceUri=zk+null://127.0.0.1:{zk}/ledgers\nzkTimeout={SESSION_MS}\n"
            "httpServerEnabled=false\njournalSyncData=false\n"
            "diskUsageThreshold=0.99\ndiskUsageWarnThreshold=0.98\n")
        formatted = self.dir / "formatted"
        if formatted.exists():
            return
        log = self.dir / "initnewcluster.log"
        with open(log, "wb") as out:
            done = subprocess.run([java_binary(), "-Xmx128m", *JVM_FLAGS, "-cp", pravega_jars(),
                                   "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(conf), "initnewcluster"],
                                  stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False)
        if done.returncode != 0:
            raise SandboxError(f"BookKeeper's metadata could not be written to ZooKeeper at 127.0.0.1:{zk} "
                               f"(BookieShell initnewcluster exited with {done.returncode}): see {log}")
        formatted.touch()

    def command(self) -> list[str]:
        return [*self.java(), "--conf", str(self.dir / "bookie.conf")]

    def ready(self) -> bool:
        """It registered (a restarted bookie first waits for its old registration to expire)."""
        return self.logged("Started component bookie-server")


class Controller(_Part):
    name = "controller"
    heap = "384m"
    main = "io.pravega.controller.server.Main"
    port_name = "controller"

    def command(self) -> list[str]:
        p = self.sandbox.ports
        settings = {"zk.connect.uri": f"127.0.0.1:{p['zookeeper']}",
                    "zk.connect.session.timeout.milliseconds": SESSION_MS,
                    "service.rpc.listener.port": self.port, "service.rpc.published.host.nameOrIp": "127.0.0.1",
                    "service.rpc.published.port": self.port, "service.rest.listener.host.ip": "127.0.0.1",
                    "service.rest.listener.port": p["controller_rest"], "container.count": CONTAINERS,
                    "rebalance.interval.seconds.min": 1}
        return self.java(*(f"-Dcontroller.{k}={v}" for k, v in settings.items()), classpath=_controller_classpath())


class SegmentStore(_Part):
    name = "segmentstore"
    heap = "512m"
    main = "io.pravega.segmentstore.server.host.ServiceStarter"
    port_name = "segment_store"
    cache_mb = 256

    def prepare(self) -> None:
        """An empty configuration file: every setting comes from the command line."""
        super().prepare()
        (self.dir / "tier2").mkdir(exist_ok=True)
        (self.dir / "segmentstore.properties").touch()

    def command(self) -> list[str]:
        p = self.sandbox.ports
        zk = f"127.0.0.1:{p['zookeeper']}"
        settings = {
            "pravega.configurationFile": self.dir / "segmentstore.properties",
            "pravegaservice.zk.connect.uri": zk, "pravegaservice.zk.connect.sessionTimeout.milliseconds": SESSION_MS,
            "pravegaservice.container.count": CONTAINERS, "pravegaservice.service.listener.port": self.port,
            "pravegaservice.service.listener.host.nameOrIp": "127.0.0.1",
            "pravegaservice.service.published.host.nameOrIp": "127.0.0.1",
            "pravegaservice.dataLog.impl.name": "BOOKKEEPER", "pravegaservice.storage.impl.name": "FILESYSTEM",
            "pravegaservice.storage.layout": "CHUNKED_STORAGE", "filesystem.root": self.dir / "tier2",
            "pravegaservice.cache.size.max": self.cache_mb * 1024 * 1024,
            "pravegaservice.rest.listener.enable": "false", "pravegaservice.admin.gateway.enable": "false",
            "bookkeeper.zk.connect.uri": zk, "bookkeeper.zk.connect.sessionTimeout.milliseconds": SESSION_MS,
            "bookkeeper.ledger.path": "/ledgers", "bookkeeper.ensemble.size": 1, "bookkeeper.write.quorum.size": 1,
            "bookkeeper.ack.quorum.size": 1, "autoScale.controller.connect.uri": f"tcp://127.0.0.1:{p['controller']}",
            "metrics.statistics.enable": "false"}
        return self.java(*(f"-D{k}={v}" for k, v in settings.items()))


class DurablePravegaSandbox:
    """ZooKeeper, a bookie, the controller and the segment store, each a JVM, in one folder (driver
    side; see the module's docstring).

    Args:
        folder: where the data lives; kept by :meth:`stop` (a new temp folder by default, removed
            by :meth:`stop`). A folder used before is started again with its data and ports.
        base_dir: where to create the temp folder when ``folder`` is not given.
    """

    start_timeout: ClassVar[float] = 180.0

    def __init__(self, folder: str | None = None, base_dir: str | None = None) -> None:
        self.keep = folder is not None
        self.dir = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="pravega-durable-", dir=base_dir))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ports = self._ports()
        self.zookeeper, self.bookie = ZooKeeper(self), Bookie(self)
        self.controller, self.segment_store = Controller(self), SegmentStore(self)
        self.parts: tuple[_Part, ...] = (self.zookeeper, self.bookie, self.controller, self.segment_store)

    def _ports(self) -> dict[str, int]:
        """The ports of the folder's first start (the bookie's identity and the segment store's
        address are kept in ZooKeeper), or new free ones."""
        path = self.dir / "ports.json"
        if path.exists():
            return {k: int(v) for k, v in json.loads(path.read_text()).items()}
        ports = {name: free_port() for name in PORTS}
        path.write_text(json.dumps(ports))
        return ports

    @property
    def controller_uri(self) -> str:
        """The controller's gRPC URI (``tcp://host:port``), for clients."""
        return f"tcp://127.0.0.1:{self.ports['controller']}"

    def address(self) -> str:
        return self.controller_uri

    def pgids(self) -> list[int]:
        """The process groups of the running parts (a test's crash hook kills them all)."""
        return [part.proc.pid for part in self.parts if part.proc is not None and part.proc.poll() is None]

    def start(self, timeout: float | None = None) -> DurablePravegaSandbox:
        """Start the four parts on the folder's ports and data, and wait until the controller
        creates (or finds) a scope.

        Raises:
            SandboxError: a part did not come up (the message names its log file), or the jars
                are missing (``make setup``).
        """
        timeout = self.start_timeout if timeout is None else timeout
        self._start(self.zookeeper, timeout)
        with ThreadPoolExecutor(1) as pool:  # the controller needs only ZooKeeper
            controller = pool.submit(self._start, self.controller, timeout)
            self._start(self.bookie, timeout)
            self._start(self.segment_store, timeout)  # after the bookie: its log opens at start
            controller.result()
        self._probe(timeout)
        return self

    def _start(self, part: _Part, timeout: float) -> None:
        try:
            part.start(timeout)
        except SandboxError as exc:
            raise SandboxError(f"Pravega's {part.name} on {part.address()} did not come up: {exc}\n"
                               f"(its log: {part.log_file})") from None

    def _probe(self, timeout: float) -> None:
        """The controller creates the probe scope (which needs the segment store too)."""
        manager = client_module().StreamManager(self.controller_uri, False, False)  # type: ignore[attr-defined]
        with ThreadPoolExecutor(1) as pool:
            try:
                pool.submit(manager.create_scope, PROBE_SCOPE).result(timeout=timeout)
            except Exception as exc:
                logs = ", ".join(str(p.log_file) for p in (self.controller, self.segment_store))
                raise SandboxError(f"Pravega at {self.controller_uri} does not create a scope ({exc!r}): "
                                   f"see {logs}") from None

    def kill(self) -> None:
        """SIGKILL every part at once, keeping the data (the server is lost)."""
        for pgid in self.pgids():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        for part in self.parts:  # reaped
            part.kill()

    def restart(self, timeout: float | None = None) -> None:
        """Kill every part and start them again on the same ports and data."""
        self.kill()
        self.start(timeout)

    def stop(self) -> None:
        """Kill every part; remove the folder unless it was given."""
        self.kill()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _controller_classpath() -> str:
    """``jars/pravega/*`` with Jersey 2's server first: Hadoop's Jersey 1 jar carries an older copy
    of the same repackaged ASM, and the controller's REST server (always on) fails to start with
    ``IllegalArgumentException`` at ``ClassVisitor.<init>`` when that copy comes first."""
    jars = pravega_jars()
    jersey = sorted(Path(jars).parent.glob("jersey-server-2.*.jar"))
    if not jersey:
        raise SandboxError(f"jersey-server 2.x is missing from {Path(jars).parent}: run `make setup`")
    return f"{jersey[-1]}:{jars}"


def start_durable_pravega_sandbox(folder: str | None = None, base_dir: str | None = None) -> DurablePravegaSandbox:
    """Start a :class:`DurablePravegaSandbox`, or stop it (a temp folder removed) when the start fails."""
    box = DurablePravegaSandbox(folder, base_dir)
    try:
        return box.start()
    except BaseException:
        box.stop()
        raise
