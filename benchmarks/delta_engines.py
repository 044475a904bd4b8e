"""The Delta engines side by side: delta-rs, delta-rs with deletion vectors and delta-spark writing
the same mirror and changelog.

Run: ``.venv/bin/python benchmarks/delta_engines.py [--rows 2000000] [--batches 1000,10000,100000]
[--engines delta-rs,delta-rs-dv,delta-spark]``.

Every engine starts from the same mirror (``--rows`` rows, committed from executor-style Parquet
files, as the job's snapshot does) and applies the same batches of updates to random keys through
the sink's own write path (``DeltaTables.write_mirror``: the Arrow reduction, then the engine's
MERGE; delta-rs rewrites every file that holds a changed key; ``delta-rs-dv`` is delta-rs with
``sink.deletion_vectors``, and it and delta-spark mark the old rows in deletion vectors and write
only the new ones). Each batch size runs three times; the median is reported, with rows/s and each
engine's ratio to delta-rs (below 1: faster than delta-rs). The changelog append of the same batch
is timed too. Results go to ``benchmarks/results/``.

Not a test: it asserts nothing and is never timed by pytest. Do not run it next to the tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from delta_sink_bench import SCHEMA, change_batch
from deltalake import DeltaTable

from cdc.spark.session import local_session
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.deletion_vectors import enable
from sinks.delta.engines import DeltaTables
from sinks.delta.files import commit_snapshot_files, write_snapshot_files

RESULTS = Path(__file__).parent / "results"
ENGINES = ("delta-rs", "delta-rs-dv", "delta-spark")


def build_mirror(config: DeltaSinkConfig, total: int, chunk: int = 131_072) -> None:
    """The mirror and changelog of ``total`` rows, written as the job's snapshot writes them."""
    ids = pa.array(range(total), pa.int64())
    snapshot = change_batch("r", ids, 0)
    files = []
    for at in range(0, total, chunk):
        files += write_snapshot_files(config, SCHEMA, snapshot.slice(at, chunk))
    commit_snapshot_files(config, SCHEMA, files, "bench", 0)


def median_s(fn: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_engine(engine: str, root: str, total: int, sizes: list[int], spark: Any) -> dict[str, Any]:
    config = DeltaSinkConfig(path=f"{root}/{engine}", engine=engine.removesuffix("-dv"),  # type: ignore[arg-type]
                             deletion_vectors=engine.endswith("-dv"))
    start = time.perf_counter()
    build_mirror(config, total)
    if config.deletion_vectors:  # as the job's open does
        enable(DeltaTable(config.uri(SCHEMA.table_id, "mirror")))
    print(f"{engine}: mirror of {total:,} rows built in {time.perf_counter() - start:.1f}s", flush=True)
    tables = DeltaTables(config, "bench", spark=spark)
    rng = random.Random(7)
    batch_id = [1]
    out: dict[str, Any] = {}

    def merge(size: int) -> None:
        keys = pa.array(rng.sample(range(total), size), pa.int64())
        tables.write_mirror(SCHEMA, change_batch("u", keys, batch_id[0]), batch_id[0])
        batch_id[0] += 1

    def append(size: int) -> None:
        keys = pa.array(rng.sample(range(total), size), pa.int64())
        tables.write_changelog(SCHEMA, change_batch("u", keys, batch_id[0]), batch_id[0])
        batch_id[0] += 1

    merge(sizes[0])  # warm-up: the first Spark job of a session compiles; delta-rs opens the table
    for size in sizes:
        m, a = median_s(lambda s=size: merge(s)), median_s(lambda s=size: append(s))
        out[str(size)] = {"merge_s": round(m, 3), "merge_rows_s": round(size / m),
                          "append_s": round(a, 3), "append_rows_s": round(size / a)}
        print(f"{engine:<12} {size:>8,} random-key updates: MERGE {m:6.2f}s ({size / m:>10,.0f} rows/s)  "
              f"changelog append {a:6.2f}s ({size / a:>10,.0f} rows/s)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows in the mirror (SF100 customer: 2M)")
    parser.add_argument("--batches", default="1000,10000,100000", help="update batch sizes")
    parser.add_argument("--engines", default=",".join(ENGINES), help="which engines, delta-rs first")
    args = parser.parse_args()
    sizes = [int(s) for s in args.batches.split(",")]
    engines = args.engines.split(",")
    spark = local_session("spark-cdc-bench-engines", parallelism=2)
    root = tempfile.mkdtemp(prefix="delta-engines-")
    try:
        results = {engine: run_engine(engine, root, args.rows, sizes, spark) for engine in engines}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nratio to delta-rs (below 1: faster than delta-rs), mirror of {args.rows:,} rows:")
    for engine in engines[1:]:
        for size in sizes:
            rs, other = results[engines[0]][str(size)], results[engine][str(size)]
            print(f"  {engine:<12} {size:>8,} updates: MERGE {other['merge_s'] / rs['merge_s']:.2f}x   "
                  f"changelog append {other['append_s'] / rs['append_s']:.2f}x")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"delta_engines-{dt.date.today()}-{args.rows}.json"
    out.write_text(json.dumps({"rows": args.rows, "results": results}, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
