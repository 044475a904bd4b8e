"""A run of mirror MERGEs with deletion vectors, as the job's mirror follower applies them.

Run: ``.venv/bin/python benchmarks/mirror_merges.py [--rows 12000000] [--merges 30] [--keys 1000]``.

Builds a mirror of ``--rows`` rows the way the job's snapshot commits it (executor-style Parquet
files of 131,072 rows, in key order; ``benchmarks/delta_engines.py``'s ``build_mirror``), turns its
deletion vectors on, then applies ``--merges`` batches of ``--keys`` updates to random keys through
the sink's own path (``DeltaTables.write_mirror``), one writer for the whole run, as a job's
follower is. Prints the first MERGE's seconds (it reads every file's keys), the median of the rest,
and every 10th; writes ``benchmarks/results/mirror_merges-<date>-<rows>.json``.

To compare with an earlier version of the code, run the same command in a worktree of it: the
script uses only ``DeltaTables`` and the benchmark helpers, which both sides have.

Not a test: it asserts nothing and is never timed by pytest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from delta_engines import build_mirror
from delta_sink_bench import SCHEMA, change_batch
from deltalake import DeltaTable

from sinks.delta.config import DeltaSinkConfig
from sinks.delta.deletion_vectors import enable
from sinks.delta.engines import DeltaTables

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=12_000_000, help="rows in the mirror (SF1000 customer: 12M)")
    parser.add_argument("--merges", type=int, default=30, help="MERGEs applied, one after another")
    parser.add_argument("--keys", type=int, default=1000, help="random keys updated by each MERGE")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="mirror-merges-")
    try:
        config = DeltaSinkConfig(path=root, engine="delta-rs", deletion_vectors=True)
        started = time.perf_counter()
        build_mirror(config, args.rows)
        enable(DeltaTable(config.uri(SCHEMA.table_id, "mirror")))  # as the job's open does
        print(f"mirror of {args.rows:,} rows built in {time.perf_counter() - started:.1f}s; load {os.getloadavg()[0]:.2f}",
              flush=True)
        tables, rng, seconds = DeltaTables(config, "bench"), random.Random(7), []
        for batch_id in range(1, args.merges + 1):
            keys = pa.array(rng.sample(range(args.rows), args.keys), pa.int64())
            began = time.perf_counter()
            tables.write_mirror(SCHEMA, change_batch("u", keys, batch_id), batch_id)
            seconds.append(time.perf_counter() - began)
            if batch_id == 1 or batch_id % 10 == 0:
                print(f"  MERGE {batch_id}: {seconds[-1]:.3f}s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rest = statistics.median(seconds[1:]) if len(seconds) > 1 else 0.0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    print(f"{args.merges} MERGEs of {args.keys:,} random keys into {args.rows:,} rows (code {commit}): first "
          f"{seconds[0]:.3f}s, median of the rest {rest:.3f}s; load {os.getloadavg()[0]:.2f}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"mirror_merges-{dt.date.today()}-{args.rows}-{commit}.json"
    out.write_text(json.dumps({"rows": args.rows, "keys": args.keys, "code": commit, "first_s": round(seconds[0], 3),
                               "median_rest_s": round(rest, 3), "seconds": [round(s, 3) for s in seconds],
                               "load_end": round(os.getloadavg()[0], 2)}, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
