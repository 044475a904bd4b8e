"""Throwaway servers for trying spark-cdc and for its tests: ``python -m cdc sandbox <kind>``.

Each starts a real server from the machine's packages (no Docker, no system service) in a temp
folder on a free loopback port, prints how to reach it, and removes it on Ctrl-C; ``sandbox
pravega --durable DIR`` keeps its data in ``DIR`` instead (:mod:`cdc.app.sandbox.pravega_durable`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # each kind's module is imported when it starts (the CLI imports this package)
    from cdc.app.sandbox.kafka import KafkaSandbox
    from cdc.app.sandbox.mysql import Sandbox
    from cdc.app.sandbox.postgres import PostgresSandbox


def mysql_lines(box: Sandbox) -> list[str]:
    """How to reach a MariaDB sandbox: its ``export`` line sets what the getting-started pages use."""
    c = box.cdc
    return [f"{box.flavor} on {c.host}:{c.port} (binlog ROW/FULL, GTIDs, server_id 1)",
            f"  admin: user {box.admin.user!r}, empty password",
            f"  CDC user: {c.user!r} (SELECT, REPLICATION SLAVE, REPLICATION CLIENT)",
            f"  export MYSQL_HOST={c.host} MYSQL_PORT={c.port} MYSQL_PASSWORD='{c.password}'",
            f"  mariadb -h {c.host} -P {c.port} -u root"]


def postgres_lines(box: PostgresSandbox) -> list[str]:
    """How to reach a PostgreSQL sandbox: the job's variables (``PG_*``) and psql's (``PG*``, the
    superuser), as the getting-started pages use them."""
    a, c = box.admin, box.cdc
    return [f"PostgreSQL {box.version} on {c.host}:{c.port} (wal_level=logical)",
            f"  admin: superuser {a.user!r}, password {a.password!r}",
            f"  CDC role: {c.user!r} (LOGIN REPLICATION; grant SELECT on your tables)",
            f"  export PG_HOST={c.host} PG_PORT={c.port} PG_PASSWORD='{c.password}'",
            f"  export PGHOST={a.host} PGPORT={a.port} PGUSER={a.user} PGPASSWORD='{a.password}' PGDATABASE=postgres"]


def kafka_lines(box: KafkaSandbox) -> list[str]:
    """How to reach a Kafka sandbox: its ``export`` line sets what the getting-started pages use."""
    return [f"Apache Kafka (KRaft, one broker+controller) on {box.bootstrap_servers}",
            f"  export KAFKA_BOOTSTRAP={box.bootstrap_servers}",
            f"  logs: {box.log_file}"]


def _mysql() -> tuple[list[str], Callable[[], None]]:
    from cdc.app.sandbox.mysql import start_sandbox

    box = start_sandbox()
    return mysql_lines(box), box.stop


def _kafka() -> tuple[list[str], Callable[[], None]]:
    from cdc.app.sandbox.kafka import start_kafka_sandbox

    box = start_kafka_sandbox()
    return kafka_lines(box), box.stop


def _pulsar() -> tuple[list[str], Callable[[], None]]:
    from cdc.app.sandbox.pulsar import start_pulsar_sandbox

    box = start_pulsar_sandbox()
    lines = [f"Apache Pulsar (standalone: broker + bookie, deduplication on) at {box.service_url}",
             f"  admin API: {box.admin_url}",
             f"  sink: {{type: pulsar, service_url: '{box.service_url}', admin_url: '{box.admin_url}'}}",
             f"  logs: {box.log_file}"]
    return lines, box.stop


def _pravega() -> tuple[list[str], Callable[[], None]]:
    from cdc.app.sandbox.pravega import start_pravega_sandbox

    box = start_pravega_sandbox()
    lines = [f"Pravega (standalone: controller, segment store, ZooKeeper; data in memory) at {box.controller_uri}",
             f"  export PRAVEGA_CONTROLLER={box.controller_uri}",
             f"  sink: {{type: pravega, controller_uri: '{box.controller_uri}'}}",
             f"  logs: {box.log_file}"]
    return lines, box.stop


def _pravega_durable(folder: str) -> tuple[list[str], Callable[[], None]]:
    from cdc.app.sandbox.pravega_durable import start_durable_pravega_sandbox

    box = start_durable_pravega_sandbox(folder)
    lines = [f"Pravega (ZooKeeper, a bookie, the controller, the segment store; data in {box.dir}) at "
             f"{box.controller_uri}",
             f"  export PRAVEGA_CONTROLLER={box.controller_uri}",
             f"  sink: {{type: pravega, controller_uri: '{box.controller_uri}'}}",
             f"  logs: {box.dir}/<part>/stdout.log"]
    return lines, box.stop


def _postgres() -> tuple[list[str], Callable[[], None]]:
    from cdc.app.sandbox.postgres import start_postgres

    box = start_postgres()
    return postgres_lines(box), box.stop


SANDBOXES: dict[str, Callable[[], tuple[list[str], Callable[[], None]]]] = {
    "mysql": _mysql, "kafka": _kafka, "postgres": _postgres, "pulsar": _pulsar,
    "pravega": _pravega}


def run_sandbox(kind: str, stop: threading.Event | None = None, durable: str | None = None) -> int:
    """Start a sandbox, print how to reach it, wait for Ctrl-C/SIGTERM (or ``stop``), remove it.

    Args:
        kind: a key of :data:`SANDBOXES`.
        stop: set to stop it (Ctrl-C and SIGTERM set it too).
        durable: ``pravega`` only: a folder whose data outlives the sandbox (kept on stop, found
            again by the next start with it; :mod:`cdc.app.sandbox.pravega_durable`).

    Returns:
        An exit code: 0 after a clean stop.
    """
    lines, shutdown = _pravega_durable(durable) if durable is not None else SANDBOXES[kind]()
    stop = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            previous[s] = signal.signal(s, lambda *_: stop.set())
    try:
        print("\n".join(lines), flush=True)
        print("running; Ctrl-C stops it and " + ("keeps its data" if durable else "removes its data"), flush=True)
        stop.wait()
    finally:
        shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
