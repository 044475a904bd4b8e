"""Throwaway servers for trying spark-cdc and for its tests: ``python -m cdc sandbox <kind>``.

Each starts a real server from the machine's packages (no Docker, no system service) in a temp
folder on a free loopback port, prints how to reach it, and removes it on Ctrl-C.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from cdc.app.sandbox.mysql import Sandbox, start_sandbox


def _mysql() -> tuple[list[str], Callable[[], None]]:
    box: Sandbox = start_sandbox()
    c = box.cdc
    lines = [f"{box.flavor} on {c.host}:{c.port} (binlog ROW/FULL, GTIDs, server_id 1)",
             f"  admin: user {box.admin.user!r}, empty password",
             f"  CDC user: {c.user!r} (SELECT, REPLICATION SLAVE, REPLICATION CLIENT)",
             f"  export MYSQL_HOST={c.host} MYSQL_PORT={c.port} MYSQL_PASSWORD='{c.password}'",
             f"  mariadb -h {c.host} -P {c.port} -u root"]
    return lines, box.stop


SANDBOXES: dict[str, Callable[[], tuple[list[str], Callable[[], None]]]] = {"mysql": _mysql}


def run_sandbox(kind: str, stop: threading.Event | None = None) -> int:
    """Start a sandbox, print how to reach it, wait for Ctrl-C/SIGTERM (or ``stop``), remove it.

    Returns:
        An exit code: 0 after a clean stop.
    """
    lines, shutdown = SANDBOXES[kind]()
    stop = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            previous[s] = signal.signal(s, lambda *_: stop.set())
    try:
        print("\n".join(lines), flush=True)
        print("running; Ctrl-C stops it and removes its data", flush=True)
        stop.wait()
    finally:
        shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
