"""pgoutput (protocol 1) decoded column-wise: a slice's messages in one buffer, their framing
parsed with numpy for all messages at once (executor; no I/O).

The per-message decoder (:mod:`pgoutput`) reads the few messages that steer the stream (Begin,
Commit, Relation, Truncate). Row changes (Insert, Update, Delete) are never decoded one by one:
they are grouped by relation and shape (``N``, ``K``+``N``, ``O``+``N``...), and each tuple's
columns are walked for the whole group at once, column after column (a value's kind byte, its
length, where it starts). A value is then a reference ``(kind, start, length)`` into the buffer;
:func:`texts` gathers a column's references into an Arrow string array without a Python object
per value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from binlog.postgres import pgoutput
from binlog.postgres.pgoutput import Begin, Commit, Relation, Truncate

INSERT, UPDATE, DELETE = ord("I"), ord("U"), ord("D")
NULL, UNCHANGED, TEXT, BINARY = ord("n"), ord("u"), ord("t"), ord("b")
_NEW, _KEY, _OLD = ord("N"), ord("K"), ord("O")
OPS = {INSERT: "c", UPDATE: "u", DELETE: "d"}


@dataclass(frozen=True)
class MessageBlock:
    """A slice's messages: ``data`` holds them back to back; message i is
    ``data[starts[i]:ends[i]]`` at LSN ``lsns[i]``."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray
    lsns: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[int, bytes]]) -> MessageBlock:
        """From ``(lsn, data)`` rows as the peek returns them (binary format)."""
        n = len(rows)
        payloads = [r[1] for r in rows]
        lengths = np.fromiter(map(len, payloads), np.int64, n)
        ends = np.cumsum(lengths)
        return cls(b"".join(payloads), ends - lengths, ends, np.fromiter((r[0] for r in rows), np.int64, n))

    @property
    def buf(self) -> np.ndarray:
        return np.frombuffer(self.data, np.uint8)

    def message(self, i: int) -> bytes:
        return self.data[int(self.starts[i]):int(self.ends[i])]


def _be(buf: np.ndarray, at: np.ndarray, size: int, signed: bool = True) -> np.ndarray:
    """Big-endian integers of ``size`` bytes at each position of ``at``."""
    if not len(at):
        return np.zeros(0, np.int64)
    # a view of the buffer as integers starting at every byte (stride 1, unaligned): one gather
    ints = np.ndarray((len(buf) - size + 1,), f">{'i' if signed else 'u'}{size}", buf, 0, (1,))
    return ints[at].astype(np.int64)


@dataclass
class Scan:
    """The row changes of the transactions committed in ``[start, end)`` on wanted relations,
    in log order (all arrays one entry per change).

    Attributes:
        messages: the message index of each change.
        version: its relation, an index into ``relations`` (a relation sent again is a new entry).
        commit_lsn, ts_ms, xid: its transaction's commit LSN, commit time and id.
        row: its index among its transaction's kept changes.
        relations: every Relation message, in order.
        truncates: the Truncate messages (relations as they were, and the message's LSN).
    """

    messages: np.ndarray
    version: np.ndarray
    commit_lsn: np.ndarray
    ts_ms: np.ndarray
    xid: np.ndarray
    row: np.ndarray
    relations: list[Relation] = field(default_factory=list)
    truncates: list[tuple[list[Relation], int]] = field(default_factory=list)


def scan(block: MessageBlock, start: int, end: int, wanted: Callable[[Relation], bool]) -> Scan:
    """Find the kept row changes of ``block``: steering messages one by one, rows in bulk.

    Raises:
        ValueError: a malformed stream (a change before its Relation message).
    """
    buf = block.buf
    kinds = buf[block.starts]
    is_row = (kinds == INSERT) | (kinds == UPDATE) | (kinds == DELETE)
    relations: list[Relation] = []
    seen: dict[int, list[tuple[int, int]]] = {}  # oid -> (message index, version)
    latest: dict[int, Relation] = {}
    txns: list[tuple[int, int, int, int, int]] = []  # begin index, commit index, commit lsn, ts, xid
    truncates: list[tuple[list[Relation], int]] = []
    begin: tuple[int, Begin] | None = None
    for i in np.flatnonzero(~is_row).tolist():
        msg = pgoutput.decode(block.message(i))
        if isinstance(msg, Begin):
            begin = (i, msg)
        elif isinstance(msg, Commit):
            if begin is not None:
                txns.append((begin[0], i, msg.commit_lsn, msg.ts_ms, begin[1].xid))
            begin = None
        elif isinstance(msg, Relation):
            seen.setdefault(msg.oid, []).append((i, len(relations)))
            relations.append(msg)
            latest[msg.oid] = msg
        elif isinstance(msg, Truncate):
            truncates.append(([latest[r] for r in msg.relations if r in latest], int(block.lsns[i])))
    t = np.array(txns, np.int64).reshape(-1, 5)
    rows = np.flatnonzero(is_row)
    k = np.searchsorted(t[:, 0], rows, "right") - 1
    inside = (k >= 0) & (rows < t[np.maximum(k, 0), 1]) if len(t) else np.zeros(len(rows), bool)
    committed = (t[:, 2] >= start) & (t[:, 2] < end)
    keep = inside & committed[np.maximum(k, 0)] if len(t) else inside
    rows, k = rows[keep], k[keep]
    version = _versions(buf, block.starts[rows] + 1, rows, seen)
    mine = np.array([wanted(r) for r in relations] + [False], bool)[version]
    rows, k, version = rows[mine], k[mine], version[mine]
    first = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, bool)
    index = np.arange(len(k))
    row = index - np.maximum.accumulate(np.where(first, index, 0))
    return Scan(rows, version, t[k, 2], t[k, 3], t[k, 4], row, relations, truncates)


def _versions(buf: np.ndarray, oid_at: np.ndarray, rows: np.ndarray,
              seen: dict[int, list[tuple[int, int]]]) -> np.ndarray:
    """The relation version each row change refers to: its oid's last Relation message before it."""
    oids = _be(buf, oid_at, 4, signed=False)
    version = np.full(len(rows), -1, np.int64)
    for oid in np.unique(oids).tolist():
        sel = oids == oid
        at = np.array(seen.get(oid, []), np.int64).reshape(-1, 2)
        j = np.searchsorted(at[:, 0], rows[sel]) - 1
        if (j < 0).any():
            raise ValueError(f"pgoutput: a change of relation {oid} before its Relation message")
        version[sel] = at[j, 1]
    return version


@dataclass
class Refs:
    """One column's values in some tuples: each a kind byte (``t``, ``n``, ``u``), where its text
    starts in the buffer and its length."""

    kind: np.ndarray
    start: np.ndarray
    length: np.ndarray

    @classmethod
    def nulls(cls, n: int) -> Refs:
        return cls(np.full(n, NULL, np.uint8), np.zeros(n, np.int64), np.zeros(n, np.int64))

    def put(self, at: np.ndarray, other: Refs, where: np.ndarray | None = None) -> None:
        """Take ``other``'s values into the rows ``at`` (where ``where``)."""
        if where is not None:
            at, other = at[where], Refs(other.kind[where], other.start[where], other.length[where])
        self.kind[at], self.start[at], self.length[at] = other.kind, other.start, other.length


def walk(buf: np.ndarray, at: np.ndarray, columns: int) -> tuple[list[Refs], np.ndarray]:
    """The TupleData at each position of ``at`` (all with ``columns`` columns): each column's
    references, and where each tuple ends.

    Raises:
        ValueError: a tuple with another column count, or an unknown value kind.
    """
    if len(at) and (_be(buf, at, 2) != columns).any():
        raise ValueError(f"pgoutput: a tuple without the relation's {columns} columns")
    pos = at + 2
    out = []
    for _ in range(columns):
        kind = buf[pos]
        sized = (kind == TEXT) | (kind == BINARY)
        if not (sized | (kind == NULL) | (kind == UNCHANGED)).all():
            raise ValueError(f"pgoutput: unknown tuple data kind(s) {sorted(set(kind.tolist()))}")
        length = np.where(sized, _be(buf, pos + 1, 4), 0)
        out.append(Refs(kind, np.where(sized, pos + 5, pos), length))
        pos = pos + np.where(sized, 5 + length, 1)
    return out, pos


@dataclass
class Tuples:
    """The row changes of one relation's rows, column-wise (``old`` and ``new`` per relation
    column; ``has_old``/``has_new``: the tuple was sent)."""

    op: np.ndarray
    old: list[Refs]
    new: list[Refs]
    has_old: np.ndarray
    has_new: np.ndarray


def tuples(block: MessageBlock, messages: np.ndarray, columns: int) -> Tuples:
    """Decode the row changes ``messages`` (all of relations with ``columns`` columns), grouped by
    message shape, into one :class:`Tuples` in the order of ``messages``.

    Raises:
        ValueError: an Update without its new tuple, or an unknown marker.
    """
    buf, n = block.buf, len(messages)
    starts = block.starts[messages]
    op, marker = buf[starts], buf[starts + 5]
    out = Tuples(op, [Refs.nulls(n) for _ in range(columns)], [Refs.nulls(n) for _ in range(columns)],
                 np.zeros(n, bool), np.zeros(n, bool))
    for shape in np.unique(op.astype(np.int64) << 8 | marker).tolist():
        kind, mark = shape >> 8, shape & 0xFF
        at = np.flatnonzero((op == kind) & (marker == mark))
        pos = starts[at] + 6
        if mark in (_KEY, _OLD):
            old, pos = walk(buf, pos, columns)
            for c, refs in enumerate(old):
                out.old[c].put(at, refs)
            out.has_old[at] = True
            if kind == DELETE:
                continue
            if (buf[pos] != _NEW).any():
                raise ValueError("pgoutput: an Update without a new tuple")
            pos = pos + 1
        elif mark != _NEW or kind == DELETE:
            raise ValueError(f"pgoutput: {chr(kind)} with tuple marker {chr(mark)!r}")
        new, _ = walk(buf, pos, columns)
        for c, refs in enumerate(new):
            out.new[c].put(at, refs)
        out.has_new[at] = True
    return out


def texts(block: MessageBlock, refs: Refs) -> pa.Array:
    """A column's values as Arrow strings (``t`` values; ``n`` and ``u`` are null).

    The references must be in buffer order (rows in log order, each inside its own message): the
    buffer is then one binary array alternating values and the bytes between them, and Arrow's
    ``take`` gathers the values.

    Raises:
        UnicodeDecodeError: a value that is not UTF-8.
    """
    n = len(refs.kind)
    valid = (refs.kind == TEXT) | (refs.kind == BINARY)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = refs.start
    bounds[1::2] = refs.start + np.where(valid, refs.length, 0)
    if n == 0:
        return pa.array([], pa.string())
    if (np.diff(bounds) < 0).any():  # not in buffer order (cannot happen with log-ordered rows)
        values = [block.data[s:s + ln].decode() if v else None
                  for s, ln, v in zip(refs.start.tolist(), refs.length.tolist(), valid.tolist(), strict=True)]
        return pa.array(values, pa.string())
    spans = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * n - 1,
                                             [None, pa.py_buffer(bounds), pa.py_buffer(block.data)])
    picked = spans.take(pa.array(np.arange(0, 2 * n, 2), mask=~valid))
    try:
        return picked.cast(pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise UnicodeDecodeError("utf-8", b"", 0, 1, f"pgoutput: a text value that is not UTF-8 ({exc})") from None
