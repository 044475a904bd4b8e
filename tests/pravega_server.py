"""A real Pravega for the tests (one per session), and a plain reader of its streams.

The server is a :class:`cdc.app.sandbox.pravega.PravegaSandbox` (standalone, jars/pravega) started
on first use and stopped when the session ends. :func:`read_stream` reads a stream the way any
downstream consumer would (a reader group from the stream's head:
:func:`cdc.app.sandbox.pravega.read_events`), none of the sink's code.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from session_servers import SessionServer

from cdc.app.sandbox.pravega import PravegaSandbox, read_events, start_pravega_sandbox

_SERVER = SessionServer(start_pravega_sandbox)
shared_pravega = _SERVER.get  # the session's server, started on first use (also outside fixtures: SINK_KINDS)


@pytest.fixture(scope="session")
def pravega_server() -> Iterator[PravegaSandbox]:
    """A running standalone Pravega (controller, segment store, ZooKeeper) on free loopback ports;
    its tests are skipped where the Python client has no wheel (CPython 3.12+)."""
    pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for CPython 3.10 and 3.11 only")
    yield from _SERVER.serve()


def read_stream(controller_uri: str, scope: str, stream: str) -> list[bytes]:
    """Every event of ``stream``, segment by segment in order, by a reader group of its own."""
    return read_events(controller_uri, scope, stream)
