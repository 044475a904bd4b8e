"""The internal change event: one row change, typed, with its binlog position.

Readers (``binlog/``, ``chunking/``) produce these; the Debezium format (``cdc/debezium.py``) and
the Spark source turn them into envelopes and Arrow rows. Values in ``before``/``after`` are
Python values of the column's Arrow type (see ``cdc/schema.py``): int, float, Decimal, str,
bytes, bool, datetime.date, datetime.datetime (naive for DATETIME, UTC-aware for TIMESTAMP),
datetime.timedelta for TIME, or None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cdc.model.positions import ChangePosition
from cdc.model.schema import TableId

Op = Literal["c", "u", "d", "r"]
OPS: tuple[Op, ...] = ("c", "u", "d", "r")

Row = dict[str, Any]


@dataclass(frozen=True)
class ChangeEvent:
    """One row change.

    Attributes:
        table_id: the table changed.
        op: ``c`` insert, ``u`` update, ``d`` delete, ``r`` snapshot read.
        before: the row before the change (``u``, ``d``), else None.
        after: the row after the change (``c``, ``u``, ``r``), else None.
        position: where the change sits in the binlog (None for snapshot reads).
        ts_ms: when the server wrote the change (event header time), epoch milliseconds.
        gtid: the GTID of the transaction, when the server has GTIDs.
        server_id: the id of the server that wrote the event.
        thread: the id of the connection that made the change, when known.
        query: the SQL statement, when the server logs it (binlog_rows_query_log_events).
    """

    table_id: TableId
    op: Op
    before: Row | None
    after: Row | None
    position: ChangePosition | None = None
    ts_ms: int = 0
    gtid: str | None = None
    server_id: int = 0
    thread: int | None = None
    query: str | None = field(default=None, repr=False)

    def image(self) -> Row:
        """The row that identifies the change: ``after`` unless it is a delete."""
        row = self.before if self.op == "d" else self.after
        if row is None:
            raise ValueError(f"{self.op!r} event on {self.table_id} has no image")
        return row
