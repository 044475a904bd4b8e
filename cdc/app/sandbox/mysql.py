"""Throwaway MySQL-compatible servers configured for CDC, for tests, demos and benchmarks.

Two backends, same result (a :class:`Sandbox` with admin and CDC-user credentials):

* :class:`MariaDbSandbox` starts Debian's ``mariadbd`` in a temporary data directory on a free
  loopback port, as the current user, with no system service and no fixed port. It is the
  default because it needs no Docker engine.
* :class:`ContainerSandbox` starts MySQL 8 with testcontainers when a Docker engine answers
  (``SPARK_CDC_SANDBOX=docker`` forces it, ``=mariadb`` forces the local server).

Both configure the server the way the pipeline needs it: ``binlog_format=ROW``,
``binlog_row_image=FULL``, ``binlog_row_metadata=FULL``, GTIDs on and a ``server_id``. Both create
a CDC user holding only SELECT, REPLICATION SLAVE and REPLICATION CLIENT.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from binlog.mysql.connection import Endpoint
from cdc.model.errors import SourceUnreachable

log = logging.getLogger(__name__)

CDC_USER = "cdc"
CDC_PRIVILEGES = "SELECT, REPLICATION SLAVE, REPLICATION CLIENT"

# Server settings every sandbox gets; tests that need another value pass `extra_args`.
CDC_SERVER_ARGS = (
    "--log-bin=mysql-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--server-id=1",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
)


class SandboxError(RuntimeError):
    """A sandbox server could not be started; the message says what to install or check."""


# The sandbox hands out ordinary connection settings.



@dataclass
class Sandbox:
    """A running server: ``admin`` can do anything, ``cdc`` has only the CDC privileges."""

    admin: Endpoint
    cdc: Endpoint
    flavor: str  # "mariadb" or "mysql"
    _stop: Any = field(default=None, repr=False)
    pid: int | None = None  # the local server's process id (None in a container)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def create_database(self, name: str | None = None) -> str:
        """Create a fresh database (a unique name unless given) and return its name."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with contextlib.closing(self.admin.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
        return name

    def drop_database(self, name: str) -> None:
        with contextlib.closing(self.admin.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _create_cdc_user(admin: Endpoint, password: str) -> Endpoint:
    with contextlib.closing(admin.connect()) as conn, conn.cursor() as cur:
        for host in ("localhost", "127.0.0.1", "%"):
            cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (CDC_USER, host, password))
            cur.execute(f"GRANT {CDC_PRIVILEGES} ON *.* TO %s@%s", (CDC_USER, host))
    return Endpoint(admin.host, admin.port, CDC_USER, password)


def _wait_ready(endpoint: Endpoint, proc: subprocess.Popen[bytes] | None, log_file: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
            raise SandboxError(f"mariadbd exited with code {proc.returncode} during start-up:\n{tail}")
        try:
            endpoint.connect().close()
            return
        except (pymysql.err.OperationalError, SourceUnreachable) as exc:
            last = exc
            time.sleep(0.1)
    raise SandboxError(f"server on port {endpoint.port} not ready after {timeout:.0f}s: {last}")


class MariaDbSandbox:
    """Start ``mariadbd`` in a temp datadir on a free loopback port.

    Args:
        extra_args: more ``mariadbd`` options, e.g. ``["--default-time-zone=+05:30"]``.
        base_dir: where to create the datadir (a fresh temp dir by default; removed on stop).
        cdc_user: the CDC user of a primary, for a replica: it arrives through replication, and
            creating it here would write GTIDs of the replica's own. None (the default) creates
            a CDC user.
    """

    def __init__(self, extra_args: list[str] | None = None, base_dir: str | None = None,
                 cdc_user: Endpoint | None = None) -> None:
        self.extra_args = list(extra_args or [])
        self.base_dir = base_dir
        self.cdc_user = cdc_user

    @staticmethod
    def binaries() -> tuple[str, str]:
        server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/usr/local/sbin")
        install = shutil.which("mariadb-install-db")
        if not server or not install:
            raise SandboxError(
                "mariadbd / mariadb-install-db not found: install Debian's mariadb-server "
                "(`make setup` does it: apt-get install mariadb-server mariadb-client)"
            )
        return server, install

    def start(self, timeout: float = 60.0, attempts: int = 3) -> Sandbox:
        """Start the server; retried on a new port if another process took the free port first."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(timeout)
            except SandboxError as exc:
                if attempt == attempts:
                    raise
                log.warning("mariadbd start attempt %d failed, retrying: %s", attempt, str(exc)[-300:])
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> Sandbox:
        server, install = self.binaries()
        root = Path(tempfile.mkdtemp(prefix="spark-cdc-mariadb-", dir=self.base_dir))
        datadir, sock, err = root / "data", root / "mysqld.sock", root / "mysqld.err"
        user = getpass.getuser()
        init = subprocess.run(
            [install, "--no-defaults", f"--datadir={datadir}", f"--user={user}",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, text=True, check=False,
        )
        if init.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise SandboxError(f"mariadb-install-db failed:\n{init.stdout[-1500:]}{init.stderr[-1500:]}")
        port = free_port()
        args = [
            server, "--no-defaults", f"--datadir={datadir}", f"--socket={sock}", f"--port={port}",
            "--bind-address=127.0.0.1", f"--user={user}", f"--log-error={err}",
            f"--pid-file={root / 'mysqld.pid'}", "--innodb-buffer-pool-size=256M",
            "--max-connections=500", "--skip-name-resolve", *CDC_SERVER_ARGS, *self.extra_args,
        ]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            shutil.rmtree(root, ignore_errors=True)

        admin = Endpoint("127.0.0.1", port, "root", "")
        try:
            _wait_ready(admin, proc, err, timeout)
            if self.cdc_user is not None:
                cdc = Endpoint(admin.host, port, self.cdc_user.user, self.cdc_user.password)
            else:
                cdc = _create_cdc_user(admin, f"cdc-{uuid.uuid4().hex[:16]}")
        except BaseException:
            stop()
            raise
        log.info("started mariadbd on 127.0.0.1:%d (datadir %s)", port, datadir)
        return Sandbox(admin=admin, cdc=cdc, flavor="mariadb", _stop=stop, pid=proc.pid)


class ContainerSandbox:
    """MySQL 8 in Docker through testcontainers (only where a Docker engine answers)."""

    IMAGE = "mysql:8.4"

    def start(self, timeout: float = 120.0) -> Sandbox:
        from testcontainers.mysql import MySqlContainer

        password = f"root-{uuid.uuid4().hex[:12]}"
        container = MySqlContainer(self.IMAGE, username="root", root_password=password, password=password)
        container.with_command(" ".join([
            "--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL", "--server-id=1", "--gtid-mode=ON",
            "--enforce-gtid-consistency=ON",
        ]))
        container.start()
        admin = Endpoint(container.get_container_host_ip(), int(container.get_exposed_port(3306)), "root", password)
        try:
            _wait_ready(admin, None, Path("/nonexistent"), timeout)
            cdc = _create_cdc_user(admin, f"cdc-{uuid.uuid4().hex[:16]}")
        except BaseException:
            container.stop()
            raise
        return Sandbox(admin=admin, cdc=cdc, flavor="mysql", _stop=container.stop)


def docker_available() -> bool:
    """True when the testcontainers package is installed and a Docker engine answers."""
    try:
        import testcontainers.mysql  # noqa: F401
    except ImportError:
        return False
    if not shutil.which("docker"):
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    return probe.returncode == 0


def start_sandbox(extra_args: list[str] | None = None) -> Sandbox:
    """Start the best available sandbox (``SPARK_CDC_SANDBOX`` = auto | mariadb | docker)."""
    choice = os.environ.get("SPARK_CDC_SANDBOX", "auto")
    if choice not in ("auto", "mariadb", "docker"):
        raise SandboxError(f"SPARK_CDC_SANDBOX={choice!r}: expected auto, mariadb or docker")
    if choice == "docker" or (choice == "auto" and not extra_args and docker_available()):
        return ContainerSandbox().start()
    return MariaDbSandbox(extra_args).start()


@contextlib.contextmanager
def sandbox(extra_args: list[str] | None = None) -> Iterator[Sandbox]:
    """Context manager around :func:`start_sandbox` that always stops the server."""
    box = start_sandbox(extra_args)
    try:
        yield box
    finally:
        box.stop()
