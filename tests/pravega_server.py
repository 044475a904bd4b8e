"""A real Pravega for the tests (one per session), and a plain reader of its streams.

The server is a :class:`cdc.app.sandbox.pravega.PravegaSandbox` (standalone, jars/pravega) started
on first use and stopped when the session ends. :func:`read_stream` reads a stream the way any
downstream consumer would (a reader group from the stream's head:
:func:`cdc.app.sandbox.pravega.read_events`), none of the sink's code.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from session_servers import SessionServer

from cdc.app.sandbox.jvm import LIGHT_SERVER_JVM_OPTIONS
from cdc.app.sandbox.pravega import PravegaSandbox, read_events, start_pravega_sandbox

_SERVER = SessionServer(functools.partial(start_pravega_sandbox, jvm_options=LIGHT_SERVER_JVM_OPTIONS))
shared_pravega = _SERVER.get  # the session's server, started on first use (also outside fixtures: SINK_KINDS)


@pytest.fixture
def pravega_server() -> PravegaSandbox:
    """The session's running standalone Pravega (controller, segment store, ZooKeeper) on free
    loopback ports, started on first use and again after it was stopped idle (:data:`IDLE_STOP_S`);
    its tests are skipped where the Python client has no wheel (CPython 3.12+). It stops when the
    session's process exits."""
    pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for CPython 3.10 and 3.11 only")
    return _SERVER.get()


# An idle standalone server uses about 4 CPU s a minute, and a start about 7 (C1 only, measured
# 2026-12-07): a worker's server that no test has used for this long is stopped, and the next test
# that needs one starts another (on new ports: no test reads another's streams).
IDLE_STOP_S = 180.0


# An idle standalone server uses about 0.05 of a core (3-5 CPU s a minute, measured 2026-12-07).
# In a full run of the suite that day, one worker's server instead kept 0.7-0.9 of a core busy
# for the rest of the session after the SIGKILL suites had written to it (its segment store's
# table-segment indexing, in jstack), taking that from every test that followed on 2 cores. Until
# that is understood, a test that does not use Pravega and sees the server that busy restarts it
# (same ports; the standalone server keeps nothing across a restart, and no test reads another's
# streams).
IDLE_CORES = 0.3


def _cpu_seconds(pid: int) -> float:
    """The process's user and system CPU seconds so far (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(autouse=True)
def _mind_the_session_pravega(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that did not use the session's Pravega: stop it when idle for
    :data:`IDLE_STOP_S`, restart it when it spins (:data:`IDLE_CORES`)."""
    gets, box = _SERVER.gets, _SERVER.running()
    pid = box.proc.pid if box is not None and box.proc is not None else None
    before, started = None, time.monotonic()
    if pid is not None:
        with contextlib.suppress(OSError):
            before = _cpu_seconds(pid)
    yield
    now = time.monotonic()
    if _SERVER.gets != gets:
        _SERVER.last_used = now
        return
    if box is None or box is not _SERVER.running():
        return
    if now - _SERVER.last_used > IDLE_STOP_S:
        _SERVER.stop()
        return
    elapsed = now - started
    if pid is None or before is None or elapsed <= 5:
        return
    with contextlib.suppress(OSError):
        cores = (_cpu_seconds(pid) - before) / elapsed
        if cores > IDLE_CORES:
            warnings.warn(f"the session's Pravega used {cores:.2f} of a core while {request.node.nodeid} "
                          "did not use it: restarted", stacklevel=1)
            box.restart()


def read_stream(controller_uri: str, scope: str, stream: str, idle_slices: int = 1) -> list[bytes]:
    """Every event of ``stream``, segment by segment in order, by a reader group of its own (ended
    by ``idle_slices`` empty slices in a row)."""
    return read_events(controller_uri, scope, stream, idle_slices)
