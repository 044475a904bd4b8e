"""A throwaway Pravega for tests and demos: the standalone server from ``jars/pravega``.

Runs on the machine that calls it (the driver or a test process). :class:`PravegaSandbox` starts
``io.pravega.local.LocalPravegaEmulator`` (ZooKeeper, the controller and the segment store in one
JVM, authentication and TLS off, no REST or admin gateway, no metrics) on free loopback ports in a
temp folder, and waits until the controller creates a scope. Its data lives on the JVM's heap:
size ``heap`` for what a test writes (at 256 MiB it ran out after ~100 MB, and the client then saw
only a write timeout). :meth:`PravegaSandbox.restart` kills the JVM and starts it again on the same
ports, **without** its data (the emulator keeps none on disk); :meth:`PravegaSandbox.stop` kills
it and removes the folder (:class:`cdc.app.sandbox.jvm.JvmServer`). A Pravega that keeps its data
across a kill is :mod:`cdc.app.sandbox.pravega_durable` (four JVMs). No Docker, no download: the
jars come from ``make setup``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cdc.app.sandbox.jvm import JvmServer, java_binary, started
from cdc.app.sandbox.mysql import SandboxError, free_port
from cdc.spark.jars import jars_dir, pravega_classpath

PROBE_SCOPE = "spark-cdc-sandbox"  # the scope the readiness probe creates


def client_module() -> object:
    """``pravega_client`` (the ``pravega`` package's Rust bindings).

    Raises:
        SandboxError: it is not installed (the message says which Pythons it supports).
    """
    try:
        import pravega_client
    except ImportError:
        raise SandboxError("the Pravega client is missing: `pip install 'spark-cdc[pravega]'` "
                           "(its wheels are for CPython 3.10 and 3.11)") from None
    return pravega_client


class PravegaSandbox(JvmServer):
    """One standalone Pravega on loopback, in its own temp folder (driver side).

    Args:
        base_dir: where to create the folder (a fresh temp dir by default; removed on stop).
        heap: the JVM's ``-Xmx`` (the data is kept on it).
        cache_mb: the segment store's cache, off the heap (Pravega's default, 128 MiB, filled up
            under a large transaction on a loaded machine: ``CacheFullException``, after which the
            emulator's segment container stops for good, its storage being in memory).
        jvm_options: more JVM options (:class:`cdc.app.sandbox.jvm.JvmServer`).
    """

    name = "pravega"
    start_timeout = 120.0
    poll_s = 0.3

    def __init__(self, base_dir: str | None = None, heap: str = "1g", cache_mb: int = 512,
                 jvm_options: Sequence[str] = ()) -> None:
        super().__init__("pravega-sandbox-", base_dir, jvm_options)
        self.zk_port = free_port()
        self.segment_store_port = free_port()
        self.controller_port = free_port()
        self.heap = heap
        self.cache_mb = cache_mb

    @property
    def controller_uri(self) -> str:
        """The controller's gRPC URI (``tcp://host:port``), for clients."""
        return f"tcp://127.0.0.1:{self.controller_port}"

    @property
    def log_file(self) -> Path:
        return self.dir / "stdout.log"

    def address(self) -> str:
        return self.controller_uri

    def prepare(self) -> None:
        """An empty configuration file: every setting comes from the command line."""
        (self.dir / "standalone.properties").touch()

    def command(self) -> list[str]:
        settings = {"configurationFile": str(self.dir / "standalone.properties"),
                    "zk.port": self.zk_port, "segmentStore.port": self.segment_store_port,
                    "controller.rpc.port": self.controller_port, "controller.rest.enable": "false",
                    "admin.gateway.enable": "false", "security.auth.enable": "false",
                    "security.tls.enable": "false", "metrics.enable": "false"}
        return [java_binary(), *self.jvm_options, f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                f"-Dpravegaservice.cache.size.max={self.cache_mb * 1024 * 1024}",
                *(f"-Dsinglenode.{k}={v}" for k, v in settings.items()),
                "-cp", pravega_jars(), "io.pravega.local.LocalPravegaEmulator"]

    def ready(self) -> bool:
        """The emulator says it runs, and the controller creates (or finds) the probe scope (a
        client asking earlier retries with a backoff that outlasts the start)."""
        if "Pravega Sandbox is running" not in self.log_file.read_text(errors="replace"):
            return False
        manager = client_module().StreamManager(self.controller_uri, False, False)  # type: ignore[attr-defined]
        manager.create_scope(PROBE_SCOPE)
        return True


def pravega_jars() -> str:
    """``jars/pravega/*`` as the JVM expands it, checked to exist first (the order matters: with
    the jars listed by name the controller answered every request with an internal error)."""
    pravega_classpath()  # raises JarsMissing, naming `make setup`
    return str(jars_dir() / "pravega" / "*")


def start_pravega_sandbox(**kwargs: object) -> PravegaSandbox:
    """Start a sandbox Pravega (see :class:`PravegaSandbox`; ``kwargs`` go to its constructor)."""
    return started(PravegaSandbox(**kwargs))  # type: ignore[arg-type]


def read_events(controller_uri: str, scope: str, stream: str, idle_slices: int = 1) -> list[bytes]:
    """Every event of ``stream`` by a reader group of its own from the stream's head (the demo's
    and the tests' read-back): events of one segment in order. The reader hands out an empty slice
    after about a second without data; ``idle_slices`` of them in a row end the read."""
    import asyncio
    import uuid

    module = client_module()
    manager = module.StreamManager(controller_uri, False, False)  # type: ignore[attr-defined]
    group_name = f"read-{uuid.uuid4().hex[:12]}"
    group = manager.create_reader_group(group_name, scope, stream, False, None)
    reader = group.create_reader("reader")
    events: list[bytes] = []

    async def read() -> None:
        idle = 0
        while idle < idle_slices:
            slice_ = await reader.get_segment_slice_async()
            got = [bytes(e.data()) for e in slice_]
            reader.release_segment(slice_)
            idle = 0 if got else idle + 1
            events.extend(got)

    try:
        asyncio.run(read())
    finally:
        reader.reader_offline()
        manager.delete_reader_group(group_name, scope)
    return events
