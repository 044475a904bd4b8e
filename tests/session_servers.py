"""One server of a kind per test session, started on first use: a fixture's, or a module's that
needs it outside fixtures (tests/test_sink_contract.py's SINK_KINDS), stopped when the session
ends (tests/kafka_broker.py, tests/pulsar_broker.py)."""

from __future__ import annotations

import atexit
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from cdc.app.sandbox.jvm import LIGHT_SERVER_JVM_OPTIONS

# The session's stream-store servers serve small tests: they start light (C1 only), as the demo's do.
SERVER_JVM_OPTIONS = LIGHT_SERVER_JVM_OPTIONS


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


class SessionServer(Generic[S]):
    """The session's server of one kind.

    Args:
        start: starts one (and stops what it started when the start fails).
    """

    def __init__(self, start: Callable[[], S]) -> None:
        self._start = start
        self._box: S | None = None

    def get(self) -> S:
        """The running server, started now if it is not yet."""
        if self._box is None:
            self._box = self._start()
            atexit.register(self._box.stop)
        return self._box

    def running(self) -> S | None:
        """The server if it has been started (None: not yet, or stopped)."""
        return self._box

    def serve(self) -> Iterator[S]:
        """A session fixture's body: the server, stopped after the session."""
        box = self.get()
        yield box
        box.stop()
        self._box = None
