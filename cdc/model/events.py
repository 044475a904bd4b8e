"""The change event: one row change, typed, with its log position.

A dialect's log reader yields these one per row (the backfill of a snapshot chunk merges them);
its hot path yields the same changes as Arrow change rows instead (see :mod:`cdc.model.envelope`).
Values in ``before``/``after`` are Python values of the column's Arrow type: int, float, Decimal,
str, bytes, bool, datetime.date, datetime.datetime (naive for DATETIME, UTC-aware for TIMESTAMP),
datetime.timedelta for TIME, or None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cdc.model.positions import LogPosition
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
        position: where the change sits in the log (None for snapshot reads).
        ts_ms: when the server wrote the change, epoch milliseconds.
        source: the connector's own fields of Debezium's ``source`` block for this change
            (MySQL: ``server_id``, ``gtid``, ``file``, ``pos``, ``row``, ``thread``, ``query``).
    """

    table_id: TableId
    op: Op
    before: Row | None
    after: Row | None
    position: LogPosition | None = None
    ts_ms: int = 0
    source: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def image(self) -> Row:
        """The row that identifies the change: ``after`` unless it is a delete."""
        row = self.before if self.op == "d" else self.after
        if row is None:
            raise ValueError(f"{self.op!r} event on {self.table_id} has no image")
        return row
