"""A run's fixed start: ``python -m cdc run --once`` on the demo config, from launch to exit.

Run: ``.venv/bin/python benchmarks/startup.py [--scale 0.1] [--runs 5] [--baseline REV]`` (a minute).

A throwaway MariaDB gets TPC-DS ``customer`` (``--scale`` 0.1: 10,000 rows). The job of
configs/demo.yaml (what ``make demo`` runs) then runs ``--once`` as a user runs it, a new process
each time, timed from launch to exit: first the snapshot, then ``--runs`` times with nothing to do
(no change since), then ``--catch-ups`` times after two updated rows: a run with work, whose
Spark session, query and single batch are all fixed cost. ``--baseline REV`` measures another revision in the same run, on the same
server and table, alternating with this checkout: a temporary git worktree of REV, imported ahead
of this checkout (``PYTHONPATH``) with this checkout's virtualenv and jars, so only the project's
code differs. Prints each tree's snapshot time and the medians of its no-op and catch-up runs, and writes
``benchmarks/results/startup-<date>.json``; the load average at the start and the end is printed
next to them, because the machine may be shared.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cdc.app.demo import DATABASE, load_tpcds
from cdc.app.sandbox.mysql import Sandbox, start_sandbox

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results")


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """A temporary worktree of ``rev`` that uses this checkout's jars."""
    tree = Path(tempfile.mkdtemp(prefix="startup-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    try:
        (tree / "jars").symlink_to(ROOT / "jars")
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False,
                       capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)


def timed_run(tree: Path, env: dict[str, str]) -> float:
    """Seconds from launch to exit of one ``run --once`` of the demo config in ``tree``.

    Raises:
        RuntimeError: the run failed (its stderr's tail).
    """
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cdc", "run", "--config", "configs/demo.yaml", "--once"],
                          cwd=tree, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"run --once in {tree} failed: {done.stderr[-8000:]}")
    return elapsed


def environment(box: Sandbox, tree: Path, work: Path) -> dict[str, str]:
    env = {**os.environ, "MYSQL_HOST": box.cdc.host, "MYSQL_PORT": str(box.cdc.port),
           "MYSQL_PASSWORD": box.cdc.password, "CDC_DEMO_DIR": str(work)}
    if tree != ROOT:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    return env


def touch_two_rows(box: Sandbox, round_: int) -> None:
    """Update two customers (a new value each round): a catch-up's whole work."""
    with contextlib.closing(box.admin.connect(DATABASE)) as conn, conn.cursor() as cur:
        for sk in (1, 2):
            cur.execute(f"UPDATE {DATABASE}.customer SET c_email_address = %s WHERE c_customer_sk = %s",
                        (f"round-{round_}-{sk}@example.com", sk))
        conn.commit()


def measure(box: Sandbox, trees: dict[str, Path], runs: int, catch_ups: int) -> dict[str, dict[str, Any]]:
    """Each tree's snapshot, then its no-op runs, then its catch-ups, the trees alternating run by
    run (each tree's catch-up reads the two updates made before it)."""
    work = {name: Path(tempfile.mkdtemp(prefix=f"startup-{name}-")) for name in trees}
    out: dict[str, dict[str, Any]] = {name: {"noop_s": [], "catch_up_s": []} for name in trees}
    try:
        for name, tree in trees.items():
            out[name]["snapshot_s"] = timed_run(tree, environment(box, tree, work[name]))
        for i in range(runs):
            for name, tree in (trees.items() if i % 2 == 0 else reversed(trees.items())):
                out[name]["noop_s"].append(timed_run(tree, environment(box, tree, work[name])))
        for i in range(catch_ups):
            for name, tree in (trees.items() if i % 2 == 0 else reversed(trees.items())):
                touch_two_rows(box, i)
                out[name]["catch_up_s"].append(timed_run(tree, environment(box, tree, work[name])))
    finally:
        for folder in work.values():
            shutil.rmtree(folder, ignore_errors=True)
    for result in out.values():
        result["noop_median_s"] = statistics.median(result["noop_s"])
        if result["catch_up_s"]:
            result["catch_up_median_s"] = statistics.median(result["catch_up_s"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-DS scale (0.1: 10,000 customers)")
    parser.add_argument("--runs", type=int, default=5, help="no-op runs per tree (the median is reported)")
    parser.add_argument("--catch-ups", type=int, default=5,
                        help="runs per tree after two updated rows (the median is reported)")
    parser.add_argument("--baseline", help="a git revision to measure in the same run")
    parser.add_argument("--suffix", default="", help="appended to the result file's name (e.g. -loaded)")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    box = start_sandbox()
    try:
        rows = load_tpcds(box, args.scale)
        with contextlib.ExitStack() as stack:
            trees = {"this checkout": ROOT}
            if args.baseline:
                trees[args.baseline] = stack.enter_context(baseline_tree(args.baseline))
            results = measure(box, trees, args.runs, args.catch_ups)
    finally:
        box.stop()
    load_end = os.getloadavg()[0]
    print(f"run --once on configs/demo.yaml, {rows:,} rows, load {load_start:.2f} -> {load_end:.2f}:")
    for name, r in results.items():
        runs = ", ".join(f"{s:.2f}" for s in r["noop_s"])
        print(f"  {name:<16} snapshot {r['snapshot_s']:6.2f} s   nothing to do: median {r['noop_median_s']:.2f} s ({runs})")
        if r["catch_up_s"]:
            print(f"  {'':<16} two changes: median {r['catch_up_median_s']:.2f} s "
                  f"({', '.join(f'{s:.2f}' for s in r['catch_up_s'])})")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"startup-{dt.date.today().isoformat()}{args.suffix}.json"
    out.write_text(json.dumps({"rows": rows, "runs": args.runs, "catch_ups": args.catch_ups,
                               "load_start": load_start, "load_end": load_end,
                               "trees": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
