"""One running job per checkpoint: ``<state>/owner.json`` names the job that holds it.

Two drivers on one checkpoint would both plan batch N, write each other's offsets and stage the
same chunks. So a run records its host, pid and a heartbeat in ``owner.json`` before it writes
anything else, refreshes the heartbeat from a background thread while it runs, and deletes the
file when it ends. A second run refuses to start while the holder is alive: on the same host,
its pid is running (and not a zombie; for this very process, one of its own runs holds it); on
another host, its heartbeat is fresher than :data:`STALE_S`. A holder that died (SIGKILL, a lost
node, a restarted container that reuses the pid) leaves a stale file that the next run takes
over, with a log line.

Runs on the driver. The file is written with the state directory's atomic rename; on object
stores two runs started in the same instant may both pass the check (best effort there).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from cdc.model.errors import CdcError, Terminal
from cdc.spark.state import StateStore

log = logging.getLogger(__name__)

OWNER_FILE = "owner.json"
BEAT_S = 10.0  # how often a running job refreshes its heartbeat
STALE_S = 60.0  # another host's job whose heartbeat is older than this is dead

_HELD: set[int] = set()  # started_ms of the holds this process has now (a pid may be reused)


class CheckpointInUse(CdcError, Terminal):
    """Another running job holds the checkpoint (the message names its host and pid)."""


@dataclass(frozen=True)
class Owner:
    """Who holds a checkpoint: host, pid, when it started and when it last said it was alive."""

    host: str
    pid: int
    started_ms: int
    beat_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started_ms": self.started_ms, "beat_ms": self.beat_ms}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Owner:
        return cls(str(d["host"]), int(d["pid"]), int(d["started_ms"]), int(d["beat_ms"]))

    def alive(self, now_ms: int | None = None) -> bool:
        """Whether the holder still runs (see the module doc)."""
        if self.host != socket.gethostname():
            now_ms = _now_ms() if now_ms is None else now_ms
            return now_ms - self.beat_ms <= STALE_S * 1000
        if self.pid == os.getpid():
            return self.started_ms in _HELD
        return pid_running(self.pid)


def pid_running(pid: int) -> bool:
    """A process with this pid runs on this host (a zombie, killed but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def read_owner(store: StateStore) -> Owner | None:
    """The recorded holder, or None (no file, or an unreadable one)."""
    if not store.exists(OWNER_FILE):
        return None
    try:
        return Owner.from_dict(store.read_json(OWNER_FILE))
    except (ValueError, KeyError, TypeError):
        return None


class CheckpointLock:
    """This run's hold on a checkpoint.

    Args:
        store: the job's state directory.
        checkpoint: the checkpoint's path (for messages).
    """

    def __init__(self, store: StateStore, checkpoint: str) -> None:
        self.store = store
        self.checkpoint = checkpoint
        now = _now_ms()
        self.owner = Owner(socket.gethostname(), os.getpid(), now, now)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        """Hold the checkpoint, or refuse when a live job holds it; writes nothing when refusing.

        Raises:
            CheckpointInUse: names the other job's host and pid, and the fix.
        """
        other = read_owner(self.store)
        if other is not None and other.alive():
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(other.started_ms / 1000))
            raise CheckpointInUse(
                f"checkpoint {self.checkpoint} is held by a running job on host {other.host}, pid "
                f"{other.pid} (started {since}): stop that job first, or give this job its own "
                "checkpoint", checkpoint=self.checkpoint, host=other.host, pid=other.pid)
        if other is not None:
            log.info("taking over checkpoint %s from a job that stopped without releasing it "
                     "(host %s, pid %d)", self.checkpoint, other.host, other.pid)
        self.store.write_json(OWNER_FILE, self.owner.to_dict())
        _HELD.add(self.owner.started_ms)
        self._thread = threading.Thread(target=self._beat, name="spark-cdc-checkpoint-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        """Refresh the heartbeat every :data:`BEAT_S` until released; never raises."""
        while not self._stop.wait(BEAT_S):
            self.owner = Owner(self.owner.host, self.owner.pid, self.owner.started_ms, _now_ms())
            try:
                self.store.write_json(OWNER_FILE, self.owner.to_dict())
            except Exception as exc:  # a missed heartbeat is retried; the job goes on
                log.warning("cannot refresh %s/%s: %s", self.store.root, OWNER_FILE, exc)

    def release(self) -> None:
        """Let the checkpoint go, if this run still holds it; never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _HELD.discard(self.owner.started_ms)
        try:
            current = read_owner(self.store)
            if current is not None and (current.host, current.pid, current.started_ms) == \
                    (self.owner.host, self.owner.pid, self.owner.started_ms):
                self.store.delete(OWNER_FILE)
        except Exception as exc:
            log.warning("cannot release %s/%s: %s", self.store.root, OWNER_FILE, exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
