"""The control streams' byte-stream calls, in a helper process whose answers have a deadline.

Driver side. The Pravega Python client holds the GIL while a call waits, and a byte stream's
write or flush to a segment store that went away waits for ever (seen with ``pravega`` 0.3.8: no
answer after 400 s, where the controller's calls give up after about 60 s and a transaction's
commit after 120 s). A thread cannot time such a call out, so :class:`ControlStreams` runs the
byte-stream calls in a process of their own (``python -m sinks.pravega.control``: a fork would
not have the client's threads, and multiprocessing's spawn would import the driver's main
script again) and waits for each answer at most ``operation_timeout_s``; one that comes too late
kills the helper and raises :class:`ControlTimeout`. The helper exits when its pipe closes (the
driver died).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from sinks.pravega.client import newest_record, stream_manager
from sinks.pravega.config import PravegaSinkConfig


class ControlTimeout(Exception):
    """The helper did not answer in time (the segment store or the controller is gone)."""


class ControlStreams:
    """The job's control byte streams, served by one helper process (driver side).

    Args:
        config: the sink's config (its controller, scope, auth and TLS; pickled to the helper).
    """

    def __init__(self, config: PravegaSinkConfig) -> None:
        self.timeout_s = config.operation_timeout_s
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "sinks.pravega.control"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.requests = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.answers = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.requests.send(config)

    def newest_record(self, stream: str, job_id: str) -> dict[str, Any] | None:
        """The newest record of ``job_id`` in ``stream`` (None: none)."""
        result: dict[str, Any] | None = self._ask("newest", stream, job_id)
        return result

    def append(self, stream: str, line: bytes) -> None:
        """Append ``line`` to ``stream`` (one atomic append) and flush it."""
        self._ask("append", stream, line)

    def _ask(self, op: str, *args: Any) -> Any:
        try:
            self.requests.send((op, args))
            answered = self.answers.poll(self.timeout_s)
        except (OSError, EOFError) as exc:
            self.close()
            raise ControlTimeout(f"the control stream's helper is gone ({exc})") from None
        if not answered:
            self.close()
            raise ControlTimeout(f"no answer from Pravega in operation_timeout_s={self.timeout_s:g} s "
                                 f"({op} on the control stream {args[0]})")
        try:
            ok, value = self.answers.recv()
        except (OSError, EOFError) as exc:
            self.close()
            raise ControlTimeout(f"the control stream's helper is gone ({exc})") from None
        if not ok:
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        """Stop the helper (never raises)."""
        for conn in (self.requests, self.answers):
            with contextlib.suppress(Exception):
                conn.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)


def _serve(requests: Connection, answers: Connection) -> None:
    """The helper's loop: the config first, then ``(op, args)`` requests answered with
    ``(ok, value)``, until the pipe closes."""
    try:
        config: PravegaSinkConfig = requests.recv()
    except (EOFError, OSError):
        return
    manager = stream_manager(config)
    streams: dict[str, Any] = {}
    while True:
        try:
            op, args = requests.recv()
        except (EOFError, OSError):
            return
        try:
            stream = streams.get(args[0])
            if stream is None:
                stream = streams[args[0]] = manager.create_byte_stream(config.scope, args[0])
            if op == "newest":
                value = newest_record(stream, args[1])
            else:
                stream.write(args[1])
                stream.flush()
                value = None
            answers.send((True, value))
        except Exception as exc:
            answers.send((False, f"{op} on {args[0]}: {exc}"))


if __name__ == "__main__":  # the helper: requests on stdin, answers on the original stdout
    _answers = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # anything else printed goes to stderr, not into the answers
    _serve(Connection(os.dup(0), writable=False), _answers)
