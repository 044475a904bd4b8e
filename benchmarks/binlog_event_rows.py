"""Binlog catch-up of TPC-DS ``customer`` UPDATEs: per-row events vs column-wise blocks.

Starts a sandbox with TPC-DS ``customer`` at ``--scale`` (1 = 100,000 rows), updates
``--updates`` rows with ``UPDATE customer SET c_last_review_date_sk = c_last_review_date_sk + 1
WHERE c_customer_sk BETWEEN a AND b`` in 1,000-row statements (wrapping around the table), then
reads that one binlog slice both ways, on the same reader:

* **old**: ``MySqlBinlogReader.read`` (mysql-replication decodes every value, RowConverter)
  + ``change_envelope(split_key_changes(...))``;
* **new**: ``MySqlBinlogReader.read_event_rows`` (numba kernels, Arrow) + ``event_rows_envelope``.

It also times walking the slice without decoding it (``decode_from`` at the end), what a stream
task of a split catch-up pays for the pieces before its own, relative to the new path.

It asserts both give the same change rows (on the first ``--check`` rows) and prints changes/s
(best of ``--repeats``), the ratio, the time split of the new path, and the numba compile cost:
the first decode in a fresh process without the kernel cache (cold) and with it (cached).

    .venv/bin/python benchmarks/binlog_event_rows.py [--scale 1] [--updates 200000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from tpcds import CustomerTable, customer_sandbox

from binlog.mysql.change_rows import event_rows_envelope
from binlog.mysql.positions import BinlogOffset
from binlog.mysql.reader import BinlogReaderOptions, MySqlBinlogReader, current_offset
from binlog.mysql.types import load_table_schema
from cdc.model.envelope import change_envelope, split_key_changes
from cdc.model.schema import TableId, TableSchema

STATEMENT_ROWS = 1000


def update(table: CustomerTable, rows: int) -> tuple[BinlogOffset, BinlogOffset]:
    """Update ``rows`` rows in 1,000-row statements; the binlog slice that holds them."""
    with contextlib.closing(table.box.admin.connect(table.database)) as conn, \
            conn.cursor() as cur:
        start = current_offset(conn)
        for done in range(0, rows, STATEMENT_ROWS):
            lo = done % table.rows + 1
            cur.execute("UPDATE customer SET c_last_review_date_sk = c_last_review_date_sk + 1 "
                        f"WHERE c_customer_sk BETWEEN {lo} AND {lo + STATEMENT_ROWS - 1}")
        return start, current_offset(conn)


def old_path(reader: MySqlBinlogReader, schema: TableSchema, start: BinlogOffset,
             end: BinlogOffset) -> pa.Table:
    events = list(reader.read(start, end))
    return change_envelope(schema, split_key_changes(events, schema.primary_key), name="bench")


def new_path(reader: MySqlBinlogReader, schema: TableSchema, start: BinlogOffset,
             end: BinlogOffset) -> pa.Table:
    return event_rows_envelope(schema, list(reader.read_event_rows(start, end)), name="bench")


def walk_only(reader: MySqlBinlogReader, start: BinlogOffset, end: BinlogOffset) -> pa.Table:
    """Read the slice without decoding a row: what a stream task pays for the pieces of a split
    slice before its own (cdc.spark.source.SKIP_COST)."""
    list(reader.read_event_rows(start, end, decode_from=end))
    return pa.table({})


def best(fn: Callable[[], pa.Table], repeats: int) -> tuple[float, pa.Table]:
    seconds, result = float("inf"), None
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        seconds = min(seconds, time.perf_counter() - began)
    assert result is not None
    return seconds, result


def split_new(reader: MySqlBinlogReader, schema: TableSchema, start: BinlogOffset,
              end: BinlogOffset) -> tuple[float, float]:
    """Seconds of read_event_rows alone, and of event_rows_envelope alone."""
    began = time.perf_counter()
    blocks = list(reader.read_event_rows(start, end))
    read = time.perf_counter() - began
    began = time.perf_counter()
    event_rows_envelope(schema, blocks, name="bench")
    return read, time.perf_counter() - began


_FIRST_DECODE = """
import time, numpy as np
began = time.perf_counter()
from binlog.mysql import rows_kernels as k
buf = np.frombuffer(bytes(16), np.uint8)  # read-only, as rows from the wire are
k.locate(buf, np.array([0], np.int64), np.zeros(1, np.int64), np.ones(1, np.int64), 2)
starts, lens = np.array([0], np.int64), np.array([4], np.int64)
k.int_le(buf, starts, 4, True); k.gather_fixed(buf, starts, 4)
k.gather_var(buf, starts, lens, 0, 255); k.date32(buf, starts); k.datetime2(buf, starts, 0)
k.timestamp2(buf, starts, 0); k.time2(buf, starts, 0); k.decimal128(buf, starts, 10, 2)
k.decimal_text(buf, starts, 40, 2)
k.set_text(np.zeros(1, np.int64), np.ones(1, np.bool_), buf, np.array([0, 1], np.int64))
print(time.perf_counter() - began)
"""


def compile_seconds() -> tuple[float, float]:
    """Import + first call of every kernel in a fresh process: without, then with the cache."""
    cache = Path(tempfile.mkdtemp(prefix="spark-cdc-numba-"))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    try:
        runs = [float(subprocess.run([sys.executable, "-c", _FIRST_DECODE], env=env, check=True,
                                     capture_output=True, text=True).stdout) for _ in range(2)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return runs[0], runs[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="TPC-DS scale (1 = 100k customers)")
    parser.add_argument("--updates", type=int, default=200_000, help="rows updated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", type=int, default=20_000, help="rows compared old vs new")
    args = parser.parse_args(argv)
    cold, cached = compile_seconds()
    print(f"numba kernels, first use in a fresh process: {cold:.2f} s cold (compiling), "
          f"{cached:.2f} s with the on-disk cache")
    with customer_sandbox(args.scale) as table:
        start, end = update(table, args.updates)
        table_id = TableId(table.database, table.table)
        with contextlib.closing(table.box.cdc.connect()) as conn:
            schema = load_table_schema(conn, table_id)
        config = BinlogReaderOptions(table.box.cdc, 6200, (table_id,))
        with MySqlBinlogReader(config) as reader:
            new_path(reader, schema, start, end)  # warm up: connect, plan, load kernels
            new_s, new = best(lambda: new_path(reader, schema, start, end), args.repeats)
            old_s, old = best(lambda: old_path(reader, schema, start, end), args.repeats)
            read_s, envelope_s = split_new(reader, schema, start, end)
            walk_s, _ = best(lambda: walk_only(reader, start, end), args.repeats)
        n = old.num_rows
        assert new.num_rows == n, (new.num_rows, n)
        assert new.slice(0, args.check).to_pylist() == old.slice(0, args.check).to_pylist()
        assert new.slice(n - args.check).to_pylist() == old.slice(n - args.check).to_pylist()
        print(f"{n:,} UPDATE row changes of TPC-DS customer (18 columns), scale {args.scale}:")
        print(f"  old: read + change_envelope        {n / old_s:>10,.0f} changes/s ({old_s:.2f} s)")
        print(f"  new: read_event_rows + event_rows_envelope  {n / new_s:>10,.0f} changes/s ({new_s:.2f} s)"
              f"  -> {old_s / new_s:.1f}x")
        print(f"  new path split: read_event_rows {read_s:.2f} s ({n / read_s:,.0f}/s), "
              f"event_rows_envelope {envelope_s:.2f} s ({n / envelope_s:,.0f}/s)")
        print(f"  walking the slice without decoding (a split slice's earlier pieces): {walk_s:.2f} s "
              f"= {walk_s / new_s:.2f}x of read_event_rows + event_rows_envelope")


if __name__ == "__main__":
    main()
