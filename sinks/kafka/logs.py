"""librdkafka's log lines go through Python logging, once per minute per kind, as warnings.

Left alone, librdkafka writes straight to the process's stderr (``%3|1764070000.123|FAIL|
rdkafka#producer-1| ... Connect to ipv4#127.0.0.1:9092 failed: Connection refused``), bypassing the
job's log format and level, and repeats the line at every reconnect while a broker is down. The
sink already retries and, when the broker stays away, fails the batch with one error that names
``bootstrap_servers`` (sinks/kafka/sink.py); these lines are context for that, not errors of
their own. So every client the sink creates passes :data:`CLIENT_LOGGING`: its lines reach the
``sinks.kafka.librdkafka`` logger as warnings, and a line of the same shape (digits aside) is
shown once per :data:`WINDOW_S`, the next one saying how many were held back.

librdkafka never logs configuration values, so secrets in ``sink.producer`` stay out.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

LOGGER_NAME = "sinks.kafka.librdkafka"
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


def _logger() -> logging.Logger:
    log = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, Repeats) for f in log.filters):
        log.addFilter(Repeats())
    return log


# librdkafka settings of every client the sink creates: errors only (librdkafka's level 3), to
# the logger above (a Producer hands them over in poll(), a Consumer in poll() or consume())
CLIENT_LOGGING: dict[str, Any] = {"log_level": 3, "logger": _logger()}
