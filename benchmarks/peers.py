"""Benchmark peers: Flink CDC and Debezium against ours, on the same data, in the same run.

Run: ``.venv/bin/python benchmarks/peers.py [--scale 100] [--quick] [--parallelism 2] [--burst N]``
(``make bench`` runs it at scale 100 with every setting and a 300k-update burst; ``--quick`` drops
the as-shipped snapshots, which are the slow part (Flink CDC's as shipped waits on a 500 ms poll
for every chunk: minutes at scale 100), and bursts 100k updates: a few minutes on 2 cores; ``make
bench-quick`` runs it at scale 10). The catch-ups always run as shipped and tuned (PEERS.md).
``--build-only`` builds the two harnesses and exits (``scripts/setup.sh --bench`` does it).

The peers, each a small Maven module under ``benchmarks/peers/`` with a classpath of its own
(see ../shared/design/PEERS.md, and each module's Java main for what it does):

* **Flink CDC** 3.5.0 (``flink-sql-connector-mysql-cdc``) on Flink 1.20.1: ``MySqlSource`` in the
  local MiniCluster at ``--parallelism``, snapshot with ``StartupOptions.snapshot()``, catch-up with
  ``specificOffset(file, pos)`` from ``SHOW MASTER STATUS`` taken before the burst;
* **Debezium** 3.5.0.Final, the embedded engine with the MariaDB connector: snapshot with
  ``snapshot.mode=initial``; catch-up from an offset file that a ``snapshot.mode=no_data`` run
  recorded before the burst. One table is snapshotted by one thread: its parallelism is 1.

Each peer runs twice, as shipped (every setting at its default) and tuned (``poll.interval.ms``
10, ``max.batch.size`` 16384, ``max.queue.size`` 65536: the knobs Debezium documents for
throughput; Flink CDC passes them to its Debezium reader through ``debeziumProperties``, and
reads chunks of ``--chunk-size`` rows, ours' size, instead of its default 8096). Records
are each tool's JSON (``JsonDebeziumDeserializationSchema``; the engine's ``Json`` format) into a
consumer that counts them and writes nothing: **the peer's best case** (``--records raw`` counts
the connector's records without converting them: an even better case). Ours writes the Delta
mirror and changelog (the snapshot of benchmarks/tpcds_customer.py, available-now, startup mode
``initial``, ``chunks_per_batch`` at the job's default, 16 x parallelism), then catches up on the same burst.

Flink CDC tuned, the faster peer in every run so far, and our snapshot run back to back ``--rounds``
times (3; ``--quick`` 1), the order alternating, and the snapshot's ratio is the median of the
pairs' ratios: on 2 shared cores one pair moved between 1.46x and 1.96x for the same code.

Timing is the same for every tool: the process's wall time from its launch to the last record
delivered (for us: the batch committed, and the mirror's last MERGE), so start-up (JVM, Flink's
MiniCluster, Spark) counts for everyone. The peers' JDBC login holds SELECT, RELOAD, SHOW
DATABASES, REPLICATION SLAVE, REPLICATION CLIENT and BINLOG MONITOR (what they ask for; Debezium
takes a global read lock at the start of its snapshot); ours holds SELECT, REPLICATION SLAVE and
REPLICATION CLIENT.

Prints rows/s per tool and our ratio against the faster peer, for the snapshot and for the
catch-up of ``--burst`` updates, and writes ``benchmarks/results/peers-<date>-sf<scale>[-quick|-burstN].json``
and a PNG chart next to it.
The machine may be shared: each line notes the load average at its start.
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
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

from pipeline_bench import MARK, ChildPhase, RunStart, apply_burst
from tpcds import CustomerTable, customer_rows, customer_sandbox
from tpcds_customer import Bench, Line, check_tools, load, paired_snapshots, pairs
from tpcds_customer import parse_args as ours_options

from binlog.mysql.connection import Endpoint
from cdc.model.config import DEFAULT_CHUNK_SIZE

HERE = Path(__file__).parent
RESULTS = HERE / "results"
MODULES = {  # tool -> (module folder, jar, main class)
    "flink-cdc": (HERE / "peers" / "flink-cdc", "peer-flink-cdc-1.jar", "dev.sparkcdc.peers.FlinkCdcPeer"),
    "debezium": (HERE / "peers" / "debezium", "peer-debezium-1.jar", "dev.sparkcdc.peers.DebeziumPeer"),
}
PEER_USER = "peer"
PEER_GRANTS = "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR"
SERVER_IDS = {"flink-cdc": "5500-5531", "debezium": "5600"}  # ours uses 5400-5409
BURST = 300_000
CHUNKS_PER_BATCH = 16  # x parallelism: the job's default (source.chunks_per_batch)
FLINK_CDC_CHUNK_SIZE = 8096  # scan.incremental.snapshot.chunk.size's default


# --- building the harnesses ------------------------------------------------------------------------


def build(tool: str) -> str:
    """Build one peer's Maven module unless its jar is newer than its sources; its classpath.

    Maven's output stays in the module's ``target/`` (git-ignored). The first build resolves the
    module's dependencies from Maven Central into ~/.m2; later builds run offline.

    Raises:
        SystemExit: ``mvn`` is missing or the build failed (with Maven's output).
    """
    folder, jar_name, _ = MODULES[tool]
    jar = folder / "target" / jar_name
    sources = [folder / "pom.xml", *folder.glob("src/**/*.java")]
    if jar.exists() and (folder / "target" / "lib").is_dir() and \
            jar.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return f"{jar}:{folder / 'target' / 'lib'}/*"
    if shutil.which("mvn") is None:
        raise SystemExit("mvn is missing: install Maven and a Java 17 JDK (scripts/setup.sh does it)")
    print(f"building the {tool} harness ({folder}; Maven Central on first use)",
          flush=True)
    shutil.rmtree(folder / "target" / "lib", ignore_errors=True)  # no stale jar stays on the classpath
    for offline in (["-o"], []):  # offline when ~/.m2 has everything, else resolve once
        done = subprocess.run(["mvn", "-q", "-B", *offline, "package"], cwd=folder,
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and jar.exists():
            os.utime(jar)  # Maven leaves an up-to-date jar untouched: mark it built now
            return f"{jar}:{folder / 'target' / 'lib'}/*"
    raise SystemExit(f"building {folder} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")


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


# --- one measured run ------------------------------------------------------------------------------


@dataclass
class Run:
    """One tool's run of one phase: a row of the printed table."""

    tool: str  # flink-cdc | debezium | ours
    phase: str  # snapshot | catch-up
    setting: str  # as shipped | tuned (peers); ours: its chunks_per_batch
    parallelism: int
    rows: int
    seconds: float  # from the process's launch to the last record delivered (ours: committed)
    load: float
    writes: str  # what the tool wrote
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def name(self) -> str:
        setting = "" if self.tool == "ours" else f" {self.setting}"
        return f"{self.tool}{setting} p={self.parallelism}"


def _peak_rss(pid: int, stop: threading.Event, peak: list[float]) -> None:
    """Sample a process's resident memory (MiB) until ``stop``; the highest goes to ``peak[0]``."""
    while not stop.is_set():
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    peak[0] = max(peak[0], int(line.split()[1]) / 1024)
        stop.wait(0.2)


def run_java(tool: str, classpath: str, args: list[str], password: str, log: Path,
             timeout: float) -> dict[str, Any]:
    """Run a peer's main once (password in its environment); its JSON line plus peak RSS.

    Raises:
        RuntimeError: the peer printed no JSON line or reported an error (with its log's tail).
    """
    main = MODULES[tool][2]
    # the JVM's temp files (Flink's MiniCluster: io, netty shuffle, dist cache, a 21 MB RPC jar per
    # run) next to the log, in the run's work directory, not left in /tmp
    scratch = log.with_suffix(".tmp")
    scratch.mkdir(parents=True, exist_ok=True)
    cmd = ["java", f"-Djava.io.tmpdir={scratch}", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
           main, *args, "--timeout", str(int(timeout))]
    env = {**os.environ, "PEER_PASSWORD": password}
    stop, peak = threading.Event(), [0.0]
    with open(log, "w") as err:
        launched = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        threading.Thread(target=_peak_rss, args=(proc.pid, stop, peak), daemon=True).start()
        try:
            out, _ = proc.communicate(timeout=timeout + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        finally:
            stop.set()
        outer = time.perf_counter() - launched
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{tool} {' '.join(args[:2])}: no result (exit {proc.returncode}); log {log}:\n"
                           + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    result = cast(dict[str, Any], json.loads(lines[-1]))
    if result.get("error"):
        raise RuntimeError(f"{tool} {' '.join(args[:2])}: {result['error']}; log {log}:\n"
                           + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    result.update(process_seconds=round(outer, 2), peak_rss_mib=round(peak[0]))
    return result


class LaunchTimedPhase(ChildPhase):
    """A phase of ours whose wall time runs from its process's launch to its ``result`` event."""

    def __init__(self, spec: dict[str, Any], log_path: Path, server_pid: int | None) -> None:
        self.committed_at: float | None = None  # when the last batch's commit was reported
        self.launched = time.perf_counter()
        super().__init__(spec, log_path, server_pid)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                event = json.loads(line[len(MARK):])
                if event["event"] == "batch":
                    self.committed_at = time.perf_counter()
                self.events.put(event)
        self.events.put(None)

    def wall(self, result: dict[str, Any]) -> float:
        """Launch to the last batch committed, plus the mirror's last MERGE after it (``drain_s``);
        Spark's shutdown after that is not counted (nor is the peers')."""
        assert self.committed_at is not None, "the phase committed no batch"
        return self.committed_at - self.launched + float(result.get("drain_s") or 0.0)


class OursBench(Bench):
    """tpcds_customer's phases, timed from each child process's launch."""

    last: LaunchTimedPhase

    def start(self, slug: str, spec: dict[str, Any]) -> ChildPhase:
        self.last = LaunchTimedPhase(spec, self.work / f"{slug}.log", self.pid)
        return self.last

    def add(self, line: Line) -> Line:  # PeerBench prints the line, timed from launch
        self.lines.append(line)
        return line


# --- the benchmark ---------------------------------------------------------------------------------


class PeerBench:
    """Runs every tool on one loaded table: snapshots, then one burst, then catch-ups."""

    def __init__(self, table: CustomerTable, args: argparse.Namespace, work: Path,
                 classpaths: dict[str, str]) -> None:
        self.table, self.args, self.work, self.classpaths = table, args, work, classpaths
        self.login = peer_login(table.box.admin)
        # tpcds_customer's options at their defaults (the job's), so a new option there cannot miss here
        ours_args = ours_options(["--chunk-size", str(args.chunk_size), "--burst", str(args.burst)])
        self.ours = OursBench(table, ours_args, work)
        self.runs: list[Run] = []
        self.facts: dict[str, Any] = {}

    def add(self, run: Run) -> None:
        self.runs.append(run)
        print(f"  {run.phase:<9} {run.name:<28} {run.rows:>10,} rows {run.seconds:>7.2f}s "
              f"{run.rate:>10,.0f}/s  ({run.writes}; load {run.load})", flush=True)

    def peer(self, tool: str, phase: str, tuned: bool, extra: list[str], expect: int) -> None:
        t, login, a = self.table, self.login, self.args
        p = a.parallelism if tool == "flink-cdc" else 1
        setting = "tuned" if tuned else "as shipped"
        args = ["--mode", phase, "--host", login.host, "--port", str(login.port), "--user", login.user,
                "--database", t.database, "--table", t.table, "--expect", str(expect),
                "--records", a.records, "--server-id", SERVER_IDS[tool], *extra]
        if tool == "flink-cdc":
            args += ["--parallelism", str(p), "--chunk-size", str(a.chunk_size if tuned else FLINK_CDC_CHUNK_SIZE)]
        args += ["--tuned"] if tuned else []
        started_load = load()
        slug = f"{tool}-{phase}-{'tuned' if tuned else 'shipped'}"
        writes = f"counting sink, {a.records} records: best case, writes nothing"
        try:
            r = run_java(tool, self.classpaths[tool], args, login.password, self.work / f"{slug}.log", a.timeout)
        except RuntimeError as exc:  # reported; the other tools still run
            print(f"  {phase} {tool} {setting} FAILED: {exc}", flush=True)
            self.runs.append(Run(tool, phase, setting, p, 0, 0.0, started_load, writes, {"error": str(exc)[:2000]}))
            return
        self.add(Run(tool, phase, setting, p, int(r["rows"]), float(r["seconds"]), started_load, writes, r))

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

    def our_snapshot(self) -> Path:
        p = self.args.parallelism
        started_load = load()
        job = self.ours.snapshot(p, CHUNKS_PER_BATCH * p)
        line = self.ours.lines[-1]
        wall = self.ours.last.wall({"drain_s": line.detail.get("mirror_drain_s")})
        self.add(Run("ours", "snapshot", f"chunks_per_batch {CHUNKS_PER_BATCH * p}", p, line.rows, wall, started_load,
                     "Delta mirror + changelog",
                     {"query_seconds": round(line.seconds, 2), **_slim(line.detail), "rss": line.rss}))
        return job

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

    def our_catch_up(self, job: Path, changed: int) -> None:
        p = self.args.parallelism
        started_load = load()
        child = self.ours.start(f"ours-catch-up-p{p}", self.ours.pipeline_spec(job, p, CHUNKS_PER_BATCH * p))
        r = child.wait()
        detail = {"query_seconds": round(r["seconds"], 2), "expected": changed,
                  "changes_ok": r["change_rows"] == changed, "batches": r["batches"],
                  "mirror_drain_s": r.get("drain_s"), "progress": r["progress"], "rss": child.rss.to_dict()}
        self.add(Run("ours", "catch-up", f"chunks_per_batch {CHUNKS_PER_BATCH * p}", p, r["change_rows"], self.ours.last.wall(r), started_load,
                     "Delta mirror + changelog", detail))


def _slim(detail: dict[str, Any]) -> dict[str, Any]:
    keep = ("batches", "mirror_rows", "mirror_ok", "chunks_per_batch", "start_up_s", "rate_after_start_up")
    return {k: detail[k] for k in keep if k in detail}


# --- reporting -------------------------------------------------------------------------------------


def _named(name: str) -> Callable[[Run], bool]:
    return lambda r: r.name == name


def summary(runs: list[Run]) -> dict[str, Any]:
    """Per phase: each tool's rows/s (the median of its runs), the faster peer, and our ratio
    against it: the median of the pairs' ratios when that peer ran in pairs with ours
    (:meth:`PeerBench.snapshots`), else the ratio of the medians."""
    out: dict[str, Any] = {}
    for phase in ("snapshot", "catch-up"):
        here = [r for r in runs if r.phase == phase and r.rows]  # a failed run has no rows
        rates: dict[str, list[float]] = {}
        for r in here:
            rates.setdefault(r.name, []).append(r.rate)
        ours = next((r.name for r in here if r.tool == "ours"), None)
        peers = {n: statistics.median(v) for n, v in rates.items() if n != ours}
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
        # a paired peer run against its own pair's ours, any other against ours' last run
        partner = {id(b): o for o, b in pairs(here, lambda r: r.tool == "ours", lambda r: r.tool != "ours")}
        for r in here:
            ours = partner.get(id(r), mine[-1] if mine else None)
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
        labels = [r["name"] + ("" if r["tool"] == "ours" else " (counts, writes nothing)") for r in runs]
        ax.barh(labels, [r["rows_per_s"] for r in runs],
                color=["#d62728" if r["tool"] == "ours" else "#1f77b4" for r in runs])
        for i, r in enumerate(runs):
            ax.text(r["rows_per_s"], i, f" {r['rows_per_s']:,}/s  {r['seconds']:.1f}s", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{phase}: {runs[0]['rows']:,} rows, launch to last record"
                     + (f"; ours {result['summary'][phase]['ours_vs_faster_peer']}x the faster peer"
                        if phase in result["summary"] else ""), fontsize=9)
        ax.tick_params(labelsize=8)
    fig.suptitle(f"TPC-DS customer SF{result['scale']} ({result['date']}, load {result['load_average']['start']}"
                 " on 2 shared cores)", fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=cast(str, __doc__).split("\n", 1)[0])
    p.add_argument("--scale", type=int, default=100, help="TPC-DS scale (100 = 2M rows, 1000 = 12M)")
    p.add_argument("--quick", action="store_true", help="the peers' snapshots tuned only, a 100k-update burst "
                   "(a few minutes at scale 100)")
    p.add_argument("--parallelism", type=int, default=2, help="ours and Flink CDC's (Debezium's is 1)")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help="rows per snapshot chunk of ours (default: the job's) and of Flink CDC tuned "
                   f"(as shipped: its own default, {FLINK_CDC_CHUNK_SIZE})")
    p.add_argument("--burst", type=int, default=BURST, help="updates applied before the catch-up runs")
    p.add_argument("--rounds", type=int, default=None, help="pairs of Flink CDC tuned and ours' snapshot, back to "
                   "back and alternating; the ratio is the median of the pairs' (default 3; with --quick 1)")
    p.add_argument("--records", choices=("json", "raw"), default="json",
                   help="what the peers hand their counting sink: JSON (as documented) or the raw record")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one peer run may take")
    p.add_argument("--build-only", action="store_true", help="build the two harnesses, then exit")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, offsets, lakes)")
    args = p.parse_args()
    if args.quick:
        args.burst = min(args.burst, 100_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    return args


def main() -> None:
    args = parse_args()
    classpaths = {tool: build(tool) for tool in MODULES}
    if args.build_only:
        print("peer harnesses built:", ", ".join(MODULES))
        return
    check_tools()
    print(f"TPC-DS customer, scale {args.scale} (~{customer_rows(args.scale):,} rows); "
          f"load average {os.getloadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-peers-"))
    start = RunStart.now()
    print(start.describe(), flush=True)
    started, load_start = start.clock, start.load
    try:
        with customer_sandbox(args.scale) as table:
            print(f"loaded {table.rows:,} rows in {time.perf_counter() - started:.0f}s; work dir {work}", flush=True)
            bench = PeerBench(table, args, work, classpaths)
            job = bench.snapshots()
            bench.catch_ups(job)
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
    out = RESULTS / f"peers-{stamp}-sf{args.scale}{mode}.json"
    out.parent.mkdir(exist_ok=True)
    doc = {
        "scale": args.scale, "rows": table.rows, "date": stamp, "args": vars(args),
        "command": " ".join(["benchmarks/peers.py", *sys.argv[1:]]),
        **start.conditions(),
        "wall_seconds": round(time.perf_counter() - started), "summary": result, **bench.facts,
        "runs": [{**asdict(r), "name": r.name, "rows_per_s": round(r.rate)} for r in runs],
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    chart(doc, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png').name} in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
