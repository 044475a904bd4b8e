"""The lock-free chunk reader's throughput on TPC-DS customer, next to the raw scan limit.

Run: ``.venv/bin/python benchmarks/chunk_reader.py [--scale 100] [--chunk-sizes 8096,50000]
[--backend auto] [--repeat 1] [--with-writes] [--profile]``.

Starts its own mariadbd sandbox, loads TPC-DS ``customer`` at ``--scale`` (100 = 2,000,000 rows)
and measures, in one run on the same data:

* ``raw scan``: ``mariadb --quick -e 'SELECT * FROM db.customer' > /dev/null``, the limit, timed
  first and again last (the machine's load drifts; ratios use the faster of the two); and, for
  reference, one client running every chunk's ``SELECT *`` (the limit of chunked reading);
* splitting: :class:`chunking.splitter.ChunkSplitter` cutting the table, per chunk size;
* the chunk reader (:class:`chunking.reader.ChunkReader`: LW, SELECT, HW, binlog backfill), per
  chunk size, sequentially on one reader, then with 2 reader processes (each its own server id,
  each reading every other chunk). The read hooks time the pieces: LW (a fresh connection and a
  consistent-snapshot status read), SELECT (fetch into Arrow, its connection included) and HW
  plus backfill (``SHOW MASTER STATUS`` and, when writes happened, the binlog ``(LW, HW]``);
* the fixed cost of one chunk: the same reader over 200 one-row chunks;
* ``--with-writes``: a writer thread runs ~200 random single-row UPDATEs/s during the chunk
  reader phases, so backfill has work; the merged change counts are reported.

Checks that the rows read add up to ``COUNT(*)`` (updates keep the count), prints a table and
writes it to ``benchmarks/results/chunk_reader-<scale>.json``. Not a test: asserts nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import json
import multiprocessing as mp
import os
import pstats
import random
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from select_readers import raw_scan, timed
from tpcds import CustomerTable, customer_sandbox

from binlog.mysql.connection import ConnectionSettings
from binlog.mysql.fetch import BackendName, choose_backend, fetch_arrow, render_sql
from binlog.mysql.reader import ServerIdRange
from cdc.model.schema import TableId, TableSchema, load_table_schema, quote_ident
from chunking.chunks import SnapshotSplit
from chunking.reader import ChunkReader, ChunkReaderOptions, ReadHooks
from chunking.splitter import ChunkSplitter, SplitterOptions

SERVER_IDS = ServerIdRange(5400, 5409)  # one id per concurrent reader
WORKERS = 2  # the machine has 2 cores
FIXED_COST_CHUNKS = 200  # 1-row chunks read to measure the per-chunk cost
RESULTS = Path(__file__).with_name("results")


@dataclass
class ReadStats:
    """What one pass of a chunk reader over some chunks measured (seconds are wall clock)."""

    rows: int = 0
    chunks: int = 0
    seconds: float = 0.0
    lw: float = 0.0  # summed over chunks
    select: float = 0.0
    hw_backfill: float = 0.0
    changes_applied: int = 0
    binlog_reads: int = 0  # chunks whose LW < HW, so the binlog was read
    peak_rss_mb: float = 0.0

    def add(self, other: ReadStats) -> None:
        """Merge another reader's counts (parallel readers); the caller sets ``seconds``."""
        for name in ("rows", "chunks", "lw", "select", "hw_backfill", "changes_applied",
                     "binlog_reads"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.peak_rss_mb = max(self.peak_rss_mb, other.peak_rss_mb)


@dataclass
class Row:
    """One line of the printed table."""

    name: str
    rows: int
    seconds: float
    chunks: int = 0
    stats: ReadStats | None = None


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def split_table(cdc: ConnectionSettings, schema: TableSchema, size: int) -> list[SnapshotSplit]:
    """Every chunk of the table at ``size`` rows, as the driver's splitter produces them."""
    with contextlib.closing(cdc.connect()) as conn:
        splitter = ChunkSplitter(conn, schema, SplitterOptions(chunk_size=size))
        splits: list[SnapshotSplit] = []
        while not splitter.finished:
            splits += splitter.next_chunks(1000)
    return splits


def open_reader(cdc: ConnectionSettings, schema: TableSchema, key_column: str, server_id: int,
                backend: BackendName) -> ChunkReader:
    """A :class:`ChunkReader` with its connection open and the fetch driver loaded (untimed)."""
    reader = ChunkReader(cdc, schema, ChunkReaderOptions(server_id=server_id, fetch_backend=backend))
    reader.order(key_column)  # opens the reader's own connection
    list(fetch_arrow(cdc, schema, "FALSE", backend=backend))  # imports the driver
    pa.array([0])  # pyarrow imports pandas on its first list conversion (~1 s), as backfill does
    return reader


def read_chunks(reader: ChunkReader, splits: list[SnapshotSplit]) -> ReadStats:
    """Read ``splits`` one after another with ``reader``, timing each step; closes ``reader``.

    Each chunk's rows are counted and dropped at once, so memory stays one chunk.
    """
    marks: list[float] = []
    hooks = ReadHooks(after_low_watermark=lambda: marks.append(time.perf_counter()),
                      after_select=lambda: marks.append(time.perf_counter()))
    stats = ReadStats()
    with reader:
        started = time.perf_counter()
        for split in splits:
            marks.clear()
            begin = time.perf_counter()
            result = reader.read(split, hooks)
            end = time.perf_counter()
            stats.lw += marks[0] - begin
            stats.select += marks[1] - marks[0]
            stats.hw_backfill += end - marks[1]
            stats.rows += result.rows.num_rows
            stats.chunks += 1
            stats.changes_applied += result.changes_applied
            stats.binlog_reads += result.low_watermark.is_before(result.high_watermark)
            del result
        stats.seconds = time.perf_counter() - started
    stats.peak_rss_mb = peak_rss_mb()
    return stats


def read_sequential(cdc: ConnectionSettings, schema: TableSchema, splits: list[SnapshotSplit],
                    backend: BackendName) -> ReadStats:
    """One reader in this process over every chunk."""
    reader = open_reader(cdc, schema, splits[0].key_column, SERVER_IDS.first, backend)
    return read_chunks(reader, splits)


def _worker(cdc: ConnectionSettings, schema: TableSchema, splits: list[SnapshotSplit],
            server_id: int, backend: BackendName, go: Any, out: Any) -> None:
    """A reader process: set up, wait for ``go`` (set-up is not timed), read, send the stats."""
    try:
        reader = open_reader(cdc, schema, splits[0].key_column, server_id, backend)
        out.put(("ready", server_id))
        go.wait()
        out.put(("done", asdict(read_chunks(reader, splits))))
    except Exception as exc:  # shipped to the parent, which raises it
        out.put(("error", repr(exc)))


def read_parallel(cdc: ConnectionSettings, schema: TableSchema, splits: list[SnapshotSplit],
                  backend: BackendName) -> ReadStats:
    """Read ``splits`` with WORKERS processes (every WORKERS-th chunk each), wall-clock timed.

    Raises:
        RuntimeError: a reader process failed.
    """
    ctx = mp.get_context("spawn")  # the parent may run a writer thread: do not fork it
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(cdc, schema, splits[i::WORKERS], SERVER_IDS.first + i,
                                               backend, go, out)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            kind, payload = out.get(timeout=120)
            if kind != "ready":
                raise RuntimeError(f"a chunk reader process failed: {payload}")
        started = time.perf_counter()
        go.set()
        total = ReadStats()
        for _ in procs:
            kind, payload = out.get(timeout=3600)
            if kind != "done":
                raise RuntimeError(f"a chunk reader process failed: {payload}")
            total.add(ReadStats(**payload))
        total.seconds = time.perf_counter() - started
        return total
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()


class Writer(threading.Thread):
    """Random single-row UPDATEs at about ``rate`` per second until stopped (or ``limit`` s)."""

    def __init__(self, admin: ConnectionSettings, table: CustomerTable, rate: float,
                 limit: float = 3600.0) -> None:
        super().__init__(name="writer", daemon=True)
        self.admin, self.table, self.rate, self.limit = admin, table, rate, limit
        self.stopping = threading.Event()
        self.updates = 0
        self.seconds = 0.0
        self.error: str | None = None

    def run(self) -> None:
        started = time.perf_counter()
        try:
            self._write(started)
        except Exception as exc:  # reported with the counts; the readers go on
            self.error = repr(exc)
        self.seconds = time.perf_counter() - started

    def _write(self, started: float) -> None:
        sql = (f"UPDATE {quote_ident(self.table.table)} SET `c_last_review_date_sk` = "
               "COALESCE(`c_last_review_date_sk`, 0) + 1 WHERE `c_customer_sk` = %s")
        rng = random.Random(42)
        with contextlib.closing(self.admin.connect(self.table.database)) as conn, \
                conn.cursor() as cur:
            while not self.stopping.is_set() and time.perf_counter() - started < self.limit:
                cur.execute(sql, (rng.randint(1, self.table.rows),))
                self.updates += 1
                pause = started + self.updates / self.rate - time.perf_counter()
                if pause > 0:
                    self.stopping.wait(pause)

    def stop(self) -> None:
        self.stopping.set()
        self.join()


def chunk_queries(schema: TableSchema, splits: list[SnapshotSplit]) -> list[str]:
    """``SELECT * ... WHERE <range>`` of every chunk, for the chunked raw scan."""
    return [f"SELECT * FROM {schema.table_id.quoted()} WHERE {render_sql(*s.where_clause())}"
            for s in splits]


def best(fn: Callable[[], ReadStats], repeat: int) -> ReadStats:
    """The fastest of ``repeat`` passes."""
    return min((fn() for _ in range(repeat)), key=lambda s: s.seconds)


def measure(table: CustomerTable, sizes: list[int], backend: BackendName, repeat: int,
            with_writes: bool, profile: bool) -> tuple[list[Row], dict[str, Any]]:
    """Every measurement of the run, in order; also the final COUNT(*) and writer counts."""
    cdc = table.box.cdc
    with contextlib.closing(cdc.connect()) as conn:
        schema = load_table_schema(conn, TableId(table.database, table.table))
    full = [f"SELECT * FROM {schema.table_id.quoted()}"]
    raw_scan(cdc, full)  # warm the buffer pool and page cache
    _, seconds = timed(partial(raw_scan, cdc, full), repeat)
    rows = [Row("raw scan (mariadb --quick)", table.rows, seconds, 1)]
    plans: dict[int, list[SnapshotSplit]] = {}
    for size in sizes:
        started = time.perf_counter()
        plans[size] = split_table(cdc, schema, size)
        rows.append(Row(f"split, chunks of {size:,}", 0, time.perf_counter() - started,
                        len(plans[size])))
    for size, splits in plans.items():
        _, seconds = timed(partial(raw_scan, cdc, chunk_queries(schema, splits)), repeat)
        rows.append(Row(f"raw scan, chunks of {size:,}", table.rows, seconds, len(splits)))
    writer = Writer(table.box.admin, table, 200.0) if with_writes else None
    if writer:
        writer.start()
    try:
        rows += measure_readers(cdc, schema, plans, backend, repeat)
        if profile:
            profile_read(cdc, schema, plans[min(sizes)], backend)
    finally:
        if writer:
            writer.stop()
    _, seconds = timed(partial(raw_scan, cdc, full), repeat)  # load drifts on a shared machine
    rows.append(Row("raw scan (again, at the end)", table.rows, seconds, 1))
    writes: dict[str, Any] = {}
    if writer:
        writes = {"updates": writer.updates, "seconds": round(writer.seconds, 2)}
        writes.update({"error": writer.error} if writer.error else {})
    with contextlib.closing(cdc.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {schema.table_id.quoted()}")
        (count,) = cur.fetchone() or (0,)
    return rows, {"count": int(count), "writes": writes,
                  "backend": choose_backend(schema, backend).name}


def measure_readers(cdc: ConnectionSettings, schema: TableSchema,
                    plans: dict[int, list[SnapshotSplit]], backend: BackendName,
                    repeat: int) -> list[Row]:
    """The chunk reader over every plan, 1 then WORKERS readers; then its fixed cost per chunk."""
    rows: list[Row] = []
    for size, splits in plans.items():
        seq = best(partial(read_sequential, cdc, schema, splits, backend), repeat)
        rows.append(Row(f"chunk reader x1, {size:,}", seq.rows, seq.seconds, seq.chunks, seq))
        par = best(partial(read_parallel, cdc, schema, splits, backend), repeat)
        rows.append(Row(f"chunk reader x{WORKERS}, {size:,}", par.rows, par.seconds,
                        par.chunks, par))
    first = next(iter(plans.values()))[0]
    tiny = [replace(first, split_id=i, start=k, end=k + 1)  # one key each: the fixed cost
            for i, k in enumerate(range(1000, 1000 + FIXED_COST_CHUNKS))]
    fixed = best(partial(read_sequential, cdc, schema, tiny, backend), repeat)
    rows.append(Row("fixed cost, 1-row chunks x1", fixed.rows, fixed.seconds, fixed.chunks, fixed))
    return rows


def profile_read(cdc: ConnectionSettings, schema: TableSchema, splits: list[SnapshotSplit],
                 backend: BackendName) -> None:
    """cProfile one sequential pass; print the top 15 functions by total and cumulative time."""
    prof = cProfile.Profile()
    reader = open_reader(cdc, schema, splits[0].key_column, SERVER_IDS.first, backend)
    prof.runcall(read_chunks, reader, splits)
    for key in ("tottime", "cumulative"):
        print(f"\ncProfile of one sequential pass over {len(splits)} chunks, top 15 by {key}:")
        pstats.Stats(prof).sort_stats(key).print_stats(15)


def row_dict(row: Row, raw: Row) -> dict[str, Any]:
    """A table line as JSON-ready numbers (ratio against ``raw``, the faster full raw scan)."""
    d: dict[str, Any] = {"name": row.name, "rows": row.rows, "chunks": row.chunks,
                         "seconds": round(row.seconds, 3)}
    if row.rows:
        d["rows_per_s"] = round(row.rows / row.seconds)
        d["ratio_to_raw_scan"] = round(row.rows / row.seconds / (raw.rows / raw.seconds), 3)
    if row.stats:
        s = row.stats
        spent = s.lw + s.select + s.hw_backfill
        d["ms_per_chunk"] = round(1000 * spent / s.chunks, 2)
        for name in ("lw", "select", "hw_backfill"):
            d[f"{name}_share"] = round(getattr(s, name) / spent, 3)
        d.update(changes_applied=s.changes_applied, binlog_reads=s.binlog_reads,
                 peak_rss_mb=round(s.peak_rss_mb, 1))
    return d


def wrong_counts(lines: list[dict[str, Any]], count: int) -> dict[str, int]:
    """The reader lines whose row total is off: every pass must read COUNT(*) rows."""
    expected = {d["name"]: count for d in lines if d["name"].startswith("chunk reader")}
    expected.update({d["name"]: FIXED_COST_CHUNKS for d in lines if d["name"].startswith("fixed")})
    return {d["name"]: d["rows"] for d in lines if expected.get(d["name"], d["rows"]) != d["rows"]}


def report(lines: list[dict[str, Any]]) -> str:
    head = (f"{'name':<28} {'chunks':>6} {'rows':>10} {'seconds':>8} {'rows/s':>10} {'vs raw':>7}"
            f" {'ms/chunk':>8} {'LW':>4} {'SELECT':>6} {'HW+bf':>5} {'changes':>7}")
    out = [head]
    for d in lines:
        pct = [f"{100 * d[k]:.0f}%" if k in d else "" for k in
               ("lw_share", "select_share", "hw_backfill_share")]
        rate = f"{d['rows_per_s']:>10,}" if "rows_per_s" in d else " " * 10
        ratio = f"{d['ratio_to_raw_scan']:>6.2f}x" if "ratio_to_raw_scan" in d else " " * 7
        ms = f"{d['ms_per_chunk']:>8.2f}" if "ms_per_chunk" in d else " " * 8
        out.append(f"{d['name']:<28} {d['chunks']:>6} {d['rows']:>10,} {d['seconds']:>8.3f} "
                   f"{rate} {ratio} {ms} {pct[0]:>4} {pct[1]:>6} {pct[2]:>5} "
                   f"{d.get('changes_applied', ''):>7}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=cast(str, __doc__).split("\n", 1)[0])
    parser.add_argument("--scale", type=int, default=100, help="TPC-DS scale factor (100 = 2M rows)")
    parser.add_argument("--chunk-sizes", default="8096,50000", help="comma-separated rows per chunk")
    parser.add_argument("--backend", default="auto", help="fetch backend (chunking/fetch.py)")
    parser.add_argument("--repeat", type=int, default=1, help="passes per measurement (best kept)")
    parser.add_argument("--with-writes", action="store_true",
                        help="~200 random UPDATEs/s during the chunk reader passes")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile one sequential pass at the smallest chunk size")
    args = parser.parse_args()
    sizes = [int(x) for x in args.chunk_sizes.split(",") if x]
    backend = cast(BackendName, args.backend)
    started, load = time.perf_counter(), os.getloadavg()[0]
    with customer_sandbox(args.scale) as table:
        print(f"TPC-DS customer, scale {args.scale}: {table.rows:,} rows loaded in "
              f"{time.perf_counter() - started:.1f}s; load average {load:.2f}")
        rows, facts = measure(table, sizes, backend, args.repeat, args.with_writes, args.profile)
    limit = min((r for r in rows if r.name.startswith("raw scan (")), key=lambda r: r.seconds)
    lines = [row_dict(r, limit) for r in rows]
    print(f"\nbackend {facts['backend']}, best of {args.repeat}, writes {facts['writes'] or 'none'};"
          f" 'vs raw' is against {limit.name}")
    print(report(lines))
    wrong = wrong_counts(lines, facts["count"])
    print(f"check: rows read == COUNT(*) = {facts['count']:,} (1-row chunks: one each): "
          f"{wrong or 'OK'}")
    workers = [d["peak_rss_mb"] for d in lines if f"x{WORKERS}" in d["name"]]
    print(f"peak RSS: this process {peak_rss_mb():.0f} MiB, each reader process at most "
          f"{max(workers, default=0):.0f} MiB")
    print(f"load average at the end {os.getloadavg()[0]:.2f} (2 cores shared with other work)")
    out = RESULTS / f"chunk_reader-{args.scale}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "scale": args.scale, "rows": table.rows, "date": dt.date.today().isoformat(),
        "repeat": args.repeat, "with_writes": args.with_writes, **facts,
        "check_ok": not wrong, "peak_rss_mb": round(peak_rss_mb(), 1),
        "load_average": [load, os.getloadavg()[0]], "results": lines,
    }, indent=2) + "\n")
    print(f"wrote {out}")
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
