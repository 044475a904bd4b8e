"""Find the binlog position of a point in time (``startup_mode: timestamp``).

Binlog events carry their commit time in whole seconds. The position returned is the start of
the first transaction whose time is at or after the requested instant (rounded down to the
second), so a transaction committed in that same second is included. Runs on the driver, once,
when a job starts with this mode.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent

from binlog.mysql.connection import Endpoint
from binlog.mysql.positions import BinlogOffset
from binlog.mysql.server import binary_logs, current_offset

log = logging.getLogger(__name__)

_TRANSACTION_STARTS = (GtidEvent, MariadbGtidEvent)


def offset_at(settings: Endpoint, server_id: int, timestamp_ms: int) -> BinlogOffset:
    """The first transaction boundary at or after ``timestamp_ms`` (epoch ms, UTC).

    Returns the current position when nothing that late was written yet, and the first
    binlog's start when every retained binlog is later (older changes are purged: say so).
    """
    with contextlib.closing(settings.connect()) as conn:
        files = binary_logs(conn)
        end = current_offset(conn)
    target_s = timestamp_ms // 1000
    for i in range(len(files) - 1, -1, -1):
        first = _first_event_time(settings, server_id, files[i])
        if (first is not None and first <= target_s) or i == 0:
            if i == 0 and first is not None and first > target_s:
                log.warning("the oldest retained binlog %s starts after the requested time; "
                            "changes before it were purged", files[0])
            found = _scan(settings, server_id, BinlogOffset(files[i], 4), target_s, end)
            return found or end
    return end


def _stream(settings: Endpoint, server_id: int, file: str, events: list[Any]) -> BinLogStreamReader:
    return BinLogStreamReader(
        connection_settings={"host": settings.host, "port": settings.port, "user": settings.user,
                             "password": settings.password, "charset": "utf8mb4",
                             "connect_timeout": settings.connect_timeout, **settings.tls_kwargs()},
        server_id=server_id, resume_stream=True, blocking=False, log_file=file, log_pos=4,
        only_events=events, enable_logging=False,
    )


def _first_event_time(settings: Endpoint, server_id: int, file: str) -> int | None:
    """The time of the first real event of a binlog file (None: no event)."""
    stream = _stream(settings, server_id, file, [*_TRANSACTION_STARTS, QueryEvent, RotateEvent])
    try:
        for ev in stream:
            if ev.packet.log_pos != 0 and ev.timestamp:
                return int(ev.timestamp)
        return None
    finally:
        stream.close()


def _scan(settings: Endpoint, server_id: int, start: BinlogOffset, target_s: int,
          end: BinlogOffset) -> BinlogOffset | None:
    """Walk from ``start`` to the first transaction start at or after ``target_s``."""
    stream = _stream(settings, server_id, start.file, [*_TRANSACTION_STARTS, QueryEvent, RotateEvent])
    try:
        for ev in stream:
            if ev.packet.log_pos == 0:  # artificial rotate on connect
                continue
            here = BinlogOffset(stream.log_file, ev.packet.log_pos - ev.packet.event_size)
            if not here.is_before(end):
                return None
            begins = isinstance(ev, _TRANSACTION_STARTS) or (isinstance(ev, QueryEvent) and ev.query == "BEGIN")
            if begins and ev.timestamp >= target_s:
                return here
        return None
    finally:
        stream.close()
