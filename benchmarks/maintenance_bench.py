"""What the job's table maintenance buys and costs: the same update stream with it off and on.

Run: ``.venv/bin/python benchmarks/maintenance_bench.py [--rows 500000] [--batches 300]
[--changes 1000] [--out benchmarks/results/maintenance-<date>.json]``.

Two runs of the same workload, each in its own temporary directory, with the delta-rs engine:

* **off:** ``sink.maintenance.every: 0``, and the mirror's ``delta.targetFileSize`` left unset.
* **on:** ``every: 100`` (the default), and ``Maintainer.prepare_mirror`` called once after the
  snapshot, as the sink does when it starts.

Each starts from a mirror and changelog of ``--rows`` rows written as the job's snapshot writes
them (``delta_engines.build_mirror``), then applies ``--batches`` batches of ``--changes``
updates (op ``u``, before and after images) to random keys (seeded, the same keys in both runs)
the way the job does: per batch the changelog append inline (``write_changelog``), then
``Maintainer.wrote`` and ``MirrorFollower.submit``; the follower MERGEs behind the batches,
coalesced, and runs the maintenance that is due in its thread; ``close`` drains it at the end.

Measured per run: the wall time of the batch loop including the final drain (and changes/s);
the time spent inline in the changelog appends; the follower's time in ``write_mirror`` (its
MERGEs) and in ``Maintainer.maintain`` (compaction and VACUUM), timed by subclasses of the
product's classes; the MERGE and maintenance counts; then, at the end, each table's live files
(count, bytes) and the Parquet bytes on disk (live files and those a VACUUM has not deleted yet:
with the default retention of 168 hours it deletes nothing here), and the time to read each whole
table with delta-rs, DuckDB (``delta_scan`` of its delta extension, or ``read_parquet`` of the
live files where the extension cannot be loaded) and Polars, median of 3. A Markdown table puts
the two runs side by side, with the ratio on / off; the same goes to ``--out`` as JSON.

Not a test: it asserts nothing and is never timed by pytest. Do not run it next to the tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
from delta_engines import build_mirror
from delta_sink_bench import SCHEMA, change_batch
from deltalake import DeltaTable

from cdc.model.schema import TableId, TableSchema
from sinks.delta.config import DeltaSinkConfig, MaintenanceConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.follower import MirrorFollower
from sinks.delta.maintenance import Maintainer
from sinks.delta.tables import TableKind, read_table

RESULTS = Path(__file__).parent / "results"
KINDS: tuple[TableKind, ...] = ("changelog", "mirror")
READERS = ("delta-rs", "duckdb", "polars")


class TimedTables(DeltaTables):
    """The sink's tables, adding up the time spent in ``write_mirror`` (the follower's MERGEs)."""

    merge_s = 0.0

    def write_mirror(self, schema: TableSchema, changes: pa.Table, batch_id: int, *,
                     snapshot_append: bool = False) -> bool:
        start = time.perf_counter()
        try:
            return super().write_mirror(schema, changes, batch_id, snapshot_append=snapshot_append)
        finally:
            self.merge_s += time.perf_counter() - start


class TimedMaintainer(Maintainer):
    """The job's maintainer, adding up the time spent in ``maintain`` (compaction and VACUUM)."""

    maintain_s = 0.0

    def maintain(self, table_id: TableId) -> None:
        start = time.perf_counter()
        try:
            super().maintain(table_id)
        finally:
            self.maintain_s += time.perf_counter() - start


def duckdb_connection() -> tuple[Any, str]:
    """A DuckDB connection and how it reads a Delta table: ``delta_scan`` with the delta
    extension (from its PyPI package, offline), else ``read_parquet`` of the live files."""
    con = duckdb.connect()
    try:
        import duckdb_extension_delta  # type: ignore[import-untyped]

        folder = os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions")
        (path,) = glob.glob(os.path.join(folder, "*", "delta.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
        return con, "delta_scan"
    except Exception as exc:
        print(f"DuckDB's delta extension did not load ({exc}); DuckDB reads the live files with read_parquet")
        return con, "read_parquet"


def median_s(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    """The median wall time of ``fn`` over ``repeat`` calls, and the row count it returned."""
    times, rows = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        rows = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), rows


def local_path(uri: str) -> str:
    return uri.removeprefix("file://")


def parquet_on_disk(root: str) -> int:
    """Bytes of every Parquet file under a table's directory, live or not."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root)
               if "_delta_log" not in d for f in files if f.endswith(".parquet"))


def measure_table(uri: str, con: Any, how: str) -> dict[str, Any]:
    files = DeltaTable(uri).file_uris()

    def duck() -> int:
        if how == "delta_scan":
            return int(con.sql(f"SELECT * FROM delta_scan('{uri}')").to_arrow_table().num_rows)
        live = ", ".join(f"'{local_path(f)}'" for f in DeltaTable(uri).file_uris())
        return int(con.sql(f"SELECT * FROM read_parquet([{live}])").to_arrow_table().num_rows)

    readers: dict[str, Callable[[], int]] = {
        "delta-rs": lambda: read_table(uri).num_rows,  # deletion vectors applied
        "duckdb": duck,
        "polars": lambda: pl.read_delta(uri).height,
    }
    out: dict[str, Any] = {"files": len(files),
                           "live_bytes": sum(os.path.getsize(local_path(f)) for f in files),
                           "disk_bytes": parquet_on_disk(local_path(uri))}
    for name, read in readers.items():
        seconds, rows = median_s(read)
        out[f"read_{name}_s"] = round(seconds, 3)
        out[f"rows_{name}"] = rows
    return out


def run_mode(mode: str, root: str, rows: int, batches: list[pa.Table]) -> dict[str, Any]:
    every = 100 if mode == "on" else 0
    config = DeltaSinkConfig(path=f"{root}/{mode}", engine="delta-rs",
                             maintenance=MaintenanceConfig(every=every))
    start = time.perf_counter()
    build_mirror(config, rows)
    print(f"{mode}: mirror and changelog of {rows:,} rows built in {time.perf_counter() - start:.1f} s",
          flush=True)
    tables = TimedTables(config, query_id="bench")
    maintainer = TimedMaintainer(tables)
    table_id = SCHEMA.table_id
    if mode == "on":
        maintainer.prepare_mirror(table_id)  # as the sink does at start, before the follower's first MERGE
    follower = MirrorFollower(tables, {table_id: SCHEMA}, maintainer=maintainer)
    changelog_s = 0.0
    start = time.perf_counter()
    for batch_id, batch in enumerate(batches, start=1):  # batch 0 is the snapshot's commit
        began = time.perf_counter()
        tables.write_changelog(SCHEMA, batch, batch_id)
        changelog_s += time.perf_counter() - began
        maintainer.wrote(table_id)
        follower.submit(batch_id, {table_id: batch})
    follower.close()
    loop_s = time.perf_counter() - start
    changes = sum(b.num_rows for b in batches)
    print(f"{mode}: {len(batches)} batches, {changes:,} changes in {loop_s:.1f} s; follower MERGEs "
          f"{follower.merges} ({tables.merge_s:.1f} s), maintenance runs {maintainer.runs} "
          f"({maintainer.maintain_s:.1f} s)", flush=True)
    out: dict[str, Any] = {
        "loop_s": round(loop_s, 3), "changes_per_s": round(changes / loop_s),
        "changelog_append_s": round(changelog_s, 3),
        "follower_merge_s": round(tables.merge_s, 3), "follower_merges": follower.merges,
        "maintenance_s": round(maintainer.maintain_s, 3), "maintenance_runs": maintainer.runs,
        "follower_total_s": round(tables.merge_s + maintainer.maintain_s, 3),
    }
    con, how = duckdb_connection()
    out["duckdb_reads_with"] = how
    for kind in KINDS:
        uri = config.uri(table_id, kind)
        measured = measure_table(uri, con, how)
        out.update({f"{kind}_{k}": v for k, v in measured.items()})
        print(f"{mode}: {kind} measured: {measured}", flush=True)
    con.close()
    return out


ROWS: tuple[tuple[str, str], ...] = (
    ("loop_s", "batch loop incl. final drain (s)"),
    ("changes_per_s", "changes/s"),
    ("changelog_append_s", "changelog appends, inline (s)"),
    ("follower_merge_s", "follower MERGE time (s)"),
    ("follower_merges", "follower MERGEs (coalesced)"),
    ("maintenance_s", "maintenance time, in the follower (s)"),
    ("maintenance_runs", "maintenance runs"),
    ("follower_total_s", "follower MERGE + maintenance (s)"),
    *((f"{kind}_{key}", f"{kind}: {label}") for kind in KINDS for key, label in (
        ("files", "live files"),
        ("live_bytes", "live bytes"),
        ("disk_bytes", "Parquet bytes on disk (not vacuumed yet)"),
        ("read_delta-rs_s", "read, delta-rs (s)"),
        ("read_duckdb_s", "read, DuckDB (s)"),
        ("read_polars_s", "read, Polars (s)"),
    )),
)


def ratio(on: Any, off: Any) -> float | None:
    return round(on / off, 3) if isinstance(on, int | float) and isinstance(off, int | float) and off else None


def markdown(off: dict[str, Any], on: dict[str, Any]) -> str:
    lines = ["| | maintenance off | maintenance on | on / off |", "|---|---:|---:|---:|"]
    for key, label in ROWS:
        r = ratio(on[key], off[key])
        lines.append(f"| {label} | {off[key]:,} | {on[key]:,} | {'-' if r is None else f'{r:.2f}'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000, help="rows in the mirror at the start")
    parser.add_argument("--batches", type=int, default=300, help="update batches applied")
    parser.add_argument("--changes", type=int, default=1_000, help="updates per batch (random keys)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the random keys")
    parser.add_argument("--out", type=Path, default=RESULTS / f"maintenance-{dt.date.today()}.json",
                        help="the JSON results file")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stdout, format="  %(name)s: %(message)s")
    logging.getLogger("sinks.delta.maintenance").setLevel(logging.INFO)  # what each run compacted
    began = time.perf_counter()
    rng = random.Random(args.seed)
    batches = [change_batch("u", pa.array(rng.sample(range(args.rows), args.changes), pa.int64()), b)
               for b in range(1, args.batches + 1)]  # built once: the same batches in both runs
    print(f"{dt.datetime.now():%F %T}: mirror of {args.rows:,} rows, {args.batches} batches of "
          f"{args.changes:,} random-key updates, maintenance off then on", flush=True)
    root = tempfile.mkdtemp(prefix="maintenance-bench-")
    try:
        results = {mode: run_mode(mode, root, args.rows, batches) for mode in ("off", "on")}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    off, on = results["off"], results["on"]
    table = markdown(off, on)
    print(f"\n{table}\n\nDuckDB read with: {off['duckdb_reads_with']}; total run "
          f"{time.perf_counter() - began:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "rows": args.rows, "batches": args.batches, "changes": args.changes, "seed": args.seed,
        "results": results, "ratio_on_off": {k: ratio(on[k], off[k]) for k, _ in ROWS},
        "markdown": table,
    }, indent=1) + "\n")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
