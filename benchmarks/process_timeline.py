"""Which process used the two cores when, during a benchmark run, next to Spark's own events.

Runs a command (a benchmark) with Spark's event log on, samples every process of the run from
``/proc`` every 20 ms (its CPU seconds so far), and prints for the run's last Spark application (``--app``: another one):

* a timeline of its SQL executions, stages and streaming query start, and of each process's
  start, first and last CPU use, in seconds since the application started;
* the cores each kind of process used in each window (``--window``, 0.2 s by default).

Kinds: the driver JVM (``jvm``), the benchmark's driver process (``driver``), Spark's Python
planner processes by module (``lookup_data_sources``, ``create_data_source``,
``plan_data_source_read``, ``source runner``), the task workers' daemon, its zygote and their forks
(``workers``), and the database server (``server``: mariadbd, or PostgreSQL's postmaster and
backends). This is how the critical path of a catch-up's start was found (the planner process
that pickled the executors' read function, cdc/spark/packed.py).

Usage: python benchmarks/process_timeline.py [--window 0.2] [--from 0] [--to 1e9] [--app -1] -- <command ...>
e.g. ``python benchmarks/process_timeline.py -- python benchmarks/postgres_bench.py --scale 100
--rounds 1 --catch-up-variants ""``. The sampling takes some CPU of its own (a few percent of a
core), so the run's own numbers are a little slower than without it.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from cdc.spark.zygote import comm as zygote_comm

TICK = os.sysconf("SC_CLK_TCK")
PLANNERS = ("lookup_data_sources", "create_data_source", "plan_data_source_read")
# the kind of a fork of a job's zygote, by the name it gives itself
ZYGOTE_FORKS = {zygote_comm("python_streaming_source_runner"): "source runner",
                **{zygote_comm(p): p for p in PLANNERS}}


def kind(cmdline: list[str], comm: str = "") -> str | None:
    """What a process is, from its command line (and, for a fork of a job's zygote, which names
    its forks after what they run, its ``comm``: ``cdc/spark/zygote.py``); None: not part of a run."""
    if not cmdline:
        return None
    line = " ".join(cmdline)
    if "cdc.spark.zygote" in line:
        return ZYGOTE_FORKS.get(comm, "workers")
    if os.path.basename(cmdline[0]) == "java" or any(os.path.basename(a) in ("spark-submit", "spark-class")
                                                     for a in cmdline[:2]):
        return "jvm"  # spark-submit's script execs spark-class's, which execs the JVM, in the same process
    if "python_streaming_source_runner" in line:
        return "source runner"
    for planner in PLANNERS:
        if f"pyspark.sql.worker.{planner}" in line:
            return planner
    if "cdc.spark.daemon" in line or "pyspark.daemon" in line:
        return "workers"
    if "pipeline_bench.py" in line:
        return "driver"
    if os.path.basename(cmdline[0]) in ("mariadbd", "mysqld", "postgres") or cmdline[0].startswith("postgres:"):
        return "server"
    return None


@dataclass
class Proc:
    kind: str
    first_seen: float
    forked: bool = False  # by a job's zygote (or it is the zygote): its kind follows its comm
    samples: list[tuple[float, float]] = field(default_factory=list)  # (time, CPU seconds so far)


def sample(root: int, procs: dict[int, Proc], stop: threading.Event, period: float = 0.02) -> None:
    """Every ``period`` s until ``stop``: the CPU seconds so far of each known kind of process
    that descends from ``root`` (the run's other processes, and the machine's, are left out)."""
    family, strangers = {root}, set()
    while not stop.is_set():
        now = time.time()
        pending: dict[int, int] = {}  # pid -> parent, for processes not placed yet
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in strangers:
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if pid not in family:
                    pending[pid] = int(fields[1])
                    continue
                if (pid not in procs or procs[pid].forked) and pid != root:  # a fork names itself after a while
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
                    with open(f"/proc/{pid}/comm") as f:
                        what = kind(cmdline, f.read().strip()) or ""
                    if pid in procs:
                        procs[pid].kind = what
                    else:
                        procs[pid] = Proc(what, now, forked="cdc.spark.zygote" in cmdline)
            except OSError:
                continue  # gone meanwhile
            if pid in procs and procs[pid].kind:
                cpu = (int(fields[11]) + int(fields[12])) / TICK
                samples = procs[pid].samples
                if not samples or samples[-1][1] != cpu:
                    samples.append((now, cpu))
        while True:  # a new process joins the family when its parent is in it (next pass samples it)
            joined = {pid for pid, parent in pending.items() if parent in family}
            if not joined:
                break
            family |= joined
            for pid in joined:
                del pending[pid]
        strangers |= {pid for pid, parent in pending.items() if parent not in pending}
        stop.wait(period)


def wait_gone(pids: list[int], limit: float = 30.0) -> None:
    """Until none of ``pids`` is alive (the JVM finishes its event log after the driver ends)."""
    end = time.time() + limit
    while time.time() < end and any(os.path.exists(f"/proc/{pid}") for pid in pids):
        time.sleep(0.1)


def spark_events(folder: Path, app: int = -1) -> tuple[float, list[tuple[float, str]]]:
    """The start (epoch s) of the run's ``app``-th Spark application in order of their ends (-1:
    the last), and its SQL executions, stages and query start."""
    apps = sorted(glob.glob(str(folder / "eventlog_v2_*")), key=os.path.getmtime)
    if not apps:
        raise SystemExit(f"no Spark event log in {folder}: did the command start a Spark session?")
    if not -len(apps) <= app < len(apps):
        raise SystemExit(f"--app {app}: the run had {len(apps)} Spark applications")
    lines: list[dict[str, Any]] = []
    for part in sorted(glob.glob(os.path.join(apps[app], "events_*"))):
        raw = pa.CompressedInputStream(pa.OSFile(part), "zstd").read() if part.endswith(".zstd") \
            else Path(part).read_bytes()
        lines += [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
    start = next(e["Timestamp"] for e in lines if e["Event"] == "SparkListenerApplicationStart") / 1000
    out: list[tuple[float, str]] = []
    for e in lines:
        name = e["Event"].rsplit(".", 1)[-1]
        if name in ("SparkListenerSQLExecutionStart", "SparkListenerSQLExecutionEnd"):
            starts = name.endswith("Start")
            what = (e.get("description") or "").strip().splitlines()[0][:50] if starts else ""
            out.append((e["time"] / 1000, f"SQL execution {e['executionId']} {'starts' if starts else 'ends'} {what}"))
        elif name == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            out.append((info["Submission Time"] / 1000, f"stage {info['Stage ID']} submitted, {info['Number of Tasks']} tasks"))
            out.append((info["Completion Time"] / 1000, f"stage {info['Stage ID']} completed"))
        elif name.endswith("QueryStartedEvent"):
            ts = e.get("timestamp", "")
            out.append((_iso(ts) if ts else start, "streaming query started"))
    return start, out


def _iso(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def report(procs: dict[int, Proc], start: float, events: list[tuple[float, str]], window: float,
           lo: float, hi: float) -> None:
    rows = list(events)
    for pid, p in procs.items():
        if not p.kind or len(p.samples) < 2 or p.samples[-1][0] < start:
            continue
        used = p.samples[-1][1] - p.samples[0][1]
        rows.append((p.first_seen, f"  {p.kind} {pid} seen"))
        rows.append((p.samples[1][0], f"  {p.kind} {pid} first CPU"))
        rows.append((p.samples[-1][0], f"  {p.kind} {pid} last CPU ({used:.2f} CPU s in all)"))
    print("seconds since the application started")
    for t, text in sorted(rows):
        if lo <= t - start <= hi:
            print(f"{t - start:8.2f}  {text}")
    cores: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in procs.values():
        for (_, c0), (t1, c1) in itertools.pairwise(p.samples):
            cores[int((t1 - start) // window)][p.kind] += (c1 - c0) / window
    print(f"\ncores used per {window} s window, by kind of process")
    for w in sorted(cores):
        if lo <= w * window <= hi:
            use = cores[w]
            print(f"{w * window:8.2f}  {sum(use.values()):4.2f}  " + "  ".join(
                f"{k} {v:.2f}" for k, v in sorted(use.items(), key=lambda kv: -kv[1]) if v >= 0.05))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window", type=float, default=0.2, help="seconds per line of the cores table")
    p.add_argument("--from", dest="lo", type=float, default=0.0, help="print from this second on")
    p.add_argument("--to", dest="hi", type=float, default=1e9, help="print up to this second")
    p.add_argument("--app", type=int, default=-1, help="which of the run's Spark applications, in the "
                   "order they ended (0: the first, -1: the last, -2: the one before)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the run, after --")
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("give the command to run after --")
    with tempfile.TemporaryDirectory(prefix="process-timeline-") as tmp:
        events = Path(tmp) / "events"
        events.mkdir()
        procs: dict[int, Proc] = {}
        stop = threading.Event()
        run = subprocess.Popen(command, env={**os.environ, "SPARK_SUBMIT_OPTS": event_log_options(events)})
        sampler = threading.Thread(target=sample, args=(run.pid, procs, stop), daemon=True)
        sampler.start()
        try:
            run.wait()
            wait_gone([pid for pid, p in list(procs.items()) if p.kind == "jvm"])  # the sampler still adds
        finally:
            stop.set()
            sampler.join()
        start, spark = spark_events(events, a.app)
        report(procs, start, spark, a.window, a.lo, a.hi)
    sys.exit(run.returncode)


def event_log_options(events: Path) -> str:
    """``SPARK_SUBMIT_OPTS`` that turn Spark's event log on into ``events``, next to the caller's own.

    The driver JVM's ``spark.*`` system properties reach its SparkConf. A ``SPARK_CONF_DIR`` of
    our own would do it too, but that folder goes first on the JVM's class path, which then no
    longer matches the class archive's (`make setup`), and the JVM drops the archive: the run
    would measure a slower start than a job has."""
    own = os.environ.get("SPARK_SUBMIT_OPTS", "")
    return " ".join(o for o in (own, "-Dspark.eventLog.enabled=true", f"-Dspark.eventLog.dir=file://{events}") if o)


if __name__ == "__main__":
    main()
