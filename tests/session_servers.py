"""One server of a kind per test session, started on first use: a fixture's, or a module's that
needs it outside fixtures (tests/test_sink_contract.py's SINK_KINDS), stopped when the session
ends (tests/kafka_broker.py, tests/pulsar_broker.py)."""

from __future__ import annotations

import atexit
import time
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar


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
        self.gets = 0  # calls of get(): a test that made one used the server
        self.last_used = time.monotonic()  # when a test last used it (get() and callers set it)

    def get(self) -> S:
        """The running server, started now if it is not yet."""
        self.gets += 1
        self.last_used = time.monotonic()
        if self._box is None:
            self._box = self._start()
            atexit.register(self._box.stop)
        return self._box

    def stop(self) -> None:
        """Stop the server now; the next get() starts another."""
        if self._box is not None:
            atexit.unregister(self._box.stop)
            self._box.stop()
            self._box = None

    def running(self) -> S | None:
        """The server if it has been started (None: not yet, or stopped)."""
        return self._box

    def serve(self) -> Iterator[S]:
        """A session fixture's body: the server, stopped after the session."""
        box = self.get()
        yield box
        box.stop()
        self._box = None
