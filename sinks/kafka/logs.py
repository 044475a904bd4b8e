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
from typing import Any

from sinks.stream.logs import WINDOW_S, Repeats, repeats_logger

__all__ = ["CLIENT_LOGGING", "LOGGER_NAME", "WINDOW_S", "Repeats"]

LOGGER_NAME = "sinks.kafka.librdkafka"


def _logger() -> logging.Logger:
    return repeats_logger(LOGGER_NAME)


# librdkafka settings of every client the sink creates: errors only (librdkafka's level 3), to
# the logger above (a Producer hands them over in poll(), a Consumer in poll() or consume())
CLIENT_LOGGING: dict[str, Any] = {"log_level": 3, "logger": _logger()}
