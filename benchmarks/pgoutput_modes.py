"""pgoutput's modes on the server: text (what the job asks for), ``binary``, and ``streaming``.

Run: ``.venv/bin/python benchmarks/pgoutput_modes.py [--rows 300000] [--rounds 3]`` (a minute or two).

The server's logical decoding is the largest cost of a PostgreSQL catch-up (docs/performance/history.md).
pgoutput has two options that change it (PostgreSQL 14+):

* ``binary 'true'``: column values in their types' binary send format instead of text (the job
  would then parse binary instead of text);
* ``streaming 'on'`` (protocol 2): a transaction larger than ``logical_decoding_work_mem`` is
  sent in blocks while it is still in progress, instead of being spilled to disk by the reorder
  buffer until its commit. The job would then buffer the blocks of each transaction until its
  Stream Commit (and drop them on a Stream Abort).

Two workloads on a TPC-DS-customer-shaped table of ``--rows`` rows (ints and chars, as the
benchmarks' table), each decoded by ``pg_logical_slot_peek_binary_changes`` in every mode, the
order alternating between rounds: **one transaction** updating every row, and **small
transactions** of 1,000 rows each (what benchmarks/postgres_bench.py's bursts do). Prints each
mode's median seconds of the peek and its bytes, with the ratio to text, and writes
``benchmarks/results/pgoutput-modes-<date>.json``. The peek runs on the server alone: no Spark, no
job; the load average is printed next to each workload, because the machine may be shared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cdc.app.sandbox.postgres import start_postgres

RESULTS = Path(__file__).with_name("results")
MODES = {  # mode -> (proto_version, extra options)
    "text": ("1", ""),
    "binary": ("1", ", 'binary', 'true'"),
    "streaming": ("2", ", 'streaming', 'on'"),
}
_PEEK = ("SELECT count(*), coalesce(sum(length(data)), 0) FROM pg_logical_slot_peek_binary_changes("
         "'modes', %s::pg_lsn, NULL, 'proto_version', %s, 'publication_names', 'modes'{})")
_TABLE = ("CREATE TABLE cust (sk int PRIMARY KEY, id char(16), cdemo int, hdemo int, addr int, ship int, "
          "sale int, salut char(10), first char(20), last char(30), pref char(1), bday int, bmonth int, "
          "byear int, country varchar(20), login char(13), email char(50), review int)")
_LOAD = ("INSERT INTO cust SELECT g, 'AAAAAAAA' || g, g, g, g, g, g, 'Mr.', 'John', 'Smith', 'Y', 1, 2, "
         "1980, 'UNITED STATES', NULL, 'john@example.org', g FROM generate_series(1, %s) g")


def peek_each_mode(conn: Any, end: str, rounds: int) -> dict[str, dict[str, float]]:
    """Median seconds and bytes of a peek up to ``end`` in each mode (order alternating)."""
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    size: dict[str, int] = {}
    for r in range(rounds):
        for mode in (list(MODES) if r % 2 == 0 else list(reversed(MODES))):
            version, extra = MODES[mode]
            started = time.perf_counter()
            _, size[mode] = conn.execute(_PEEK.format(extra), (end, version)).fetchone()
            seconds[mode].append(time.perf_counter() - started)
    text = statistics.median(seconds["text"])
    return {m: {"seconds": statistics.median(s), "vs_text": statistics.median(s) / text, "bytes": size[m]}
            for m, s in seconds.items()}


def workload(conn: Any, rows: int, per_transaction: int) -> str:
    """Update every row (``per_transaction`` rows per transaction; 0: all in one); the LSN after."""
    step = per_transaction or rows
    for lo in range(1, rows + 1, step):
        conn.execute("UPDATE cust SET cdemo = cdemo + 1 WHERE sk BETWEEN %s AND %s", (lo, lo + step - 1))
    return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    box = start_postgres()
    results: dict[str, Any] = {"rows": args.rows, "rounds": args.rounds, "server": box.version,
                               "date": dt.date.today().isoformat(), "workloads": {}}
    try:
        a = box.admin
        dsn = f"host={a.host} port={a.port} user={a.user} password={a.password} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_TABLE)
            conn.execute(_LOAD, (args.rows,))
            conn.execute("CREATE PUBLICATION modes FOR TABLE cust")
            for name, per_transaction in (("one transaction", 0), ("transactions of 1,000 rows", 1000)):
                conn.execute("SELECT pg_create_logical_replication_slot('modes', 'pgoutput')")
                end = workload(conn, args.rows, per_transaction)
                load = os.getloadavg()[0]
                modes = peek_each_mode(conn, end, args.rounds)
                conn.execute("SELECT pg_drop_replication_slot('modes')")
                results["workloads"][name] = {"load": load, "modes": modes}
                print(f"{name} ({args.rows:,} updates; load {load:.2f}):")
                for mode, m in modes.items():
                    print(f"  {mode:<10} {m['seconds']:6.2f} s  {m['vs_text']:5.2f}x text  {m['bytes'] / 1e6:7.1f} MB")
    finally:
        box.stop()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"pgoutput-modes-{results['date']}.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
