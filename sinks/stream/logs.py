"""Client log lines through Python logging, each kind once per window, as warnings.

A store's native client (librdkafka, Pulsar's C++ client) logs on its own threads, and while a
broker is away it repeats the same line at every reconnect. The sink already retries and, when the
broker stays away, fails the batch with one error that names the setting to check; these lines
are context for that, not errors of their own. :class:`Repeats` shows a line whose shape (digits
aside) was not shown in the last :data:`WINDOW_S` seconds, and says how many it held back.
"""

from __future__ import annotations

import logging
import re
import threading
import time

WINDOW_S = 60.0
_MAX_SHAPES = 1000
_DIGITS = re.compile(r"\d+")


class Repeats(logging.Filter):
    """Passes a line whose shape was not shown in the last ``window_s`` seconds, as a warning."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        super().__init__()
        self.window_s = window_s
        self._shown: dict[str, tuple[float, int]] = {}  # shape -> (when shown, held back since)
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget what was shown: the next line of every kind passes."""
        with self._lock:
            self._shown.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        shape = _DIGITS.sub("#", text)
        now = time.monotonic()
        with self._lock:
            shown, held = self._shown.get(shape, (None, 0))
            if shown is not None and now - shown < self.window_s:
                self._shown[shape] = (shown, held + 1)
                return False
            if len(self._shown) >= _MAX_SHAPES:
                self._shown.clear()
            self._shown[shape] = (now, 0)
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = ("%s (%d more like it held back)", (text, held)) if held else ("%s", (text,))
        return True


def repeats_logger(name: str) -> logging.Logger:
    """The logger ``name`` with a :class:`Repeats` filter (added once)."""
    log = logging.getLogger(name)
    if not any(isinstance(f, Repeats) for f in log.filters):
        log.addFilter(Repeats())
    return log
