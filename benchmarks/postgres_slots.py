"""Shared slot or one slot per backfill reader: what a Postgres snapshot chunk's backfill costs each way.

Run: ``.venv/bin/python benchmarks/postgres_slots.py [--rows 200000] [--chunks 40] [--readers 1,2]
[--write-rate 2000] [--long-transaction 10]`` (about 3 minutes with the defaults).

A chunk's backfill needs the changes of its key range between its low watermark (LW) and high
watermark (HW). Two ways to get them from PostgreSQL's logical decoding:

* **shared** (what the job does, docs/sources/postgres.md "One slot per job, readers take turns"): every
  reader peeks the job's one slot (``pg_logical_slot_peek_binary_changes(slot, HW, ...)``), taking
  turns because a slot serves one session at a time. A peek decodes from the slot's position, so
  each chunk's peek reads the WAL of the batch so far, not only its window; the slot is advanced
  after each batch (here: every ``--chunks-per-batch`` chunks, to the batch's last HW, as the
  job's release after the commit does).
* **per reader** (Flink CDC's choice for its Postgres backfill): each chunk creates a temporary
  logical slot, whose consistent point is its LW, SELECTs the chunk, takes the HW, and peeks only
  its own slot, so it decodes only its window; the slot goes with the session. Creating a logical
  slot waits for every transaction running at that moment to end (the snapshot builder needs a
  consistent point), so it is timed apart, with short writers only and with one open transaction
  (``--long-transaction`` seconds) that a reporting query or an idle-in-transaction session holds.

Both run on the same server and table in one run, under the same background writer (single-row
UPDATEs at ``--write-rate``/s, so each window has changes to decode). Prints, per way and reader
count: wall time for all chunks, per chunk the median and p95 of the waits (turns on the shared
slot, slot creation per reader), of the peek, and the messages each peek decoded; writes
``benchmarks/results/postgres-slots-<date>.json``. Timings are never asserted anywhere; the machine
is shared, so each line notes the load average at its start.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from binlog.postgres.server import with_slot
from cdc.app.sandbox.postgres import PgEndpoint, start_postgres

RESULTS = Path(__file__).with_name("results")
TABLE = "public.items"
PUBLICATION = "spark_cdc"  # the sandbox database's FOR ALL TABLES publication
_PEEK = ("SELECT count(*), coalesce(sum(length(data)), 0) FROM pg_logical_slot_peek_binary_changes("
         "%s, %s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %s)")


@dataclass
class ChunkCost:
    """One chunk's backfill: seconds waiting (turns or slot creation), SELECTing, peeking; the
    pgoutput messages and bytes its peek decoded."""

    wait_s: float
    select_s: float
    peek_s: float
    messages: int
    bytes: int


@dataclass
class Arm:
    """One way at one reader count."""

    way: str
    readers: int
    wall_s: float
    load: float
    chunks: list[ChunkCost] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def total(values: list[float]) -> float:
            return round(sum(values), 4)

        peeks = [c for c in self.chunks if c.peek_s or c.messages]
        return {"way": self.way, "readers": self.readers, "wall_s": round(self.wall_s, 3), "load": self.load,
                "peeks": len(peeks), "wait_s": total([c.wait_s for c in self.chunks]),
                "select_s": total([c.select_s for c in self.chunks]),
                "peek_s": total([c.peek_s for c in self.chunks]),
                "messages": sum(c.messages for c in self.chunks),
                "mib_decoded": round(sum(c.bytes for c in self.chunks) / 2**20, 2)}


def _load() -> float:
    return os.getloadavg()[0]


def _lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _select(conn: psycopg.Connection[Any], lo: int, hi: int) -> None:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {TABLE} WHERE id >= %s AND id < %s", (lo, hi))
        cur.fetchall()


def _peek(conn: psycopg.Connection[Any], slot: str, upto: str) -> tuple[int, int]:
    row = conn.execute(_PEEK, (slot, upto, PUBLICATION)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _turns(action: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``action`` on the shared slot as the job does (``server.with_slot``: retried while
    another reader holds the slot); returns its result and the seconds spent before the attempt
    that succeeded."""
    took: list[float] = []

    def timed() -> Any:
        t0 = time.monotonic()
        out = action()
        took.append(time.monotonic() - t0)
        return out

    started = time.monotonic()
    out = with_slot(timed, "shared", wait_s=3600)
    return out, time.monotonic() - started - took[-1]


class Writer(threading.Thread):
    """Single-row UPDATEs of random keys at ``rate``/s, autocommit, until stopped."""

    def __init__(self, endpoint: PgEndpoint, database: str, rows: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.database, self.rows, self.rate = endpoint, database, rows, rate
        self.stop = threading.Event()
        self.written = 0

    def run(self) -> None:
        import random

        rng = random.Random(7)
        with contextlib.closing(self.endpoint.connect(self.database)) as conn:
            started = time.monotonic()
            while not self.stop.is_set():
                conn.execute(f"UPDATE {TABLE} SET n = n + 1, v = md5(random()::text) WHERE id = %s",
                             (rng.randrange(self.rows),))
                self.written += 1
                ahead = self.written / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)


def shared_arm(cdc: PgEndpoint, database: str, bounds: list[tuple[int, int]], readers: int,
               per_batch: int) -> Arm:
    """The job's way: a batch's chunks are SELECTed in parallel (each after its LW), then one log
    reader peeks the job's slot once, from its position to the batch's HW, for every chunk of the
    batch (and the stream); the slot advances to the HW after the batch."""
    slot = f"shared_{uuid.uuid4().hex[:8]}"
    with contextlib.closing(cdc.connect(database)) as driver, _readers(cdc, database, readers) as conns:
        driver.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        arm = Arm("shared", readers, 0.0, _load())
        started = time.monotonic()
        try:
            for first in range(0, len(bounds), per_batch):
                _run_readers(conns, bounds[first:first + per_batch], _select_chunk, arm)
                hw = _lsn(driver)
                t0 = time.monotonic()
                (messages, size), waited = _turns(functools.partial(_peek, driver, slot, hw))
                arm.chunks.append(ChunkCost(waited, 0.0, time.monotonic() - t0 - waited, messages, size))
                _turns(functools.partial(driver.execute, "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                                         (slot, hw)))
            arm.wall_s = time.monotonic() - started
        finally:
            _turns(lambda: driver.execute("SELECT pg_drop_replication_slot(%s)", (slot,)))
    return arm


def _select_chunk(conn: psycopg.Connection[Any], lo: int, hi: int) -> tuple[ChunkCost, str]:
    lw = _lsn(conn)  # the LW: the job records it before the SELECT
    t0 = time.monotonic()
    _select(conn, lo, hi)
    return ChunkCost(0.0, time.monotonic() - t0, 0.0, 0, 0), lw


def per_reader_arm(cdc: PgEndpoint, database: str, bounds: list[tuple[int, int]], readers: int) -> Arm:
    """Flink CDC's way: each chunk on a temporary slot of its own, created at the LW, peeked to the
    HW right after the SELECT, dropped; the stream then decodes the snapshot's period again from
    the job's slot (made before the first chunk, as Flink's stream split starts there)."""
    arm = Arm("per reader", readers, 0.0, _load())
    slot = f"stream_{uuid.uuid4().hex[:8]}"
    with contextlib.closing(cdc.connect(database)) as driver, _readers(cdc, database, readers) as conns:
        driver.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        started = time.monotonic()
        try:
            _run_readers(conns, bounds, _own_slot_chunk, arm)
            hw = _lsn(driver)
            t0 = time.monotonic()
            messages, size = _peek(driver, slot, hw)
            arm.chunks.append(ChunkCost(0.0, 0.0, time.monotonic() - t0, messages, size))
            arm.wall_s = time.monotonic() - started
        finally:
            driver.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return arm


def _own_slot_chunk(conn: psycopg.Connection[Any], lo: int, hi: int) -> tuple[ChunkCost, str]:
    slot = f"chunk_{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', true)", (slot,))
    t1 = time.monotonic()
    _select(conn, lo, hi)
    t2 = time.monotonic()
    hw = _lsn(conn)
    messages, size = _peek(conn, slot, hw)
    t3 = time.monotonic()
    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return ChunkCost(t1 - t0, t2 - t1, t3 - t2, messages, size), hw


def _run_readers(conns: list[psycopg.Connection[Any]], bounds: list[tuple[int, int]],
                 chunk: Callable[[psycopg.Connection[Any], int, int], tuple[ChunkCost, str]], arm: Arm) -> list[str]:
    """One thread per reader connection; they take chunks from a queue."""
    todo: queue.Queue[tuple[int, int]] = queue.Queue()
    for b in bounds:
        todo.put(b)
    hws: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(conn: psycopg.Connection[Any]) -> None:
        try:
            while True:
                try:
                    lo, hi = todo.get_nowait()
                except queue.Empty:
                    return
                cost, hw = chunk(conn, lo, hi)
                with lock:
                    arm.chunks.append(cost)
                    hws.append(hw)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return hws


@contextlib.contextmanager
def _readers(cdc: PgEndpoint, database: str, readers: int) -> Iterator[list[psycopg.Connection[Any]]]:
    """The readers' connections, open for a whole arm (as executors keep theirs)."""
    conns = [cdc.connect(database) for _ in range(readers)]
    try:
        yield conns
    finally:
        for c in conns:
            c.close()


def _lsn_key(lsn: str) -> int:
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def creation_under_open_transaction(cdc: PgEndpoint, admin: PgEndpoint, database: str, hold_s: float) -> dict[str, float]:
    """How long creating a logical slot takes while another session holds a transaction open for
    ``hold_s`` seconds (it holds a transaction id: one write)."""
    with contextlib.closing(admin.connect(database)) as holder:
        holder.autocommit = False
        holder.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = 0")  # opens the transaction
        release = threading.Timer(hold_s, holder.commit)
        release.start()
        t0 = time.monotonic()
        with contextlib.closing(cdc.connect(database)) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', true)",
                         (f"blocked_{uuid.uuid4().hex[:8]}",))
            waited = time.monotonic() - t0
        release.join()
    return {"hold_s": hold_s, "create_s": waited}


@contextlib.contextmanager
def server(rows: int) -> Iterator[tuple[Any, str]]:
    box = start_postgres(settings={"max_replication_slots": "16", "max_wal_senders": "16"})
    try:
        database = box.create_database()
        with contextlib.closing(box.admin.connect(database)) as conn:
            conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, n int NOT NULL, v text NOT NULL, "
                         "pad text NOT NULL)")
            conn.execute(f"INSERT INTO {TABLE} SELECT i, 0, md5(i::text), repeat('x', 120) "
                         "FROM generate_series(0, %s - 1) i", (rows,))
            conn.execute(f"VACUUM ANALYZE {TABLE}")
        yield box, database
    finally:
        box.stop()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows of the table")
    p.add_argument("--chunks", type=int, default=40, help="snapshot chunks (even key ranges)")
    p.add_argument("--chunks-per-batch", type=int, default=8, help="chunks between the shared slot's advances")
    p.add_argument("--readers", default="1,2", help="comma-separated reader counts")
    p.add_argument("--write-rate", type=int, default=2000, help="background single-row UPDATEs/s")
    p.add_argument("--long-transaction", type=float, default=10.0,
                   help="seconds an open transaction is held while a slot is created (0: skip)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    step = -(-args.rows // args.chunks)
    bounds = [(lo, min(lo + step, args.rows)) for lo in range(0, args.rows, step)]
    arms: list[Arm] = []
    with server(args.rows) as (box, database):
        writer = Writer(box.admin, database, args.rows, args.write_rate)
        writer.start()
        try:
            time.sleep(2)  # the writer reaches its rate
            for readers in (int(r) for r in args.readers.split(",")):
                for way in ("shared", "per reader"):
                    arm = (shared_arm(box.cdc, database, bounds, readers, args.chunks_per_batch) if way == "shared"
                           else per_reader_arm(box.cdc, database, bounds, readers))
                    arms.append(arm)
                    s = arm.summary()
                    print(f"{way:>10} x{readers}: {s['wall_s']:6.2f} s wall (load {s['load']:.1f}); "
                          f"{s['peeks']} peeks decoded {s['messages']} messages ({s['mib_decoded']:.1f} MiB) "
                          f"in {s['peek_s']:.2f} s; slot waits and creations {s['wait_s']:.2f} s; "
                          f"SELECTs {s['select_s']:.2f} s", flush=True)
            blocked = (creation_under_open_transaction(box.cdc, box.admin, database, args.long_transaction)
                       if args.long_transaction > 0 else None)
            if blocked:
                print(f"creating a slot while a transaction stays open {blocked['hold_s']:.0f} s: "
                      f"{blocked['create_s']:.2f} s", flush=True)
        finally:
            writer.stop.set()
            writer.join()
    by = {(a.way, a.readers): a for a in arms}
    for readers in sorted({a.readers for a in arms}):
        shared, own = by[("shared", readers)], by[("per reader", readers)]
        print(f"x{readers}: per-reader slots take {own.wall_s / shared.wall_s:.2f}x the shared slot's wall time")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"postgres-slots-{dt.date.today().isoformat()}.json"
    out.write_text(json.dumps({"args": vars(args), "arms": [a.summary() for a in arms],
                               "slot_creation_under_open_transaction": blocked}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
