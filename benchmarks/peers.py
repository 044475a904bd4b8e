"""Benchmark peers: Flink CDC and Debezium against ours, on the same data, in the same run.

Run: ``.venv/bin/python benchmarks/peers.py [--source mariadb|postgres] [--scale 100] [--quick]
[--parallelism 2] [--burst N]`` (``make bench`` runs it for each source at scale 100 with every
setting and a 300k-update burst; ``--quick`` drops the as-shipped snapshots, which are the slow
part (Flink CDC's as shipped waits on a 500 ms poll for every chunk: minutes at scale 100), and
bursts 100k updates: a few minutes on 2 cores; ``make bench-quick`` runs it at scale 10 on
MariaDB, at scale 1 on PostgreSQL). The
catch-ups always run as shipped and tuned (PEERS.md). ``--build-only`` builds the harnesses and
exits (``scripts/setup.sh --bench`` does it).

The peers, each a small Maven module under ``benchmarks/peers/`` with a classpath of its own
(benchmarks/peer_harness.py, ../shared/design/PEERS.md, and each module's Java main for what it
does). On MariaDB (``--source mariadb``, the default; :class:`MariaDbPeers`):

* **Flink CDC** 3.5.0 (``flink-sql-connector-mysql-cdc``) on Flink 1.20.1: ``MySqlSource`` in the
  local MiniCluster at ``--parallelism``, snapshot with ``StartupOptions.snapshot()``, catch-up with
  ``specificOffset(file, pos)`` from ``SHOW MASTER STATUS`` taken before the burst;
* **Debezium** 3.5.0.Final, the embedded engine with the MariaDB connector: snapshot with
  ``snapshot.mode=initial``; catch-up from an offset file that a ``snapshot.mode=no_data`` run
  recorded before the burst. One table is snapshotted by one thread: its parallelism is 1.

On PostgreSQL (``--source postgres``): Flink CDC 3.5.0's ``postgres-cdc`` incremental snapshot
source and Debezium 3.5.0.Final's PostgreSQL connector, each starting its catch-up from a
replication slot made before the burst (benchmarks/peers_postgres.py says which slots and
publication, and who makes them).

Each peer runs twice, as shipped (every setting at its default) and tuned (``poll.interval.ms``
10, ``max.batch.size`` 16384, ``max.queue.size`` 65536: the knobs Debezium documents for
throughput; Flink CDC passes them to its Debezium reader through ``debeziumProperties``, and
reads chunks of ``--chunk-size`` rows, ours' size, instead of its default 8096). Records
are each tool's JSON without schemas (``JsonDebeziumDeserializationSchema``; the engine's ``Json``
format with ``converter.schemas.enable=false``) into a consumer that counts them and writes
nothing: **the peer's best case** (``--records raw`` counts the connector's records without
converting them: an even better case). Ours writes the Delta mirror and changelog (the snapshot of
benchmarks/tpcds_customer.py or benchmarks/postgres_bench.py, available-now, startup mode
``initial``, ``chunks_per_batch`` at the job's default, 16 x parallelism), then catches up on the
same burst.

The tuned peer and our snapshot run back to back ``--rounds`` times (3; ``--quick`` 1), the order
alternating, and the snapshot's ratio is the median of the pairs' ratios against the faster peer:
on 2 shared cores one pair moved between 1.46x and 1.96x for the same code. On MariaDB the pairs
hold Flink CDC tuned, the faster peer in every run so far; on PostgreSQL both tuned peers, back to
back, in every pair.

Timing is the same for every tool: the process's wall time from its launch to the last record
delivered (for us: the batch committed, and the mirror's last MERGE), so start-up (JVM, Flink's
MiniCluster, Spark) counts for everyone. On MariaDB the peers' JDBC login holds SELECT, RELOAD,
SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT and BINLOG MONITOR (what they ask for;
Debezium takes a global read lock at the start of its snapshot); ours holds SELECT, REPLICATION
SLAVE and REPLICATION CLIENT. On PostgreSQL every tool's login holds LOGIN REPLICATION and SELECT.

Prints rows/s per tool and our ratio against the faster peer, for the snapshot and for the
catch-up of ``--burst`` updates, and writes
``benchmarks/results/peers[-postgres]-<date>-sf<scale>[-quick|-burstN].json`` and a PNG chart next
to it; the file records each peer's settings (``settings``, by tool and setting, as the peer
reported them). The machine may be shared: each line notes the load average at its start.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, cast

from peer_harness import (
    FLINK_CDC_CHUNK_SIZE,
    MODULES,
    LaunchTimedPhase,
    OursFromLaunch,
    PeerBench,
    Run,
    build,
    run_java,
)
from peers_postgres import PostgresPeers
from pipeline_bench import RunStart, apply_burst, load
from postgres_bench import pg_customer
from tpcds import CustomerTable, customer_rows, customer_sandbox
from tpcds_customer import Bench, check_tools, paired_snapshots, pairs
from tpcds_customer import parse_args as ours_options

from binlog.mysql.connection import Endpoint
from cdc.model.config import DEFAULT_CHUNK_SIZE

RESULTS = Path(__file__).parent / "results"
SOURCES = {"mariadb": ("flink-cdc", "debezium"), "postgres": ("flink-cdc-postgres", "debezium")}  # their modules
PEER_USER = "peer"
PEER_GRANTS = "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR"
SERVER_IDS = {"flink-cdc": "5500-5531", "debezium": "5600"}  # ours uses 5400-5409
BURST = 300_000


# --- the peers' login ------------------------------------------------------------------------------


def peer_login(admin: Endpoint) -> Endpoint:
    """A login with the privileges the peers need, after dropping the anonymous users that
    ``mariadb-install-db`` creates (they would shadow a ``'peer'@'%'`` login)."""
    password = f"peer-{uuid.uuid4().hex[:16]}"
    with contextlib.closing(admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SELECT user, host FROM mysql.user WHERE user = ''")
        for user, host in cur.fetchall():
            cur.execute("DROP USER %s@%s", (user, host))
        for host in ("localhost", "127.0.0.1", "%"):
            cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (PEER_USER, host, password))
            cur.execute(f"GRANT {PEER_GRANTS} ON *.* TO %s@%s", (PEER_USER, host))
    return Endpoint(admin.host, admin.port, PEER_USER, password)


def master_status(admin: Endpoint) -> tuple[str, int]:
    """The server's current binlog file and position."""
    with contextlib.closing(admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    if row is None:
        raise SystemExit("SHOW MASTER STATUS returned nothing: is the binlog on?")
    return str(row[0]), int(row[1])


# --- the benchmark ---------------------------------------------------------------------------------


class OursMariaDb(OursFromLaunch, Bench):
    """tpcds_customer's phases, timed from each child process's launch."""

    def server_process(self) -> tuple[int | None, str]:
        return self.pid, "mariadbd"


class MariaDbPeers(PeerBench):
    """The MariaDB peers and ours on tpcds.customer_sandbox's table."""

    def __init__(self, table: CustomerTable, args: argparse.Namespace, work: Path,
                 classpaths: dict[str, str]) -> None:
        super().__init__(args, work, classpaths)
        self.table = table
        self.login = peer_login(table.box.admin)
        # tpcds_customer's options at their defaults (the job's), so a new option there cannot miss here
        ours_args = ours_options(["--chunk-size", str(args.chunk_size), "--burst", str(args.burst)])
        self.ours = OursMariaDb(table, ours_args, work)

    def peer(self, tool: str, phase: str, tuned: bool, extra: list[str], expect: int) -> None:
        t, login, a = self.table, self.login, self.args
        p = a.parallelism if tool == "flink-cdc" else 1
        args = ["--mode", phase, "--host", login.host, "--port", str(login.port), "--user", login.user,
                "--database", t.database, "--table", t.table, "--expect", str(expect),
                "--server-id", SERVER_IDS[tool], *extra]
        if tool == "flink-cdc":
            args += ["--parallelism", str(p), "--chunk-size", str(a.chunk_size if tuned else FLINK_CDC_CHUNK_SIZE)]
        self.run_peer(tool, tool, phase, tuned, p, args, login.password)

    def debezium_files(self, name: str) -> list[str]:
        folder = self.work / name
        folder.mkdir(exist_ok=True)
        return ["--offsets", str(folder / "offsets.dat"), "--history", str(folder / "history.dat")]

    def snapshots(self) -> Path:
        """Every tool's snapshot of the table (the peers' as shipped too, unless --quick), then
        ``--rounds`` pairs of Flink CDC tuned and ours back to back, the order alternating, as
        tpcds_customer.paired_snapshots runs its JDBC peer; ours' last run's checkpoint continues
        in catch-up."""
        rows, settings = self.table.rows, (True,) if self.args.quick else (False, True)
        if not self.args.quick:
            self.peer("flink-cdc", "snapshot", False, [], rows)
        for tuned in settings:
            name = f"debezium-snapshot-{'tuned' if tuned else 'shipped'}"
            self.peer("debezium", "snapshot", tuned, self.debezium_files(name), rows)
        return paired_snapshots(self.args.rounds, partial(self.peer, "flink-cdc", "snapshot", True, [], rows),
                                self.our_snapshot, partial(shutil.rmtree, ignore_errors=True), self.runs)

    def catch_ups(self, job: Path) -> None:
        """One burst of updates, then every tool's catch-up from a position taken before it (each
        peer as shipped and tuned)."""
        a, admin = self.args, self.table.box.admin
        try:
            self.peer_offset_before_burst()
            debezium = True
        except RuntimeError as exc:  # reported; the other tools still run
            print(f"  Debezium's start position FAILED, no Debezium catch-up: {exc}", flush=True)
            self.facts["debezium_record_offset_error"], debezium = str(exc)[:2000], False
        file, pos = master_status(admin)
        changed, seconds = apply_burst(admin, self.table, a.burst)
        self.facts["burst"] = {"updates": changed, "seconds": round(seconds, 2), "from": [file, pos]}
        print(f"  burst: {changed:,} updates in {seconds:.1f}s", flush=True)
        for tuned in (False, True):
            self.peer("flink-cdc", "catch-up", tuned, ["--file", file, "--pos", str(pos)], changed)
        recorded = self.work / "debezium-offset"
        for tuned in (False, True) if debezium else ():  # each starts from a copy of the recorded offset
            name = f"debezium-catch-up-{'tuned' if tuned else 'shipped'}"
            shutil.copytree(recorded, self.work / name)
            self.peer("debezium", "catch-up", tuned, self.debezium_files(name), changed)
        self.our_catch_up(job, changed)

    def peer_offset_before_burst(self) -> None:
        """Debezium's known start: a ``no_data`` run that stops once it streams records its offset."""
        t, login = self.table, self.login
        args = ["--mode", "record-offset", "--host", login.host, "--port", str(login.port),
                "--user", login.user, "--database", t.database, "--table", t.table,
                "--server-id", SERVER_IDS["debezium"], *self.debezium_files("debezium-offset")]
        r = run_java("debezium", self.classpaths["debezium"], args, login.password,
                     self.work / "debezium-record-offset.log", 300)
        offsets = self.work / "debezium-offset" / "offsets.dat"
        if not offsets.exists() or b'"snapshot"' in offsets.read_bytes() or b'"pos"' not in offsets.read_bytes():
            raise RuntimeError(f"Debezium's no_data run recorded no streaming offset: {r}")
        self.facts["debezium_record_offset_s"] = r["seconds"]

    def catch_up_phase(self, job: Path, p: int, cpb: int) -> LaunchTimedPhase:
        self.ours.start(f"ours-catch-up-p{p}", self.ours.pipeline_spec(job, p, cpb))
        return self.ours.last


# --- reporting -------------------------------------------------------------------------------------


def _named(name: str) -> Callable[[Run], bool]:
    return lambda r: r.name == name


def summary(runs: list[Run]) -> dict[str, Any]:
    """Per phase: each tool's rows/s (the median of its runs), the faster tuned peer (a peer as
    shipped only where no tuned run succeeded: a noisy machine can put one ahead, but the goals
    are against the tuned peers), and our ratio against it: the median of the pairs' ratios when
    that peer ran in pairs with ours (:meth:`PeerBench.snapshots`), else the ratio of the medians."""
    out: dict[str, Any] = {}
    for phase in ("snapshot", "catch-up"):
        here = [r for r in runs if r.phase == phase and r.rows]  # a failed run has no rows
        rates: dict[str, list[float]] = {}
        for r in here:
            rates.setdefault(r.name, []).append(r.rate)
        ours = next((r.name for r in here if r.tool == "ours"), None)
        tuned = {r.name for r in here if r.setting == "tuned"}
        peers = {n: statistics.median(v) for n, v in rates.items() if n != ours and (n in tuned or not tuned)}
        if not peers or ours is None:
            continue
        best = max(peers, key=lambda n: peers[n])
        paired = [round(o.rate / b.rate, 3)
                  for o, b in pairs(here, _named(ours), _named(best))]
        ratio = statistics.median(paired) if paired else statistics.median(rates[ours]) / peers[best]
        out[phase] = {"rows_per_s": {n: round(statistics.median(v)) for n, v in rates.items()},
                      "faster_peer": best, "ours_vs_faster_peer": round(ratio, 3),
                      **({"pairs": paired} if len(paired) > 1 else {})}
    return out


def table_text(runs: list[Run]) -> str:
    head = f"{'phase':<9} {'tool':<28} {'rows':>10} {'s':>8} {'rows/s':>10} {'ours/x':>7}  writes"
    out = [head, "-" * (len(head) + 50)]
    for phase in ("snapshot", "catch-up"):
        here = [r for r in runs if r.phase == phase]
        mine = [r for r in here if r.tool == "ours"]
        # a paired peer run (PostgreSQL: both tuned peers) against its own pair's ours, any other
        # against ours' last run
        partner = {r.detail["pair"]: r for r in mine if "pair" in r.detail}
        for r in here:
            ours = partner.get(r.detail.get("pair"), mine[-1] if mine else None)
            ratio = f"{ours.rate / r.rate:.2f}x" if ours is not None and r.tool != "ours" and r.rate else ""
            out.append(f"{phase:<9} {r.name:<28} {r.rows:>10,} {r.seconds:>8.2f} {r.rate:>10,.0f} {ratio:>7}  "
                       f"{r.writes}")
    return "\n".join(out)


def chart(result: dict[str, Any], path: Path) -> None:
    """Bars of rows/s per tool, one panel per phase, from the benchmark's JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = [ph for ph in ("snapshot", "catch-up") if any(r["phase"] == ph for r in result["runs"])]
    fig, axes = plt.subplots(len(phases), 1, figsize=(10, 2.6 * len(phases) + 0.8), squeeze=False)
    fig.subplots_adjust(hspace=0.45)
    for ax, phase in zip(axes[:, 0], phases, strict=True):
        runs = [r for r in result["runs"] if r["phase"] == phase]
        labels = [r["name"] + ("" if r["tool"] == "ours" else " (counts, writes nothing)")
                  + (f" [pair {r['detail']['pair'] + 1}]" if "pair" in r["detail"] else "") for r in runs]
        ys = list(range(len(runs)))  # a bar per run: a tool's paired runs share its name
        ax.barh(ys, [r["rows_per_s"] for r in runs],
                color=["#d62728" if r["tool"] == "ours" else "#1f77b4" for r in runs])
        ax.set_yticks(ys, labels)
        for i, r in enumerate(runs):
            ax.text(r["rows_per_s"], i, f" {r['rows_per_s']:,}/s  {r['seconds']:.1f}s", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{phase}: {runs[0]['rows']:,} rows, launch to last record"
                     + (f"; ours {result['summary'][phase]['ours_vs_faster_peer']}x the faster peer"
                        if phase in result["summary"] else ""), fontsize=9)
        ax.tick_params(labelsize=8)
    database = "PostgreSQL" if result.get("source") == "postgres" else "MariaDB"
    fig.suptitle(f"TPC-DS customer SF{result['scale']} in {database} ({result['date']}, load {result['load_average']['start']}"
                 " on 2 shared cores)", fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=cast(str, __doc__).split("\n", 1)[0])
    p.add_argument("--source", choices=tuple(SOURCES), default="mariadb",
                   help="the database the tools read: MariaDB (Flink CDC's MySQL source, Debezium's MariaDB "
                   "connector) or PostgreSQL (benchmarks/peers_postgres.py)")
    p.add_argument("--scale", type=int, default=100, help="TPC-DS scale (100 = 2M rows, 1000 = 12M)")
    p.add_argument("--quick", action="store_true", help="the peers' snapshots tuned only, a 100k-update burst "
                   "(a few minutes at scale 100)")
    p.add_argument("--parallelism", type=int, default=2, help="ours and Flink CDC's (Debezium's is 1)")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help="rows per snapshot chunk of ours (default: the job's) and of Flink CDC tuned "
                   f"(as shipped: its own default, {FLINK_CDC_CHUNK_SIZE})")
    p.add_argument("--burst", type=int, default=BURST, help="updates applied before the catch-up runs")
    p.add_argument("--rounds", type=int, default=None, help="pairs of the tuned peer (PostgreSQL: both tuned "
                   "peers) and ours' snapshot, back to back and alternating; the ratio is the median of the "
                   "pairs' (default 3; with --quick 1)")
    p.add_argument("--records", choices=("json", "raw"), default="json",
                   help="what the peers hand their counting sink: JSON (as documented) or the raw record")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one peer run may take")
    p.add_argument("--build-only", action="store_true", help="build every peer's harness, then exit")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, offsets, lakes)")
    args = p.parse_args()
    if args.quick:
        args.burst = min(args.burst, 100_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    return args


def settings(runs: list[Run]) -> dict[str, Any]:
    """Each peer's settings by run name, as the peer reported them (its first run that did)."""
    out: dict[str, Any] = {}
    for r in runs:
        if r.tool != "ours" and "settings" in r.detail:
            out.setdefault(r.name, r.detail["settings"])
    return out


def measure(args: argparse.Namespace, work: Path, classpaths: dict[str, str]) -> tuple[PeerBench, int]:
    """Load the table into a fresh server of ``--source``, run every tool on it; the bench and the
    table's rows."""
    started = time.perf_counter()
    sandbox = pg_customer if args.source == "postgres" else customer_sandbox
    with sandbox(args.scale) as table:
        print(f"loaded {table.rows:,} rows in {time.perf_counter() - started:.0f}s; work dir {work}", flush=True)
        bench: PeerBench = (PostgresPeers(table, args, work, classpaths) if args.source == "postgres"
                            else MariaDbPeers(cast(CustomerTable, table), args, work, classpaths))
        job = bench.snapshots()
        bench.catch_ups(job)
    return bench, table.rows


def main() -> None:
    args = parse_args()
    classpaths = {name: build(name) for name in (MODULES if args.build_only else SOURCES[args.source])}
    if args.build_only:
        print("peer harnesses built:", ", ".join(MODULES))
        return
    check_tools()
    print(f"TPC-DS customer in {args.source}, scale {args.scale} (~{customer_rows(args.scale):,} rows); "
          f"load average {os.getloadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-peers-"))
    start = RunStart.now()
    print(start.describe(), flush=True)
    started, load_start = start.clock, start.load
    try:
        bench, rows = measure(args, work, classpaths)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    runs, result = bench.runs, summary(bench.runs)
    print("\n" + table_text(runs))
    print("\nours/x: our rows/s over that line's. Peers count records and write nothing (their best "
          f"case); ours writes the Delta mirror and changelog. Load average {load_start} at the start, "
          f"{load()} at the end (2 cores, shared).")
    for phase, s in result.items():
        print(f"{phase}: ours vs the faster peer ({s['faster_peer']}): {s['ours_vs_faster_peer']}x")
    stamp = dt.date.today().isoformat()
    mode = "-quick" if args.quick else (f"-burst{args.burst}" if args.burst != BURST else "")
    out = RESULTS / f"peers{'-postgres' if args.source == 'postgres' else ''}-{stamp}-sf{args.scale}{mode}.json"
    out.parent.mkdir(exist_ok=True)
    doc = {
        "source": args.source, "scale": args.scale, "rows": rows, "date": stamp, "args": vars(args),
        "command": " ".join(["benchmarks/peers.py", *sys.argv[1:]]),
        **start.conditions(),
        "wall_seconds": round(time.perf_counter() - started), "summary": result, **bench.facts,
        "settings": settings(runs),
        "runs": [{**asdict(r), "name": r.name, "rows_per_s": round(r.rate)} for r in runs],
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    chart(doc, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png').name} in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
