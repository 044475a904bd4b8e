"""The column-wise walk: rows events -> :class:`~binlog.mysql.event_rows.EventRows`, decoded column-wise.

:func:`stream_event_rows` walks a :class:`~binlog.mysql.stream.BinlogStream` like ``changes`` does
(same positions, end handling and skip-after-resume) and yields one EventRows per rows event.

Rows events are small (MariaDB and MySQL cut them at ``binlog_row_event_max_size``, 8 KiB by
default: about 20 rows of a wide table), so decoding each alone would spend its time on per-call
overhead. Consecutive rows events of one table map and operation are therefore batched, up to
:data:`BATCH_BYTES`, decoded in one pass (``binlog/mysql/rows_decode.py``) and handed out as one EventRows
per event, each a zero-copy slice of the batch's tables. Events of a table the fast path cannot
decode become event rows of the per-row path's values.

While rows are held in a batch the stream's ``hold`` is the start of the oldest held event's
transaction, so a lost connection restarts there and loses nothing (changes already handed out
are skipped as usual).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from binlog.mysql.event_rows import EventRows, event_rows_from_changes
from binlog.mysql.positions import BinlogOffset
from binlog.mysql.rows_decode import RowsDecoder
from binlog.mysql.stream import BinlogStream, RowsAt, TableMap
from cdc.model.schema import TableId

log = logging.getLogger(__name__)

BATCH_BYTES = 4 << 20  # rows bytes decoded in one pass at most (one event may exceed it)


def stream_event_rows(stream: BinlogStream, end: BinlogOffset,
                  wanted: frozenset[TableId]) -> Iterator[EventRows]:
    """Yield the changes before ``end`` as event rows; return at ``end`` or the binlog's end.

    Raises:
        StreamLost: the connection dropped (rows held in a batch are read again on resume).
        BinlogNotConfigured: an event the reader cannot decode faithfully.
    """
    batch = _Batch(stream)
    for ev, at in stream.rows_events(end, wanted):
        yield from batch.add(ev, at)
    yield from batch.flush()


def raw_rows(ev: Any) -> memoryview:
    """The undecoded rows of a mysql-replication rows event (after the columns-present bitmaps,
    before the checksum), without letting the library decode them.

    Raises:
        RuntimeError: the event was already (partly) decoded.
    """
    wrapper = ev.packet
    packet = wrapper.packet
    size = ev.event_size - wrapper.read_bytes
    begin = packet._position
    if wrapper._BinLogPacketWrapper__data_buffer or size < 0 or begin + size > len(packet._data):
        raise RuntimeError("the rows event's payload was already consumed")
    return memoryview(packet._data)[begin:begin + size]


def decoder_for(table_map: TableMap) -> RowsDecoder | None:
    """The table map's column-wise decoder, planned once (None: use the per-row path)."""
    if table_map.decoder is None:
        assert table_map.converter is not None
        planned = RowsDecoder.plan(table_map.converter.schema, table_map.columns)
        if isinstance(planned, str):
            log.info("rows of %s are decoded row by row: %s", table_map.table_id, planned)
        table_map.decoder = planned
    return table_map.decoder if isinstance(table_map.decoder, RowsDecoder) else None


class _Batch:
    """Consecutive rows events of one table map and operation, held until decoded together."""

    def __init__(self, stream: BinlogStream) -> None:
        self.stream = stream
        self.events: list[tuple[memoryview, RowsAt]] = []
        self.size = 0

    def add(self, ev: Any, at: RowsAt) -> Iterator[EventRows]:
        decoder = decoder_for(at.table_map)
        if decoder is None:
            yield from self.flush()
            events = list(self.stream.row_changes(ev, at))
            if events:
                convert = at.table_map.converter
                assert convert is not None  # looked up with the event
                yield replace(event_rows_from_changes(events, convert.schema.arrow_schema()),
                              version=convert.version)
            return
        if self.events:
            head = self.events[0][1]
            if head.table_map is not at.table_map or head.op != at.op or self.size >= BATCH_BYTES:
                yield from self.flush()
        if not self.events:
            self.stream.hold = self.stream.boundary
        rows = raw_rows(ev)
        self.events.append((rows, at))
        self.size += len(rows)

    def flush(self) -> Iterator[EventRows]:
        """Decode the held events and hand out one EventRows per event."""
        if not self.events:
            return
        held, self.events, self.size = self.events, [], 0
        self.stream.hold = None
        head = held[0][1]
        decoder = decoder_for(head.table_map)
        assert decoder is not None
        sizes = np.array([len(rows) for rows, _ in held], np.int64)
        data = held[0][0] if len(held) == 1 else b"".join(rows for rows, _ in held)
        tables, counts = decoder.decode(data, np.cumsum(sizes), 2 if head.op == "u" else 1)
        first = 0
        for (_, at), count in zip(held, counts.tolist(), strict=True):
            begin, n = first + at.skip_rows, count - at.skip_rows
            first += count
            if n <= 0:
                continue
            images = [t.slice(begin, n) for t in tables]
            before = images[0] if at.op != "c" else None
            after = images[-1] if at.op != "d" else None
            self.stream.last = (at.index, at.start, count - 1)
            assert at.table_map.converter is not None
            yield EventRows(at.table_map.table_id, at.op, before, after, at.file, at.start,
                              at.skip_rows, at.ts_ms, at.gtid, at.server_id, at.thread, at.query,
                              at.table_map.converter.version)
