"""Event rows: the row changes of one binlog rows event as Arrow tables.

``MySqlBinlogReader.read_event_rows`` yields these instead of one :class:`~cdc.model.events.ChangeEvent`
per row; ``binlog/mysql/change_rows.py`` turns a sequence of them into change rows column-wise. An EventRows
holds the rows of one rows event (one table, one operation) that lie in the slice, typed as the
table's ``schema.arrow_schema()``, with the event's position and context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from binlog.mysql.positions import ChangePosition
from cdc.model.events import ChangeEvent
from cdc.model.schema import TableId

EventOp = Literal["c", "u", "d"]


@dataclass(frozen=True)
class EventRows:
    """The changes of one rows event (one table, one operation).

    Attributes:
        table_id: the table changed.
        op: ``c`` insert, ``u`` update, ``d`` delete (an update of the primary key stays ``u``
            here; ``binlog/mysql/change_rows.py`` splits it as Debezium does).
        before: the rows before the change (``u``, ``d``), typed as ``schema.arrow_schema()``.
        after: the rows after the change (``c``, ``u``), row i matching ``before``'s row i.
        file: binlog file of the rows event.
        pos: where the rows event starts in ``file``.
        first_row: the index inside the event of the first row here; rows before it were handed
            out before a resume, so row i of the tables is change ``(file, pos, first_row + i)``.
        ts_ms: when the server wrote the event, epoch milliseconds.
        gtid: the transaction's GTID, when the server has GTIDs.
        server_id: the id of the server that wrote the event.
        thread: the id of the connection that made the change, when known.
        query: the SQL statement, when the server logs it.
        version: the table's schema version the rows were written under (their images' columns).
    """

    table_id: TableId
    op: EventOp
    before: pa.Table | None
    after: pa.Table | None
    file: str
    pos: int
    first_row: int
    ts_ms: int
    gtid: str | None
    server_id: int
    thread: int | None
    query: str | None
    version: int = 0

    @property
    def num_rows(self) -> int:
        image = self.after if self.after is not None else self.before
        return 0 if image is None else image.num_rows

    def to_events(self) -> list[ChangeEvent]:
        """The EventRows as one ChangeEvent per row (per-row Python: for tests and slow paths)."""
        befores = self.before.to_pylist() if self.before is not None else None
        afters = self.after.to_pylist() if self.after is not None else None
        return [
            ChangeEvent(self.table_id, self.op, befores[i] if befores else None,
                        afters[i] if afters else None,
                        ChangePosition(self.file, self.pos, self.first_row + i), self.ts_ms,
                        change_source(self.server_id, self.gtid, self.file, self.pos, self.first_row + i,
                                      self.thread, self.query))
            for i in range(self.num_rows)
        ]


def change_source(server_id: int, gtid: str | None, file: str, pos: int, row: int, thread: int | None,
                  query: str | None) -> dict[str, Any]:
    """The MySQL connector's own fields of one change's Debezium source block."""
    return {"server_id": server_id, "gtid": gtid, "file": file, "pos": pos, "row": row, "thread": thread,
            "query": query}


def event_rows_from_changes(events: Sequence[ChangeEvent], schema: pa.Schema) -> EventRows:
    """An EventRows from the per-row changes of one rows event (the fallback path).

    Args:
        events: the changes, in row order, all of one rows event.
        schema: the table's ``schema.arrow_schema()``.

    Raises:
        ValueError: no events, or they are not of one rows event.
    """
    if not events:
        raise ValueError("a event's rows needs at least one change")
    first = events[0]
    where = first.position
    if not isinstance(where, ChangePosition) or any(
            not isinstance(e.position, ChangePosition) or e.position[:2] != where[:2] for e in events):
        raise ValueError("a event's rows holds the changes of one rows event")
    op = first.op
    if op == "r":
        raise ValueError("snapshot reads are not binlog changes")
    before = pa.Table.from_pylist([e.before for e in events], schema=schema) if op != "c" else None
    after = pa.Table.from_pylist([e.after for e in events], schema=schema) if op != "d" else None
    s = first.source
    return EventRows(first.table_id, op, before, after, where.file, where.pos, where.row,
                       first.ts_ms, s.get("gtid"), s.get("server_id", 0), s.get("thread"), s.get("query"))
