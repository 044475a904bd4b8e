"""The context headers Debezium 3.x puts on every record (``extended.headers.enabled``, on by
default), as Kafka Connect's SimpleHeaderConverter writes them: plain UTF-8 strings.

``__debezium.context.connectorLogicalName`` (``topic.prefix``, our ``source.name``),
``__debezium.context.taskId`` (``0``: one task, as a single-task connector has),
``__debezium.context.connectorName`` (``mysql``, ``mariadb``, ``postgresql``) and
``__debezium.context.runId``, an id drawn at each start of the connector (for us: of the job).
They follow a primary-key update's ``__debezium.newkey``/``__debezium.oldkey``, as in Debezium.
"""

from __future__ import annotations

import os
import time
import uuid

LOGICAL_NAME = "__debezium.context.connectorLogicalName"
TASK_ID = "__debezium.context.taskId"
CONNECTOR_NAME = "__debezium.context.connectorName"
RUN_ID = "__debezium.context.runId"

Headers = tuple[tuple[str, bytes], ...]


def new_run_id() -> str:
    """A fresh run id: a time-ordered UUID (version 7, RFC 9562), the kind Debezium 3.5 draws."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62 | rand & (1 << 62) - 1
    return str(uuid.UUID(int=value))


def context_headers(logical_name: str, connector: str, run_id: str) -> Headers:
    """The four context headers of a record, in Debezium's order."""
    return ((LOGICAL_NAME, logical_name.encode()), (TASK_ID, b"0"), (CONNECTOR_NAME, connector.encode()),
            (RUN_ID, run_id.encode()))
