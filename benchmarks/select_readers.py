"""Chunk SELECT -> Arrow: rows/s of each fetch backend against the raw scan, on TPC-DS customer.

Run: ``.venv/bin/python benchmarks/select_readers.py [--scale 100] [--chunk-rows 50000,8096]``.

Starts its own mariadbd sandbox, loads TPC-DS ``customer`` at ``--scale`` (100 = 2,000,000 rows),
and measures, for the whole table and for chunk-sized key ranges (one ``fetch_arrow`` call, so one
connection, per chunk, as an executor does):

* ``raw scan``: ``mariadb --quick -e '<same SELECT>' > /dev/null``, the client that only prints;
  chunked, one client runs all chunk queries on one connection. The limit to compare against.
* every installed backend of :func:`binlog.mysql.fetch.fetch_arrow`, producing record batches with
  exactly the table's Arrow schema.

Prints seconds, rows/s and the ratio to the raw scan. Not a test: asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

from tpcds import CustomerTable, customer_sandbox

from binlog.mysql.arrow_columns import column_reads
from binlog.mysql.connection import Endpoint
from binlog.mysql.fetch import BackendName, available_backends, fetch_arrow, render_sql, select_sql
from binlog.mysql.types import load_table_schema
from cdc.model.schema import TableId, TableSchema

KEY = "c_customer_sk"
RANGE = f"`{KEY}` >= %s AND `{KEY}` < %s"


@dataclass(frozen=True)
class Result:
    mode: str
    reader: str
    rows: int
    seconds: float


def timed(fn: Callable[[], int], repeat: int) -> tuple[int, float]:
    """Best wall-clock time of ``repeat`` runs of ``fn`` (which returns the rows it read)."""
    best, rows = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - start)
    return rows, best


def raw_scan(cdc: Endpoint, queries: list[str]) -> int:
    """Run ``queries`` through one ``mariadb --quick`` client, output to /dev/null."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        raise FileNotFoundError("the mariadb command-line client is not installed")
    env = {**os.environ, "MYSQL_PWD": cdc.password}  # not on the command line
    subprocess.run(
        [client, "--no-defaults", "--quick", "--batch", "--skip-column-names", "-h", cdc.host,
         "-P", str(cdc.port), "-u", cdc.user, "-e", ";\n".join(queries)],
        stdout=subprocess.DEVNULL, env=env, check=True,
    )
    return -1  # counted by the caller


def fetch_rows(cdc: Endpoint, schema: TableSchema, backend: BackendName,
               ranges: list[tuple[int, int]] | None) -> int:
    """Read the whole table (``ranges`` None) or each key range with one fetch_arrow call each."""
    rows = 0
    calls = [("TRUE", ())] if ranges is None else [(RANGE, r) for r in ranges]
    for where, params in calls:
        for batch in fetch_arrow(cdc, schema, where, params, backend=backend):
            rows += batch.num_rows
    return rows


def chunk_ranges(total: int, size: int, max_chunks: int) -> list[tuple[int, int]]:
    """Consecutive key ranges of ``size`` keys (customer keys are 1..total), at most max_chunks."""
    starts = range(1, total + 1, size)
    return [(s, s + size) for s in starts][:max_chunks]


def measure(table: CustomerTable, chunk_sizes: list[int], max_chunks: int,
            backends: list[BackendName], repeat: int) -> list[Result]:
    cdc = table.box.cdc
    with contextlib.closing(cdc.connect()) as conn:
        schema = load_table_schema(conn, TableId(table.database, table.table))
    reads = column_reads(schema)
    raw_scan(cdc, [select_sql(schema, reads, "TRUE")])  # warm the buffer pool and page cache
    for backend in backends:  # import each driver once before timing it
        fetch_rows(cdc, schema, backend, [(1, 2)])
    results: list[Result] = []
    plans: list[tuple[str, list[tuple[int, int]] | None]] = [("full table", None)]
    plans += [(f"chunks of {n:,}", chunk_ranges(table.rows, n, max_chunks)) for n in chunk_sizes]
    for mode, ranges in plans:
        wheres = ["TRUE"] if ranges is None else [render_sql(RANGE, r) for r in ranges]
        queries = [select_sql(schema, reads, w) for w in wheres]
        expected = table.rows if ranges is None else sum(
            max(0, min(hi, table.rows + 1) - lo) for lo, hi in ranges
        )
        _, seconds = timed(partial(raw_scan, cdc, queries), repeat)
        results.append(Result(mode, "raw scan (mariadb --quick)", expected, seconds))
        for backend in backends:
            rows, seconds = timed(partial(fetch_rows, cdc, schema, backend, ranges), repeat)
            if rows != expected:
                raise AssertionError(f"{backend} read {rows} rows, expected {expected}")
            results.append(Result(mode, backend, rows, seconds))
    return results


def report(results: list[Result], queries_per_mode: dict[str, int]) -> str:
    lines = [f"{'mode':<18} {'reader':<28} {'queries':>7} {'rows':>10} {'seconds':>8} "
             f"{'rows/s':>10} {'vs raw':>7}"]
    raw = {r.mode: r for r in results if r.reader.startswith("raw")}
    for r in results:
        base = raw[r.mode]
        ratio = (r.rows / r.seconds) / (base.rows / base.seconds)
        lines.append(f"{r.mode:<18} {r.reader:<28} {queries_per_mode[r.mode]:>7} {r.rows:>10,} "
                     f"{r.seconds:>8.2f} {r.rows / r.seconds:>10,.0f} {ratio:>6.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scale", type=int, default=100, help="TPC-DS scale factor (100 = 2M rows)")
    parser.add_argument("--chunk-rows", default="50000,8096",
                        help="comma-separated chunk sizes in rows (key-range queries)")
    parser.add_argument("--max-chunks", type=int, default=60,
                        help="at most this many chunk queries per chunk size")
    parser.add_argument("--backends", default=",".join(available_backends()),
                        help="comma-separated fetch backends (default: all installed)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement (best kept)")
    args = parser.parse_args()
    chunk_sizes = [int(x) for x in args.chunk_rows.split(",") if x]
    backends = [cast(BackendName, b) for b in args.backends.split(",") if b]
    started = time.perf_counter()
    with customer_sandbox(args.scale) as table:
        print(f"TPC-DS customer, scale {args.scale}: {table.rows:,} rows loaded in "
              f"{time.perf_counter() - started:.1f}s; load average {os.getloadavg()[0]:.2f}")
        results = measure(table, chunk_sizes, args.max_chunks, backends, args.repeat)
    queries = {"full table": 1}
    queries.update({f"chunks of {n:,}": len(chunk_ranges(table.rows, n, args.max_chunks))
                    for n in chunk_sizes})
    print(report(results, queries))
    print(f"load average at the end {os.getloadavg()[0]:.2f} (2 cores shared with other work)")


if __name__ == "__main__":
    main()
