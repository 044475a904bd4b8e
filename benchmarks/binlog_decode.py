"""How fast the binlog reader decodes row changes, against mysql-replication alone.

Starts its own MariaDB sandbox, writes N updated rows in two shapes, and reads them back:

* ``bulk``: multi-row UPDATE statements (many rows per rows event);
* ``oltp``: one single-row UPDATE per transaction (GTID, annotate, table map, rows, XID each).

For each shape it measures, in the same run, mysql-replication's raw decoding (iterate the
events, decode ``.rows``, no conversion) and ``MySqlBinlogReader.read`` (typed ChangeEvents),
then prints rows/s, the ratio, what a stream (re)open costs, and a cProfile top 10 of the reader.

    .venv/bin/python benchmarks/binlog_decode.py [--rows 30000] [--oltp-rows 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import itertools
import pstats
import time
from collections.abc import Callable
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import UpdateRowsEvent

from binlog.mysql.positions import BinlogOffset
from binlog.mysql.reader import BinlogReaderOptions, MySqlBinlogReader, current_offset
from cdc.app.sandbox.mysql import MariaDbSandbox, Sandbox
from cdc.model.schema import TableId

DDL = """
CREATE TABLE bench (
  id INT PRIMARY KEY, qty INT, amount DECIMAL(12, 2), price DOUBLE, name VARCHAR(64),
  flag TINYINT(1), created DATETIME(6), updated TIMESTAMP(6) NULL, note VARCHAR(200)
) DEFAULT CHARSET=utf8mb4
"""


def fill(box: Sandbox, db: str, rows: int) -> None:
    with contextlib.closing(box.admin.connect(db)) as conn, conn.cursor() as cur:
        cur.execute(DDL)
        for lo in range(0, rows, 5000):
            values = ", ".join(
                f"({i}, {i % 100}, {i}.25, {i}.5, 'name {i}', {i % 2}, NOW(6), NOW(6), 'note')"
                for i in range(lo, min(lo + 5000, rows)))
            cur.execute(f"INSERT INTO bench VALUES {values}")


def bulk_updates(box: Sandbox, db: str, rows: int) -> tuple[BinlogOffset, BinlogOffset]:
    with contextlib.closing(box.admin.connect(db)) as conn, conn.cursor() as cur:
        start = current_offset(conn)
        for lo in range(0, rows, 5000):
            cur.execute("UPDATE bench SET qty = qty + 1, updated = NOW(6) "
                        f"WHERE id >= {lo} AND id < {lo + 5000}")
        return start, current_offset(conn)


def oltp_updates(box: Sandbox, db: str, rows: int) -> tuple[BinlogOffset, BinlogOffset]:
    with contextlib.closing(box.admin.connect(db)) as conn, conn.cursor() as cur:
        start = current_offset(conn)
        cur.executemany("UPDATE bench SET qty = qty + 1, updated = NOW(6) WHERE id = %s",
                        [(i,) for i in range(rows)])
        return start, current_offset(conn)


def raw_library(box: Sandbox, db: str, start: BinlogOffset, end: BinlogOffset) -> int:
    """mysql-replication alone: decode every row of the slice, convert nothing."""
    c = box.cdc
    stream = BinLogStreamReader(
        {"host": c.host, "port": c.port, "user": c.user, "password": c.password},
        server_id=6100, resume_stream=True, blocking=False, log_file=start.file,
        log_pos=start.pos, only_schemas=[db], only_tables=["bench"], enable_logging=False,
        only_events=[UpdateRowsEvent])
    rows = 0
    try:
        for ev in stream:
            if BinlogOffset(stream.log_file, ev.packet.log_pos - ev.packet.event_size) \
                    .is_at_or_after(end):
                break
            rows += len(ev.rows)
    finally:
        stream.close()
    return rows


def ours(reader: MySqlBinlogReader, start: BinlogOffset, end: BinlogOffset) -> int:
    return sum(1 for _ in reader.read(start, end))


def best_rate(fn: Callable[[], int], repeats: int = 3) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(repeats):
        began = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - began)
    return rows / best, rows


def open_cost(box: Sandbox, db: str, slices: int = 200) -> tuple[float, float]:
    """Seconds per small slice: continuing on one stream vs reopening it for every slice."""
    offsets = []
    with contextlib.closing(box.admin.connect(db)) as conn, conn.cursor() as cur:
        for i in range(slices + 1):
            offsets.append(current_offset(conn))
            cur.execute(f"UPDATE bench SET qty = qty + 1 WHERE id = {i}")
        cur.execute("UPDATE bench SET qty = qty + 1 WHERE id = 0")  # keep the last slice inside
    config = BinlogReaderOptions(box.cdc, 6101, (TableId(db, "bench"),))
    pairs = list(itertools.pairwise(offsets[1:]))
    timings = []
    for order in (pairs, pairs[::-1]):  # in reverse, no slice starts where the last one ended
        with MySqlBinlogReader(config) as reader:
            ours(reader, offsets[0], offsets[1])  # connect and check the server first
            began = time.perf_counter()
            for a, b in order:
                ours(reader, a, b)
            timings.append((time.perf_counter() - began) / len(order))
            assert reader.stream_opens == (1 if order is pairs else 1 + len(pairs))
    return timings[0], timings[1]


def profile_top(reader: MySqlBinlogReader, start: BinlogOffset, end: BinlogOffset) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(ours, reader, start, end)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(10)
    lines = out.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[first:first + 11])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000, help="rows updated in bulk")
    parser.add_argument("--oltp-rows", type=int, default=5_000, help="single-row transactions")
    args = parser.parse_args(argv)
    box = MariaDbSandbox().start()
    try:
        db = box.create_database("bench")
        fill(box, db, max(args.rows, args.oltp_rows))
        shapes: dict[str, Any] = {"bulk": bulk_updates(box, db, args.rows),
                                  "oltp": oltp_updates(box, db, args.oltp_rows)}
        config = BinlogReaderOptions(box.cdc, 6102, (TableId(db, "bench"),))
        with MySqlBinlogReader(config) as reader:
            for shape, (start, end) in shapes.items():
                raw, n_raw = best_rate(functools.partial(raw_library, box, db, start, end))
                typed, n = best_rate(functools.partial(ours, reader, start, end))
                assert n == n_raw, (n, n_raw)
                print(f"{shape:5} {n:7d} update rows: mysql-replication raw {raw:9,.0f} rows/s, "
                      f"MySqlBinlogReader {typed:9,.0f} rows/s (ratio {typed / raw:.2f})")
            continued, reopened = open_cost(box, db)
            print(f"small slice: {continued * 1000:.2f} ms continuing the stream, "
                  f"{reopened * 1000:.2f} ms reopening it (open cost ~{(reopened - continued) * 1000:.2f} ms)")
            print("\ncProfile of MySqlBinlogReader.read, bulk shape, top 10 by own time:")
            print(profile_top(reader, *shapes["bulk"]))
    finally:
        box.stop()


if __name__ == "__main__":
    main()
