"""MySQL binlog positions: the dialect's offsets (``cdc.model.positions``'s protocols).

Two kinds of position, both comparable:

* :class:`BinlogOffset` is a point *between* transactions, as ``SHOW MASTER STATUS`` reports it
  (file, pos, and the GTID set executed up to there). Watermarks (LW, HW) and the bounds of a
  stream slice are BinlogOffsets. A reader can start at one.
* :class:`ChangePosition` identifies one row change: the rows event's start position in a file
  plus the row's index inside the event. Debezium calls these ``file``, ``pos`` and ``row``.

A change at position ``c`` lies in the half-open slice ``(lo, hi]`` of BinlogOffsets when
``lo <= c < hi`` in (file, pos) order: it was written after ``lo`` was reported and before ``hi``
was. Both conventions are the same thing said twice: an offset is the end of what it covers.

File and position belong to one server: a replica writes the same transactions at other places.
An offset records the server it was read on (``server``) and the GTID set executed up to it
(:class:`GtidSet`, MySQL ``uuid:1-100`` or MariaDB ``domain-server-seq``). Offsets of two servers
are ordered by their GTID sets; the reader finds an offset of another server on its own by GTID
(docs/operating/failover.md).

A *cut* (``cut=True``) is a byte position chosen without reading the binlog there (a batch
capped at ``source.max_batch_bytes``, a slice split for several readers): it may lie inside a
transaction, even inside an event. Slices own whole transactions, by where each begins: the
slice ``(lo, hi]`` holds every change of the transactions whose first event starts at or after
``lo`` and before ``hi`` (read to their end, past ``hi`` if need be). For offsets between
transactions that is the rule above; for cuts it gives each transaction to exactly one slice.
A cut has no GTID set, so a failover cannot find it on another server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from binlog.dialect import piece_offsets
from cdc.model.errors import InvalidBinlogPosition

# Walking over a rows event without decoding it costs about this much of decoding it and turning
# it into change rows (benchmarks/binlog_event_rows.py: 0.2 of decoding alone; 0.05-0.15 of a task in
# a 2M-update catch-up, which also writes files): later pieces of a split slice are smaller by
# this factor each, so that its tasks finish together.
SKIP_COST = 0.15

_FILE_INDEX = re.compile(r"^(?P<base>.*)\.(?P<index>\d+)$")


def _file_key(file: str) -> tuple[str, int]:
    m = _FILE_INDEX.match(file)
    if not m:
        raise ValueError(f"binlog file name {file!r} does not end in .<number>")
    return m.group("base"), int(m.group("index"))


def _compare(a_file: str, a_pos: int, b_file: str, b_pos: int) -> int:
    a_base, a_index = _file_key(a_file)
    b_base, b_index = _file_key(b_file)
    if a_base != b_base:
        raise ValueError(f"cannot order positions in differently named binlogs: {a_file!r} vs {b_file!r}")
    a, b = (a_index, a_pos), (b_index, b_pos)
    return (a > b) - (a < b)


@dataclass(frozen=True)
class BinlogOffset:
    """A position between transactions in the binlog (what ``SHOW MASTER STATUS`` reports).

    Attributes:
        file: binlog file name, e.g. ``mysql-bin.000003``.
        pos: byte position inside ``file`` where the next event will start.
        gtid: the GTID set executed up to here (MySQL ``Executed_Gtid_Set``, MariaDB
            ``gtid_binlog_pos``), or None when unknown (GTIDs off; a MariaDB low watermark).
        server: the server whose binlog ``file`` and ``pos`` belong to (MariaDB ``@@server_id``,
            MySQL ``@@server_uuid``), or None when unknown (offsets written before it was
            recorded, offsets built by hand).
        cut: a byte position that may lie inside a transaction (see the module docstring): a
            reader cannot start there, and a slice ending there reads its last transaction on.

    Offsets of one server (or of an unknown one) are ordered by file and position; offsets of two
    known, different servers by their GTID sets (see :meth:`compare`). Equality (``==``) is by
    file and position only.
    """

    file: str
    pos: int
    gtid: str | None = field(default=None, compare=False)
    server: str | None = field(default=None, compare=False)
    cut: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        _file_key(self.file)
        if self.pos < 0:
            raise ValueError(f"binlog position must be >= 0, got {self.pos}")

    def same_server(self, other: BinlogOffset) -> bool:
        """False only when both servers are known and differ (file/pos are then not comparable)."""
        return self.server is None or other.server is None or self.server == other.server

    def compare(self, other: BinlogOffset) -> int:
        """-1, 0 or 1 as self is before, at, or after ``other``.

        Raises:
            InvalidBinlogPosition: the offsets were read on different servers and their GTID sets
                are unknown or diverged (neither contains the other).
        """
        if self.same_server(other):
            return _compare(self.file, self.pos, other.file, other.pos)
        return _compare_by_gtid(self, other)

    def is_before(self, other: BinlogOffset) -> bool:
        return self.compare(other) < 0

    def is_at_or_after(self, other: BinlogOffset) -> bool:
        return self.compare(other) >= 0

    def covers(self, change: ChangePosition) -> bool:
        """True when ``change`` was written before this offset (it lies at or below it)."""
        return _compare(change.file, change.pos, self.file, self.pos) < 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "pos": self.pos}
        if self.gtid:
            d["gtid"] = self.gtid
        if self.server is not None:
            d["server"] = self.server
        if self.cut:
            d["cut"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinlogOffset:
        try:
            server = d.get("server")
            return cls(file=str(d["file"]), pos=int(d["pos"]), gtid=d.get("gtid") or None,
                       server=None if server is None else str(server), cut=bool(d.get("cut", False)))
        except KeyError as exc:
            raise ValueError(f"binlog offset {d!r} lacks field {exc.args[0]!r}") from None

    def __str__(self) -> str:
        cut = " (cut)" if self.cut else ""
        return f"{self.file}:{self.pos}{cut}" + (f" (gtid {self.gtid})" if self.gtid else "")


def _compare_by_gtid(a: BinlogOffset, b: BinlogOffset) -> int:
    if not a.gtid or not b.gtid:
        unknown = a if not a.gtid else b
        raise InvalidBinlogPosition(
            f"cannot order binlog offset {a} of server {a.server} and {b} of server {b.server}: "
            f"the GTID set of {unknown} is unknown (GTIDs off, or a snapshot chunk's low watermark), "
            "and file/pos of two servers are not comparable. Take a new snapshot (a new checkpoint, "
            "state directory and sink path)", position=str(unknown))
    order = GtidSet.parse(a.gtid).compare(GtidSet.parse(b.gtid))
    if order is None:
        raise InvalidBinlogPosition(
            f"the GTID sets of {a} (server {a.server}) and {b} (server {b.server}) have diverged: "
            "each holds transactions the other lacks, so the servers' histories differ (a replica "
            "promoted before it had applied everything the job read, or writes on a replica). The "
            "sinks may hold changes the server lost; take a new snapshot (a new checkpoint, state "
            "directory and sink path)", position=str(a), end=str(b))
    return order


_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
GTID_FORMS = ("MariaDB 'domain-server-seq' per domain, e.g. '0-1-100,1-2-7'; MySQL "
              "'uuid:1-100' per source, e.g. '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:200-210'")

Intervals = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class GtidSet:
    """A set of transactions by GTID: MariaDB's last ``domain-server-seq`` per domain, or MySQL's
    ``uuid[:tag]:intervals`` per source.

    Attributes:
        kind: ``mariadb``, ``mysql``, or ``empty`` (no transaction; either flavor).
        mariadb: ``(domain, server, seq)`` per domain, by domain.
        mysql: ``(uuid or uuid:tag, intervals)`` per source, by source; intervals are inclusive,
            merged and sorted.
    """

    kind: Literal["mariadb", "mysql", "empty"]
    mariadb: tuple[tuple[int, int, int], ...] = ()
    mysql: tuple[tuple[str, Intervals], ...] = ()

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        """Parse either flavor's text (newlines and spaces are ignored).

        Raises:
            ValueError: the text is neither form, mixes both, names a MariaDB domain twice, or
                has an interval that runs backwards or starts at 0.
        """
        parts = [p for p in re.sub(r"\s+", "", str(text)).split(",") if p]
        if not parts:
            return cls("empty")
        if all(_MARIADB_GTID.match(p) for p in parts):
            return cls("mariadb", mariadb=_mariadb_entries(parts))
        if any(_MARIADB_GTID.match(p) for p in parts):
            raise ValueError(f"GTID set {text!r} mixes MariaDB and MySQL forms; write one: {GTID_FORMS}")
        return cls("mysql", mysql=_mysql_entries(parts, text))

    def issubset(self, other: GtidSet) -> bool:
        """True when every transaction of ``self`` is in ``other`` (MariaDB: by domain and
        sequence number, as ``gtid_strict_mode`` orders them)."""
        if self.kind == "empty":
            return True
        if self.kind != other.kind:
            return False
        if self.kind == "mariadb":
            seqs = {d: seq for d, _, seq in other.mariadb}
            return all(d in seqs and seq <= seqs[d] for d, _, seq in self.mariadb)
        theirs = dict(other.mysql)
        return all(_covered(ivs, theirs.get(src, ())) for src, ivs in self.mysql)

    def compare(self, other: GtidSet) -> int | None:
        """-1, 0 or 1 as ``self`` is a proper subset of, equal to, or a proper superset of
        ``other``; None when neither contains the other (diverged histories, or two flavors)."""
        below, above = self.issubset(other), other.issubset(self)
        if below and above:
            return 0
        if below or above:
            return -1 if below else 1
        return None

    def __str__(self) -> str:
        if self.kind == "mariadb":
            return ",".join(f"{d}-{s}-{n}" for d, s, n in self.mariadb)
        return ",".join(src + "".join(f":{lo}" if lo == hi else f":{lo}-{hi}" for lo, hi in ivs)
                        for src, ivs in self.mysql)


def _mariadb_entries(parts: list[str]) -> tuple[tuple[int, int, int], ...]:
    entries: dict[int, tuple[int, int, int]] = {}
    for p in parts:
        m = _MARIADB_GTID.match(p)
        assert m is not None
        d, s, n = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if d in entries:
            raise ValueError(f"GTID set names domain {d} twice ({p!r}); give one 'domain-server-seq' per "
                             "domain, the last transaction of that domain")
        if d > 2**32 - 1 or s > 2**32 - 1 or n > 2**64 - 1:
            raise ValueError(f"GTID {p!r} is out of range (domain and server < 2^32, seq < 2^64)")
        entries[d] = (d, s, n)
    return tuple(entries[d] for d in sorted(entries))


def _mysql_entries(parts: list[str], text: str) -> tuple[tuple[str, Intervals], ...]:
    out: dict[str, list[tuple[int, int]]] = {}
    for p in parts:
        uuid, *rest = p.split(":")
        if not _UUID.match(uuid) or not rest:
            raise ValueError(f"{p!r} in GTID set {text!r} is not a GTID; expected {GTID_FORMS}")
        source = uuid.lower()
        for segment in rest:
            if _TAG.match(segment):  # MySQL 8.3+: the following intervals carry this tag
                source = f"{uuid.lower()}:{segment.lower()}"
                continue
            m = _INTERVAL.match(segment)
            if not m:
                raise ValueError(f"{segment!r} in {p!r} is not an interval like '1-100' or '7'")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if not 1 <= lo <= hi:
                raise ValueError(f"interval {segment!r} in {p!r} must satisfy 1 <= first <= last")
            out.setdefault(source, []).append((lo, hi))
    return tuple((src, _merged(ivs)) for src, ivs in sorted(out.items()))


def _merged(intervals: list[tuple[int, int]]) -> Intervals:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _covered(mine: Intervals, theirs: Intervals) -> bool:
    return all(any(a <= lo and hi <= b for a, b in theirs) for lo, hi in mine)


class ChangePosition(NamedTuple):
    """Where one row change sits: rows event start ``pos`` in ``file``, and ``row`` inside it."""

    file: str
    pos: int
    row: int

    def in_slice(self, lo: BinlogOffset, hi: BinlogOffset) -> bool:
        """True when the change lies in ``(lo, hi]``: written after ``lo`` and before ``hi``."""
        return not lo.covers(self) and hi.covers(self)

    def sort_key(self) -> tuple[int, int, int]:
        return (_file_key(self.file)[1], self.pos, self.row)


def byte_cuts(start: BinlogOffset, end: BinlogOffset, sizes: dict[str, int], parts: int, min_bytes: int,
              skip_cost: float) -> list[BinlogOffset]:
    """Where to cut the slice ``(start, end]`` so that ``parts`` readers finish it together.

    Every reader starts at ``start`` (only there does it know the table maps) and walks over
    the events before its piece without decoding them, which costs ``skip_cost`` of decoding
    them. So piece ``k`` gets ``(1 - skip_cost) ** k`` times the bytes of the first piece. The
    cuts are byte positions (``cut=True``), usually inside a transaction: each piece owns the
    transactions that begin in it (see ``MySqlBinlogReader.read_event_rows``).

    Args:
        start: the slice start.
        end: the slice end.
        sizes: the server's binlog files and their sizes (``SHOW BINARY LOGS``).
        parts: the most pieces wanted.
        min_bytes: the least bytes a piece must hold to be worth its own reader.
        skip_cost: the cost of walking over a byte relative to decoding it (0 to 1).

    Returns:
        The ``n - 1`` inner cuts of ``n`` pieces, in order; empty when the slice stays whole
        (too small, or a file of it is not in ``sizes``).
    """
    files = _files_between(start, end, sizes)
    if files is None:
        return []
    spans = [(f, start.pos if f == start.file else 0, end.pos if f == end.file else sizes[f]) for f in files]
    total = sum(max(0, hi - lo) for _, lo, hi in spans)
    return [_at_byte(spans, at) for at in piece_offsets(total, parts, min_bytes, skip_cost)]


def capped_end(start: BinlogOffset, end: BinlogOffset, sizes: dict[str, int], max_bytes: int) -> BinlogOffset:
    """``end``, or the cut ``max_bytes`` after ``start`` when the slice ``(start, end]`` holds more.

    Bytes are counted across files (from ``start`` to the end of its file, then each later
    file from its beginning). Spark writes the result to the offset log before the batch runs
    and replays a batch with it, so the batch reads the same transactions on every replay.

    Args:
        start: the batch start.
        end: the server's current position (a position between transactions).
        sizes: the server's binlog files and their sizes (``SHOW BINARY LOGS``).
        max_bytes: the most bytes one batch's slice may span (> 0).

    Returns:
        ``end`` itself when the slice is short enough, or a file of it is not in ``sizes``
        (the reader will say why); else a cut (``cut=True``) of ``end``'s server.
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
    if not start.is_before(end) or not start.same_server(end):
        return end
    files = _files_between(start, end, sizes)
    if files is None:
        return end
    spans = [(f, start.pos if f == start.file else 0, end.pos if f == end.file else sizes[f]) for f in files]
    if sum(max(0, hi - lo) for _, lo, hi in spans) <= max_bytes:
        return end
    at = _at_byte(spans, max_bytes)
    return BinlogOffset(at.file, at.pos, server=end.server, cut=True)


def _files_between(start: BinlogOffset, end: BinlogOffset, sizes: dict[str, int]) -> list[str] | None:
    base, first = _file_key(start.file)
    last = _file_key(end.file)[1]
    files = {idx: name for name in sizes for b, idx in [_file_key(name)] if b == base and first <= idx <= last}
    if set(files) != set(range(first, last + 1)):
        return None  # a file is missing: the reader will say why
    return [files[i] for i in range(first, last + 1)]


def _at_byte(spans: list[tuple[str, int, int]], offset: int) -> BinlogOffset:
    for file, lo, hi in spans:
        if offset < hi - lo:
            return BinlogOffset(file, lo + offset, cut=True)
        offset -= max(0, hi - lo)
    file, _, hi = spans[-1]
    return BinlogOffset(file, hi, cut=True)
