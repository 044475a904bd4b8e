"""Where each process of a phase spent its time, from ``py-spy record --format raw`` output.

``SPARK_CDC_BENCH_PY_SPY=<dir>`` makes every benchmark phase run under ``py-spy record
--subprocesses`` (benchmarks/pipeline_bench.py), which writes collapsed stacks, one line per
distinct stack: ``process <pid>:"<cmdline>";...;<frame>;<frame> <samples>``. This prints, per
process (the driver, the source's planner, each Python worker Spark forked), its sampled seconds
and the frames that hold most of them: inclusive (a frame and everything below it), limited to
the project's own code and module imports (``<module>`` frames) unless ``--all``, and leaf (where the CPU was).

Usage: python benchmarks/py_spy_summary.py <dir>/<phase>.txt [--rate 250] [--top 15] [--all]
"""

from __future__ import annotations

import argparse
import collections
import re
from dataclasses import dataclass, field
from pathlib import Path

OURS = re.compile(r"\((cdc|binlog|chunking|sinks)/|^<module> ")
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


@dataclass
class Process:
    """One process's samples: in total, per frame including callees, and per leaf frame."""

    command: str
    samples: int = 0
    inclusive: collections.Counter[str] = field(default_factory=collections.Counter)
    leaf: collections.Counter[str] = field(default_factory=collections.Counter)


def short(frame: str) -> str:
    """``func (path/to/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py)``."""
    m = FRAME.match(frame)
    if not m:
        return frame
    path = m["file"]
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m['func']} ({path})"


def read(path: Path) -> dict[str, Process]:
    """Processes by ``pid:command``, from a raw py-spy file."""
    procs: dict[str, Process] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        names = [f for f in frames if f.startswith("process ")]
        if not names:
            continue
        key = names[-1][len("process "):]
        proc = procs.setdefault(key, Process(key.split(":", 1)[1].strip('"')))
        n = int(count)
        proc.samples += n
        code = [short(f) for f in frames if not f.startswith(("process ", "thread "))]
        for frame in dict.fromkeys(code):  # a recursive frame counts once per stack
            proc.inclusive[frame] += n
        if code:
            proc.leaf[code[-1]] += n
    return procs


def kind(command: str) -> str:
    """The process's role, from its command line."""
    if "pipeline_bench.py" in command:
        return "driver"
    m = re.search(r"pyspark\.daemon (\S+)", command) or re.search(r"-m (\S+)", command)
    return m[1] if m else command[:60]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path)
    p.add_argument("--rate", type=float, default=250.0, help="py-spy's sampling rate (samples/s)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--all", action="store_true", help="every frame, not only the project's and imports")
    a = p.parse_args()
    procs = sorted(read(a.path).items(), key=lambda kv: -kv[1].samples)
    print(f"{'process':60} {'sampled s':>10}")
    for key, proc in procs:
        print(f"{kind(proc.command) + ' ' + key.split(':')[0]:60} {proc.samples / a.rate:10.2f}")
    for key, proc in procs:
        if proc.samples / a.rate < 0.2:
            continue
        print(f"\n== {kind(proc.command)} (pid {key.split(':')[0]}): {proc.samples / a.rate:.2f} s sampled")
        shown = [(f, n) for f, n in proc.inclusive.most_common() if a.all or OURS.search(f)][:a.top]
        print("  inclusive:")
        for frame, n in shown:
            print(f"    {n / a.rate:7.2f} s  {frame}")
        print("  leaf:")
        for frame, n in proc.leaf.most_common(8):
            print(f"    {n / a.rate:7.2f} s  {frame}")


if __name__ == "__main__":
    main()
