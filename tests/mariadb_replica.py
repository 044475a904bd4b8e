"""A real MariaDB primary and replica, for GTID failover tests (tests/test_gtid_failover.py).

Both are sandboxes (cdc/app/sandbox/mysql.py) with the CDC binlog settings, GTID strict mode and
``log_slave_updates``; the replica follows the primary by GTID (``MASTER_USE_GTID=slave_pos``) and
gets the CDC user through replication, so the same credentials work on both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cdc.app.sandbox.mysql import MariaDbSandbox, Sandbox

PAIR_ARGS = ["--gtid-strict-mode=ON", "--log-slave-updates=ON", "--gtid-domain-id=0"]


def _scalar(box: Sandbox, sql: str) -> Any:
    with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row[0] if row else None


def gtid_binlog_pos(box: Sandbox) -> str:
    return str(_scalar(box, "SELECT @@GLOBAL.gtid_binlog_pos") or "")


@dataclass
class ReplicaPair:
    """A primary and its replica; ``kill_primary`` SIGKILLs the primary (no clean shutdown)."""

    primary: Sandbox
    replica: Sandbox

    def wait_caught_up(self, timeout: float = 30.0, applied: str = "gtid_binlog_pos") -> str:
        """Wait until the replica has applied everything the primary logged; its GTID position
        (``applied``: a replica without log_slave_updates logs nothing, its ``gtid_slave_pos`` moves).

        Raises:
            AssertionError: not caught up in time, or replication stopped with an error.
        """
        want = gtid_binlog_pos(self.primary)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            have = str(_scalar(self.replica, f"SELECT @@GLOBAL.{applied}") or "")
            if have == want:
                return have
            status = self.slave_status()
            if status.get("Last_SQL_Error") or status.get("Last_IO_Error"):
                raise AssertionError(f"replication failed: {status}")
            time.sleep(0.05)
        raise AssertionError(f"replica's {applied} at {have!r}, primary at {want!r}")

    def slave_status(self) -> dict[str, Any]:
        with contextlib.closing(self.replica.admin.connect()) as conn, conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            row = cur.fetchone()
            names = [d[0] for d in cur.description or ()]
        return dict(zip(names, row, strict=True)) if row else {}

    def kill_primary(self) -> None:
        """SIGKILL the primary, then promote the replica (stop replicating, forget the primary)."""
        assert self.primary.pid is not None
        os.kill(self.primary.pid, signal.SIGKILL)
        with contextlib.closing(self.replica.admin.connect()) as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()


def start_pair(replica_args: tuple[str, ...] = ()) -> ReplicaPair:
    """Start a primary (server id 1) and a replica (server id 2, with ``replica_args`` last)
    following it by GTID."""
    primary = MariaDbSandbox(extra_args=[*PAIR_ARGS, "--server-id=1"]).start()
    try:
        replica = MariaDbSandbox(extra_args=[*PAIR_ARGS, "--server-id=2", "--read-only=OFF", *replica_args],
                                 cdc_user=primary.cdc).start()
    except BaseException:
        primary.stop()
        raise
    pair = ReplicaPair(primary, replica)
    try:
        with contextlib.closing(replica.admin.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.admin.port}, "
                        "MASTER_USER=%s, MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, "
                        "MASTER_CONNECT_RETRY=1", (primary.cdc.user, primary.cdc.password))
            cur.execute("START SLAVE")
        pair.wait_caught_up(applied="gtid_slave_pos")  # logged by the replica too unless log_slave_updates=OFF
    except BaseException:
        pair.stop()
        raise
    return pair


@contextlib.contextmanager
def replica_pair(replica_args: tuple[str, ...] = ()) -> Iterator[ReplicaPair]:
    pair = start_pair(replica_args)
    try:
        yield pair
    finally:
        pair.stop()
