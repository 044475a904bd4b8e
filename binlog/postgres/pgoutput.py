"""A decoder of pgoutput, protocol version 1 (PostgreSQL docs, "Logical Replication Message
Formats"), as ``pg_logical_slot_peek_binary_changes`` returns it (executor; pure Python, no I/O).

Values stay in their text form (protocol 1 sends every value as text); :mod:`types` turns them
into Arrow. An unchanged TOASTed value arrives as :data:`UNCHANGED`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

UNCHANGED: Final = object()  # an unchanged TOASTed value ('u' tuple data): not sent
PG_EPOCH_MS = 946_684_800_000  # 2000-01-01 in Unix epoch milliseconds

Tuple = tuple[object, ...]  # str | None | UNCHANGED per column

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class Relation:
    """A table as a Relation message describes it.

    Attributes:
        oid: the relation id changes refer to.
        namespace: its schema.
        name: its name.
        replica_identity: ``d`` default, ``n`` nothing, ``f`` full, ``i`` index.
        columns: column names in order.
        key: flags: the column is part of the replica identity key.
        type_oids: each column's type oid.
        typmods: each column's type modifier (``atttypmod``: -1, or a length, precision...).
    """

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[str, ...]
    key: tuple[bool, ...]
    type_oids: tuple[int, ...]
    typmods: tuple[int, ...] = ()


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    ts_ms: int
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    ts_ms: int


@dataclass(frozen=True)
class RowChange:
    """An Insert, Update or Delete message.

    Attributes:
        op: ``c``, ``u`` or ``d``.
        relation: the relation oid.
        old: the old tuple (``K`` key columns only, others None; ``O`` the full row), if sent.
        new: the new tuple (inserts and updates).
        old_kind: ``K``, ``O`` or empty.
    """

    op: str
    relation: int
    old: Tuple | None
    new: Tuple | None
    old_kind: str = ""


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass
class _Reader:
    data: bytes
    at: int = 0
    strings: list[str] = field(default_factory=list)

    def byte(self) -> str:
        c = chr(self.data[self.at])
        self.at += 1
        return c

    def i8(self) -> int:
        v = self.data[self.at]
        self.at += 1
        return v

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.data, self.at)
        self.at += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.data, self.at)
        self.at += 4
        return int(v)

    def u32(self) -> int:
        (v,) = _U32.unpack_from(self.data, self.at)
        self.at += 4
        return int(v)

    def i64(self) -> int:
        (v,) = _I64.unpack_from(self.data, self.at)
        self.at += 8
        return int(v)

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        s = self.data[self.at:end].decode()
        self.at = end + 1
        return s

    def tuple_data(self) -> Tuple:
        n = self.i16()
        out: list[object] = []
        for _ in range(n):
            kind = self.byte()
            if kind == "n":
                out.append(None)
            elif kind == "u":
                out.append(UNCHANGED)
            elif kind in ("t", "b"):
                length = self.i32()
                raw = self.data[self.at:self.at + length]
                self.at += length
                out.append(raw.decode() if kind == "t" else raw)
            else:
                raise ValueError(f"pgoutput: unknown tuple data kind {kind!r}")
        return tuple(out)


Message = Begin | Commit | Relation | RowChange | Truncate | None


def decode(data: bytes) -> Message:
    """One pgoutput message; None for the kinds the pipeline ignores (Origin, Type, Message)."""
    r = _Reader(bytes(data))
    kind = r.byte()
    if kind == "B":
        final_lsn, ts, xid = r.i64(), r.i64(), r.u32()
        return Begin(final_lsn, PG_EPOCH_MS + ts // 1000, xid)
    if kind == "C":
        r.i8()
        commit_lsn, end_lsn, ts = r.i64(), r.i64(), r.i64()
        return Commit(commit_lsn, end_lsn, PG_EPOCH_MS + ts // 1000)
    if kind == "R":
        oid, namespace, name = r.u32(), r.string(), r.string()
        identity = chr(r.i8())
        names, keys, types, typmods = [], [], [], []
        for _ in range(r.i16()):
            flags = r.i8()
            names.append(r.string())
            types.append(r.u32())
            typmods.append(r.i32())
            keys.append(bool(flags & 1))
        return Relation(oid, namespace or "pg_catalog", name, identity, tuple(names), tuple(keys), tuple(types),
                        tuple(typmods))
    if kind == "I":
        rel = r.u32()
        r.byte()  # 'N'
        return RowChange("c", rel, None, r.tuple_data())
    if kind == "U":
        rel = r.u32()
        old, old_kind = None, ""
        marker = r.byte()
        if marker in ("K", "O"):
            old, old_kind = r.tuple_data(), marker
            marker = r.byte()
        if marker != "N":
            raise ValueError(f"pgoutput: Update without a new tuple (marker {marker!r})")
        return RowChange("u", rel, old, r.tuple_data(), old_kind)
    if kind == "D":
        rel = r.u32()
        marker = r.byte()
        return RowChange("d", rel, r.tuple_data(), None, marker)
    if kind == "T":
        n = r.i32()
        options = r.i8()
        rels = tuple(r.u32() for _ in range(n))
        return Truncate(rels, bool(options & 1), bool(options & 2))
    if kind in ("O", "Y", "M"):
        return None
    raise ValueError(f"pgoutput: unknown message type {kind!r}")
