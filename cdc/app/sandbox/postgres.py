"""A throwaway PostgreSQL configured for CDC, for tests, demos and benchmarks.

:class:`PostgresSandbox` runs Debian's PostgreSQL binaries (``/usr/lib/postgresql/<ver>/bin``)
with ``initdb`` in a temporary folder and ``postgres`` on a free loopback port, with
``wal_level=logical`` and room for replication slots. No Docker, no system service.
``initdb`` and ``postgres`` refuse to run as root: as root, the sandbox runs them as the
``postgres`` user the Debian package creates (else ``nobody``) in a folder that user owns.

It creates a superuser ``admin`` (password auth over TCP) and a least-privilege CDC role:
``LOGIN REPLICATION``, plus ``SELECT`` on the tables of every database it creates.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from cdc.app.sandbox.mysql import SandboxError, free_port

log = logging.getLogger(__name__)

ADMIN_USER = "admin"
CDC_USER = "cdc"

# Server settings every sandbox gets (the CDC ones, and speed for throwaway data).
SERVER_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "64",
    "max_wal_senders": "16",
    "max_connections": "200",
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "logging_collector": "off",
}


@dataclass(frozen=True)
class PgEndpoint:
    """Where and as whom to connect."""

    host: str
    port: int
    user: str
    password: str

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        """An autocommit psycopg connection (driver or executor)."""
        return psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               dbname=dbname, autocommit=True, connect_timeout=10, **kwargs)


@dataclass
class PostgresSandbox:
    """A running server: ``admin`` is a superuser, ``cdc`` has LOGIN REPLICATION (+ SELECT per
    database made by :meth:`create_database`)."""

    admin: PgEndpoint
    cdc: PgEndpoint
    version: str
    root: Path
    _stop: Any = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self._stop is not None:
            self._stop()
            self._stop = None

    def create_database(self, name: str | None = None, publication: str | None = "spark_cdc") -> str:
        """A fresh database (unique name unless given) whose ``public`` tables the CDC role may
        SELECT (now and when created later by admin), with a ``FOR ALL TABLES`` publication
        (None: no publication)."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with contextlib.closing(self.admin.connect()) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with contextlib.closing(self.admin.connect(name)) as conn:
            conn.execute(f'GRANT USAGE ON SCHEMA public TO "{self.cdc.user}"')
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{self.cdc.user}"')
            conn.execute(f'ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO "{self.cdc.user}"')
            if publication:
                conn.execute(f'CREATE PUBLICATION "{publication}" FOR ALL TABLES')
        return name

    def create_schema(self, database: str, schema: str) -> None:
        """A schema in ``database`` whose tables the CDC role may SELECT (now and later)."""
        with contextlib.closing(self.admin.connect(database)) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{self.cdc.user}"')
            conn.execute(f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" GRANT SELECT ON TABLES TO "{self.cdc.user}"')

    def drop_database(self, name: str) -> None:
        """Drop a database and the replication slots on it."""
        with contextlib.closing(self.admin.connect()) as conn:
            for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                                        (name,)).fetchall():
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def binaries() -> Path:
    """The folder holding ``initdb`` and ``postgres`` (the newest under /usr/lib/postgresql).

    Raises:
        SandboxError: PostgreSQL is not installed.
    """
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("postgres")
    if which and shutil.which("initdb"):
        return Path(os.path.realpath(which)).parent
    raise SandboxError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: install "
                       "Debian's postgresql package (`make setup` does it: apt-get install postgresql)")


def _run_as() -> list[str]:
    """The command prefix that drops root (initdb and postgres refuse to run as root)."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return ["runuser", "-u", user, "--"]
    raise SandboxError("running as root and neither a 'postgres' nor a 'nobody' user exists: "
                       "create an unprivileged user for the sandbox server")


def _owner() -> tuple[int, int] | None:
    prefix = _run_as()
    if not prefix:
        return None
    entry = pwd.getpwnam(prefix[2])
    return entry.pw_uid, entry.pw_gid


@dataclass(frozen=True)
class ServerTls:
    """PEM files for a sandbox server's TLS: the CA it trusts, its certificate and key."""

    ca: Path
    cert: Path
    key: Path


def start_postgres(timeout: float = 60.0, base_dir: str | None = None,
                   settings: dict[str, str] | None = None, tls: ServerTls | None = None,
                   hba_lines: list[str] | None = None) -> PostgresSandbox:
    """Start a PostgreSQL sandbox (retried on a new port if another process took it first).
    ``settings`` override :data:`SERVER_SETTINGS` (e.g. a server that is not configured for CDC);
    ``tls`` turns ``ssl`` on with those files (copied into the server's folder); ``hba_lines`` go
    before initdb's pg_hba.conf rules (the first matching line wins).

    Raises:
        SandboxError: the server could not be started (the message says what to install).
    """
    for attempt in range(1, 4):
        try:
            return _start_once(timeout, base_dir, settings or {}, tls, hba_lines or [])
        except SandboxError as exc:
            if attempt == 3:
                raise
            log.warning("postgres start attempt %d failed, retrying: %s", attempt, str(exc)[-300:])
    raise AssertionError("unreachable")


def _start_once(timeout: float, base_dir: str | None, overrides: dict[str, str], tls: ServerTls | None,
                hba_lines: list[str]) -> PostgresSandbox:
    bindir = binaries()
    root = Path(tempfile.mkdtemp(prefix="spark-cdc-postgres-", dir=base_dir))
    owner = _owner()
    if owner is not None:
        os.chown(root, *owner)
    prefix = _run_as()
    data, sockets, log_file = root / "data", root / "sock", root / "server.log"
    password = f"admin-{uuid.uuid4().hex[:12]}"
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    sockets.mkdir()
    if owner is not None:
        for p in (pwfile, sockets):
            os.chown(p, *owner)
    init = subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", ADMIN_USER, f"--pwfile={pwfile}",
         "--auth-local=trust", "--auth-host=scram-sha-256", "--locale=C", "--encoding=UTF8", "--no-sync"],
        capture_output=True, text=True, check=False)
    pwfile.unlink()
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise SandboxError(f"initdb failed:\n{init.stdout[-1500:]}{init.stderr[-1500:]}")
    if hba_lines:
        hba = data / "pg_hba.conf"
        hba.write_text("\n".join(hba_lines) + "\n" + hba.read_text())
    tls_settings = _install_tls(tls, root / "tls", owner) if tls is not None else {}
    port = free_port()
    settings = {**SERVER_SETTINGS, **tls_settings, **overrides, "port": str(port),
                "unix_socket_directories": str(sockets)}
    args = [*prefix, str(bindir / "postgres"), "-D", str(data)]
    for key, value in settings.items():
        args += ["-c", f"{key}={value}"]
    out = open(log_file, "ab")  # noqa: SIM115 - the server writes to it until stop()
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop() -> None:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"],
                       capture_output=True, check=False)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
        shutil.rmtree(root, ignore_errors=True)

    admin = PgEndpoint("127.0.0.1", port, ADMIN_USER, password)
    try:
        version = _wait_ready(admin, proc, log_file, timeout)
        cdc = PgEndpoint("127.0.0.1", port, CDC_USER, f"cdc-{uuid.uuid4().hex[:16]}")
        with contextlib.closing(admin.connect()) as conn:
            conn.execute(f"CREATE ROLE \"{CDC_USER}\" LOGIN REPLICATION PASSWORD '{cdc.password}'")
    except BaseException:
        stop()
        raise
    log.info("started postgres %s on 127.0.0.1:%d (data %s)", version, port, data)
    return PostgresSandbox(admin=admin, cdc=cdc, version=version, root=root, _stop=stop)


def _install_tls(tls: ServerTls, folder: Path, owner: tuple[int, int] | None) -> dict[str, str]:
    """Copy the server's TLS files where it may read them (its key: owner-only) and return the settings."""
    folder.mkdir()
    copies = {name: folder / name for name in ("ca.pem", "server.pem", "server.key")}
    for source, target in zip((tls.ca, tls.cert, tls.key), copies.values(), strict=True):
        shutil.copyfile(source, target)
        target.chmod(0o600)
    for path in (folder, *copies.values()):
        if owner is not None:
            os.chown(path, *owner)
    return {"ssl": "on", "ssl_ca_file": str(copies["ca.pem"]), "ssl_cert_file": str(copies["server.pem"]),
            "ssl_key_file": str(copies["server.key"])}


def _wait_ready(admin: PgEndpoint, proc: subprocess.Popen[bytes], log_file: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
            raise SandboxError(f"postgres exited with code {proc.returncode} during start-up:\n{tail}")
        try:
            with contextlib.closing(admin.connect()) as conn:
                row = conn.execute("SHOW server_version").fetchone()
                return str(row[0]) if row else "?"
        except psycopg.OperationalError as exc:
            last = exc
            time.sleep(0.1)
    raise SandboxError(f"postgres on port {admin.port} not ready after {timeout:.0f}s: {last}")
