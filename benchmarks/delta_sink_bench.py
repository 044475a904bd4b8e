"""Delta sink write throughput: MERGE vs delete+append vs append, on 100k-row change batches.

Run: ``.venv/bin/python benchmarks/delta_sink_bench.py [--rows 1000000] [--batch 100000]``.
Prints seconds and rows/s per step and the ratios that matter for choosing the mirror write.
Not a test: it asserts nothing and is never timed by pytest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from binlog.mysql.types import mysql_column, mysql_table
from cdc.model.schema import TableId
from sinks.changes import change_schema, mirror_changes, mirror_schema, normalize
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.files import commit_snapshot_files, write_snapshot_files

SCHEMA = mysql_table(
    TableId("bench", "orders"),
    (
        mysql_column("id", "bigint", "bigint", False),
        mysql_column("customer", "int", "int", True),
        mysql_column("status", "varchar", "varchar(20)", True),
        mysql_column("amount", "decimal", "decimal(12,2)", True, precision=12, scale=2),
        mysql_column("weight", "double", "double", True),
        mysql_column("created", "datetime", "datetime(6)", True),
        mysql_column("updated", "timestamp", "timestamp(6)", True),
        mysql_column("note", "text", "text", True),
    ),
    ("id",),
)


_MAX_IN_LIST = 20_000


def rows(ids: pa.Array, version: int) -> pa.StructArray:
    """Row images for ``ids``; ``version`` changes the non-key values."""
    n = len(ids)
    base = pc.add(pc.cast(ids, pa.int64()), version)
    row_type = pa.struct(list(SCHEMA.arrow_schema()))
    micros = pc.multiply(base, 1_000_000)
    return pa.StructArray.from_arrays(
        [
            ids,
            pc.cast(pc.divide(base, 7), pa.int32()),
            pa.array(["shipped" if version % 2 else "new"] * n),
            pc.cast(pc.divide(pc.cast(base, pa.float64()), 100), pa.decimal128(12, 2)),
            pc.divide(pc.cast(base, pa.float64()), 3),
            micros.cast(pa.timestamp("us")),
            micros.cast(pa.timestamp("us", tz="UTC")),
            pa.array([f"note {version}"] * n),
        ],
        fields=list(row_type),
    )


def change_batch(op: str, ids: pa.Array, version: int) -> pa.Table:
    """A change batch of one op over ``ids``."""
    n = len(ids)
    image = rows(ids, version)
    nulls = pa.nulls(n, image.type)
    source = pa.array(
        [{"version": "1", "connector": "mysql", "name": "bench", "ts_ms": 0, "snapshot": "false",
          "db": "bench", "table": "orders", "server_id": 1, "gtid": None, "file": "b.000001",
          "pos": 4, "row": 0, "thread": None, "query": None}] * n,
        change_schema(SCHEMA).field("source").type,
    )
    before = image if op in ("u", "d") else nulls
    after = nulls if op == "d" else image
    return pa.table(
        [pa.array([op] * n), before, after, source, pa.array([0] * n, pa.int64())],
        schema=change_schema(SCHEMA),
    )


def timed(label: str, n: int, fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    s = time.perf_counter() - start
    print(f"{label:<58} {s:7.2f} s  {n / s:>11,.0f} rows/s")
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the mirror")
    parser.add_argument("--batch", type=int, default=100_000, help="rows per change batch")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="delta-bench-")
    try:
        run(root, args.rows, args.batch)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: str, total: int, size: int) -> None:
    print(f"mirror {total:,} rows, change batches of {size:,} rows, {dt.datetime.now():%F %T}")
    ids = pa.array(range(total), pa.int64())
    snapshot = change_batch("r", ids, 0)
    config = DeltaSinkConfig(path=root, engine="delta-rs")
    sink = DeltaTables(config, "bench")
    t_append = timed("snapshot: write_batch(snapshot_append=True)", total,
                     lambda: sink.write_mirror(SCHEMA, snapshot, 0, snapshot_append=True))
    other = mysql_table(TableId("bench", "orders_bulk"), SCHEMA.columns, SCHEMA.primary_key)
    chunks = [snapshot.slice(i, size) for i in range(0, total, size)]
    staged: list[Any] = []

    def stage_all() -> None:
        for c in chunks:
            staged.extend(write_snapshot_files(config, other, c))

    t_files = timed("snapshot: write_snapshot_files (executor side, all chunks)", total, stage_all)
    timed("snapshot: commit_snapshot_files (driver, one commit/table)", total,
          lambda: commit_snapshot_files(config, other, staged, "bench", 0))
    merge_sink = DeltaTables(config, "bench-merge")
    merged = mysql_table(TableId("bench", "orders_merged"), SCHEMA.columns, SCHEMA.primary_key)
    t_merge_r = timed("snapshot: MERGE of r rows into an empty mirror", total,
                      lambda: merge_sink.write_mirror(merged, snapshot, 0))

    stride = max(total // size, 1)
    touched = pa.array(range(0, total, stride)[:size], pa.int64())
    updates = change_batch("u", touched, 1)
    batch = normalize(updates, SCHEMA)
    storage = mirror_schema(SCHEMA)
    timed("changes: last-image-per-key reduction (Arrow)", size,
          lambda: mirror_changes(batch, SCHEMA.primary_key, storage))
    t_merge = timed("changes: MERGE of updates (spread keys)", size,
                    lambda: sink.write_mirror(SCHEMA, updates, 1))
    t_cl = timed("changes: changelog append", size,
                 lambda: sink.write_changelog(SCHEMA, updates, 1))
    mirror = DeltaTable(config.uri(SCHEMA.table_id, "mirror"))
    new_rows = pa.Table.from_struct_array(rows(touched, 2))

    def delete_then_append() -> None:
        src = pa.table({"id": touched})
        mirror.merge(src, "t.id = s.id", source_alias="s", target_alias="t") \
            .when_matched_delete().execute()
        write_deltalake(mirror, new_rows.cast(storage), mode="append")

    t_da = timed("alt: delete (MERGE delete-only) + append, two commits", size, delete_then_append)

    def delete_in_list_then_append() -> None:
        mirror.delete(f"id IN ({','.join(str(i) for i in touched.to_pylist())})")
        write_deltalake(mirror, new_rows.cast(storage), mode="append")

    t_in = float("nan")
    if size <= _MAX_IN_LIST:
        t_in = timed(f"alt: DELETE ... IN ({size:,} literals) + append, two commits", size,
                     delete_in_list_then_append)
    else:
        print(f"alt: DELETE ... IN (...) skipped above {_MAX_IN_LIST:,} literals: deltalake 1.6 "
              "dies with SIGSEGV (stack overflow) parsing a 100k-literal predicate")
    hot = change_batch("u", pa.array(range(size), pa.int64()), 3)
    t_hot = timed("changes: MERGE of updates (contiguous keys)", size,
                  lambda: sink.write_mirror(SCHEMA, hot, 2))
    print(f"ratio MERGE(spread) / delete+append: {t_merge / t_da:.2f}; "
          f"MERGE / DELETE-IN + append: {t_merge / t_in:.2f}; "
          f"MERGE(contiguous) / MERGE(spread): {t_hot / t_merge:.2f}")
    print(f"ratio snapshot MERGE / append: {t_merge_r / t_append:.2f}; "
          f"executor files / driver append: {t_files / t_append:.2f}; "
          f"changelog append / MERGE: {t_cl / t_merge:.2f}")


if __name__ == "__main__":
    main()
