"""The benchmark peers' harness, for benchmarks/peers.py (MariaDB) and benchmarks/peers_postgres.py:
building the peers' Maven modules, running one peer, ours timed from launch, and the line of a run.

The peers are small Maven modules under ``benchmarks/peers/``, each with a classpath of its own
(../shared/design/PEERS.md): ``flink-cdc`` (Flink CDC's MySQL source), ``flink-cdc-postgres``
(Flink CDC's ``postgres-cdc`` incremental source) and ``debezium`` (Debezium's embedded engine
with the MariaDB and the PostgreSQL connector). Their parent poms (``peers/pom.xml``,
``peers/flink-common/pom.xml``) compile the shared sources of ``peers/common`` and
``peers/flink-common`` into each module's jar. Each main prints one JSON line: rows, seconds from
its process's launch to the last record it counted, and its settings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pipeline_bench import MARK, ChildPhase, load

PEERS = Path(__file__).parent / "peers"
CHUNKS_PER_BATCH = 16  # x parallelism: the job's default (source.chunks_per_batch)
FLINK_CDC_CHUNK_SIZE = 8096  # scan.incremental.snapshot.chunk.size's default (MySQL and Postgres)


@dataclass(frozen=True)
class Module:
    """One peer's Maven module: its folder under ``benchmarks/peers/``, its main class, and the
    folders of shared sources (and parent poms) compiled into it."""

    folder: str
    main: str
    shared: tuple[str, ...] = ("common",)

    @property
    def jar(self) -> Path:
        return PEERS / self.folder / "target" / f"peer-{self.folder}-1.jar"

    @property
    def classpath(self) -> str:
        return f"{self.jar}:{PEERS / self.folder / 'target' / 'lib'}/*"

    def sources(self) -> list[Path]:
        """What the jar is built from: the poms on its way up and every Java source it compiles."""
        out = [PEERS / "pom.xml"]
        for folder in (self.folder, *self.shared):
            out += [p for p in (PEERS / folder / "pom.xml",) if p.exists()]
            out += (PEERS / folder).glob("src/**/*.java")
        return out


MODULES = {
    "flink-cdc": Module("flink-cdc", "dev.sparkcdc.peers.FlinkCdcPeer", ("common", "flink-common")),
    "flink-cdc-postgres": Module("flink-cdc-postgres", "dev.sparkcdc.peers.FlinkCdcPostgresPeer",
                                 ("common", "flink-common")),
    "debezium": Module("debezium", "dev.sparkcdc.peers.DebeziumPeer"),
}


# --- building the harnesses ------------------------------------------------------------------------


def build(name: str) -> str:
    """Build one peer's Maven module unless its jar is newer than its sources; its classpath.

    Maven's output stays in the module's ``target/`` (git-ignored). The first build resolves the
    module's dependencies from Maven Central into ~/.m2; later builds run offline.

    Raises:
        SystemExit: ``mvn`` is missing or the build failed (with Maven's output).
    """
    module = MODULES[name]
    folder, jar = PEERS / module.folder, module.jar
    if jar.exists() and (folder / "target" / "lib").is_dir() and \
            jar.stat().st_mtime >= max(s.stat().st_mtime for s in module.sources()):
        return module.classpath
    if shutil.which("mvn") is None:
        raise SystemExit("mvn is missing: install Maven and a Java 17 JDK (scripts/setup.sh does it)")
    print(f"building the {name} harness ({folder}; Maven Central on first use)", flush=True)
    shutil.rmtree(folder / "target" / "lib", ignore_errors=True)  # no stale jar stays on the classpath
    for offline in (["-o"], []):  # offline when ~/.m2 has everything, else resolve once
        done = subprocess.run(["mvn", "-q", "-B", *offline, "package"], cwd=folder,
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and jar.exists():
            os.utime(jar)  # Maven leaves an up-to-date jar untouched: mark it built now
            return module.classpath
    raise SystemExit(f"building {folder} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")


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


def run_java(name: str, classpath: str, args: list[str], password: str, log: Path,
             timeout: float) -> dict[str, Any]:
    """Run a peer module's main once (password in its environment); its JSON line plus peak RSS.

    Raises:
        RuntimeError: the peer printed no JSON line or reported an error (with its log's tail).
    """
    # the JVM's temp files (Flink's MiniCluster: io, netty shuffle, dist cache, a 21 MB RPC jar per
    # run) next to the log, in the run's work directory, not left in /tmp
    scratch = log.with_suffix(".tmp")
    scratch.mkdir(parents=True, exist_ok=True)
    cmd = ["java", f"-Djava.io.tmpdir={scratch}", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
           MODULES[name].main, *args, "--timeout", str(int(timeout))]
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
        raise RuntimeError(f"{name} {' '.join(args[:2])}: no result (exit {proc.returncode}); log {log}:\n"
                           + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    result = cast(dict[str, Any], json.loads(lines[-1]))
    if result.get("error"):
        raise RuntimeError(f"{name} {' '.join(args[:2])}: {result['error']}; log {log}:\n"
                           + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    result.update(process_seconds=round(outer, 2), peak_rss_mib=round(peak[0]))
    return result


class LaunchTimedPhase(ChildPhase):
    """A phase of ours whose wall time runs from its process's launch to its ``result`` event."""

    def __init__(self, spec: dict[str, Any], log_path: Path, server_pid: int | None,
                 server: str = "mariadbd") -> None:
        self.committed_at: float | None = None  # when the last batch's commit was reported
        self.launched = time.perf_counter()
        super().__init__(spec, log_path, server_pid, server)

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


class OursFromLaunch:
    """Mixin for a benchmark's ``Bench`` (tpcds_customer's, postgres_bench's): its pipeline phases
    timed from each child process's launch (:class:`LaunchTimedPhase`, the last one in ``last``),
    its lines kept but not printed (:class:`PeerBench` prints its own)."""

    last: LaunchTimedPhase
    lines: list[Any]
    work: Path

    def server_process(self) -> tuple[int | None, str]:
        """The database server's pid and process name, whose CPU the phases count."""
        raise NotImplementedError

    def start(self, slug: str, spec: dict[str, Any]) -> ChildPhase:
        pid, server = self.server_process()
        self.last = LaunchTimedPhase(spec, self.work / f"{slug}.log", pid, server)
        return self.last

    def add(self, line: Any) -> Any:
        self.lines.append(line)
        return line


# --- the benchmark ---------------------------------------------------------------------------------


class PeerBench:
    """Runs every tool on one loaded table: snapshots, then one burst, then catch-ups. The
    database's part is a subclass's (peers.MariaDbPeers, peers_postgres.PostgresPeers): how a peer
    logs in and where it starts, and ``ours``, a benchmark ``Bench`` with :class:`OursFromLaunch`."""

    ours: Any  # OursFromLaunch and a Bench with snapshot(p, cpb) -> Path

    def __init__(self, args: argparse.Namespace, work: Path, classpaths: dict[str, str]) -> None:
        self.args, self.work, self.classpaths = args, work, classpaths
        self.runs: list[Run] = []
        self.facts: dict[str, Any] = {}

    def add(self, run: Run) -> None:
        self.runs.append(run)
        extra = run.detail.get("records_after_target")  # a peer's records past the expected count
        print(f"  {run.phase:<9} {run.name:<28} {run.rows:>10,} rows {run.seconds:>7.2f}s "
              f"{run.rate:>10,.0f}/s  ({run.writes}; load {run.load})"
              + (f"  {extra:,} MORE RECORDS AFTER THOSE" if extra else ""), flush=True)

    def run_peer(self, tool: str, module: str, phase: str, tuned: bool, p: int, args: list[str],
                 password: str) -> None:
        """One run of a peer's module (``args``: its connection, mode and start); a failure is
        reported and recorded as a run without rows, and the other tools still run."""
        a, setting = self.args, "tuned" if tuned else "as shipped"
        args = [*args, "--records", a.records, *(["--tuned"] if tuned else [])]
        started_load = load()
        slug = f"{module}-{phase}-{'tuned' if tuned else 'shipped'}"
        writes = f"counting sink, {a.records} records: best case, writes nothing"
        try:
            r = run_java(module, self.classpaths[module], args, password, self.work / f"{slug}.log", a.timeout)
        except RuntimeError as exc:
            print(f"  {phase} {tool} {setting} FAILED: {exc}", flush=True)
            self.runs.append(Run(tool, phase, setting, p, 0, 0.0, started_load, writes, {"error": str(exc)[:2000]}))
            return
        self.add(Run(tool, phase, setting, p, int(r["rows"]), float(r["seconds"]), started_load, writes, r))

    def our_snapshot(self) -> Path:
        """Ours' snapshot (the benchmark's available-now run from nothing), timed from launch."""
        p = self.args.parallelism
        started_load = load()
        job = self.ours.snapshot(p, CHUNKS_PER_BATCH * p)
        line = self.ours.lines[-1]
        wall = self.ours.last.wall({"drain_s": line.detail.get("mirror_drain_s")})
        self.add(Run("ours", "snapshot", f"chunks_per_batch {CHUNKS_PER_BATCH * p}", p, line.rows, wall, started_load,
                     "Delta mirror + changelog",
                     {"query_seconds": round(line.seconds, 2), **_slim(line.detail), "rss": line.rss}))
        return job

    def snapshots(self) -> Path:
        """Every tool's snapshot of the table; the job of ours' last, which the catch-up continues."""
        raise NotImplementedError

    def catch_ups(self, job: Path) -> None:
        """One burst of updates, then every tool's catch-up of it (ours: :meth:`our_catch_up`)."""
        raise NotImplementedError

    def catch_up_phase(self, job: Path, p: int, cpb: int) -> LaunchTimedPhase:
        """Ours' catch-up run of ``job``, launched."""
        raise NotImplementedError

    def our_catch_up(self, job: Path, changed: int) -> None:
        """Ours' catch-up of the burst from the snapshot's state, timed from launch."""
        p = self.args.parallelism
        started_load = load()
        child = self.catch_up_phase(job, p, CHUNKS_PER_BATCH * p)
        r = child.wait()
        detail = {"query_seconds": round(r["seconds"], 2), "expected": changed,
                  "changes_ok": r["change_rows"] == changed, "batches": r["batches"],
                  "mirror_drain_s": r.get("drain_s"), "progress": r["progress"], "rss": child.rss.to_dict()}
        self.add(Run("ours", "catch-up", f"chunks_per_batch {CHUNKS_PER_BATCH * p}", p, r["change_rows"],
                     child.wall(r), started_load, "Delta mirror + changelog", detail))


def _slim(detail: dict[str, Any]) -> dict[str, Any]:
    keep = ("batches", "mirror_rows", "mirror_ok", "chunks_per_batch", "start_up_s", "rate_after_start_up")
    return {k: detail[k] for k in keep if k in detail}
