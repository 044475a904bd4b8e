"""The benchmark tables of README.md and the docs' performance pages, generated from the result
JSON in ``benchmarks/results/``.

Each table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in its document and
is rebuilt from the JSON files listed in :data:`TABLES`, so a number in them is always one a
benchmark wrote. ``python benchmarks/readme_tables.py`` rewrites them all; ``--check`` exits 1 when
one differs (tests/test_docs.py runs it). README's ``headline`` and docs/performance/index.md's
tables show the newest runs: after a new run, put its file first in :data:`GOAL_RUNS_FILES` (the
headline and the goals) or in the ``*-current`` entries; docs/performance/history.md keeps every
kept run (``tpcds``, ``peers``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def _k(rate: float) -> str:
    return f"{rate / 1000:,.0f}k"


def _line(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(ln for ln in run["lines"] if ln["name"].startswith(name))


def _median_rate(run: dict[str, Any], name: str) -> float:
    """The median rate of the lines whose names start with ``name`` (a paired run has several)."""
    return float(statistics.median(ln["rows_per_s"] for ln in run["lines"] if ln["name"].startswith(name)))


def _snapshot(run: dict[str, Any], parallelism: int) -> dict[str, Any] | None:
    ours = [ln for ln in run["lines"] if ln["kind"] == "ours" and ln["parallelism"] == parallelism
            and "upd/s" not in ln["name"] and "backfill_skip" not in ln["name"]]
    return max(ours, key=lambda ln: ln["rows_per_s"]) if ours else None


def tpcds_table(files: list[tuple[str, str]]) -> list[str]:
    """The snapshot/catch-up/visibility table of ``tpcds_customer.py`` runs, one column per file."""
    runs = [(label, _load(f)) for label, f in files]
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("raw scan (fastest) / single reader / Spark JDBC p=2 (rows/s)", lambda r: " / ".join([
            _k(max(ln["rows_per_s"] for ln in r["lines"] if ln["kind"] == "limit")),
            _k(_line(r, "single reader")["rows_per_s"]), _k(_median_rate(r, "Spark JDBC peer p=2"))])),
        ("snapshot, ours p=2 (mirror + changelog), end to end", lambda r: (
            f"{_k(r['got'].get('snapshot_rows_per_s', r['lines_best']['rows_per_s']))} rows/s "
            f"({r['got']['snapshot_vs_limit']:.2f}x raw scan, {r['got']['snapshot_vs_jdbc']:.2f}x JDBC"
            + (f"; {len(r['got']['snapshot_vs_jdbc_pairs'])} pairs: "
               + ", ".join(f"{x:.2f}" for x in r['got']['snapshot_vs_jdbc_pairs'])
               if len(r['got'].get('snapshot_vs_jdbc_pairs', [])) > 1 else "") + ")")),
        ("snapshot, ours p=1 / Spark JDBC p=1", lambda r: (
            f"{_k(r['p1']['rows_per_s'])} / {_k(_line(r, 'Spark JDBC peer p=1')['rows_per_s'])}" if r["p1"] else "")),
        ("snapshot p=2 under 100 updates/s", lambda r: next(
            (f"{_k(ln['rows_per_s'])} rows/s" for ln in r["lines"] if "upd/s" in ln["name"]), "")),
        ("log catch-up, end to end (changelog and mirror)", lambda r: (
            f"{_k(r['got']['catch_up_per_s'])} changes/s ({r['burst']['updates']:,} updates"
            + (f"; median of {', '.join(_k(x) for x in r['got']['catch_up_runs_per_s'])}"
               if len(r['got'].get('catch_up_runs_per_s', [])) > 1 else "") + ")")),
        ("visibility at 1k changes/s: changelog p50 / p99", lambda r: (
            f"{r['visibility']['changelog_p50_s']:.1f} s / {r['visibility']['changelog_p99_s']:.1f} s")),
        ("visibility at 1k changes/s: mirror p50 / p99", lambda r: (
            f"{r['visibility']['mirror_p50_s']:.1f} s / {r['visibility']['mirror_p99_s']:.1f} s")),
        ("load average at start / end", lambda r: f"{r['load_average']['start']} / {r['load_average']['end']}"),
        ("Python probe at start / end (s; lower is faster)", _probe),
    ]
    for _, r in runs:
        r["lines_best"], r["p1"] = _snapshot(r, 2), _snapshot(r, 1)
    out = ["| measurement | " + " | ".join(f"`{label}` ({r['date']})" for label, r in runs) + " |",
           "| --- |" + " --- |" * len(runs)]
    cells = [(name, [cell(r) for _, r in runs]) for name, cell in rows]
    out += [f"| {name} | " + " | ".join(values) + " |" for name, values in cells if any(values)]
    return out


def _probe(run: dict[str, Any]) -> str:
    """The speed probe at a run's start and end (pipeline_bench.speed_probe; runs before it: none)."""
    probe = run.get("python_probe_s")
    return f"{probe['start']} / {probe['end']}" if probe else "not taken"


def peers_table(files: list[tuple[str, str]]) -> list[str]:
    """Ours against Flink CDC and Debezium (``peers.py`` runs, MariaDB or ``--source postgres``),
    two lines per file; a PostgreSQL run's lines say so."""
    out = ["| rows/s (p=2; Debezium p=1) | Flink CDC as shipped / tuned | Debezium as shipped / tuned | ours "
           "| ours / faster peer | load at start |", "| --- | --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        where = "PostgreSQL " if run.get("source") == "postgres" else ""
        for phase, what in (("snapshot", f"{where}snapshot, {run['rows']:,} rows"),
                            ("catch-up", f"{where}catch-up, {run['burst']['updates']:,} updates")):
            s = run["summary"][phase]
            rates = s["rows_per_s"]

            def rate(tool: str, setting: str, rates: dict[str, int] = rates) -> str:
                key = next((k for k in rates if k.startswith(f"{tool} {setting}")), None)
                return f"{rates[key]:,}" if key else "not run"

            ours = next(v for k, v in rates.items() if k.startswith("ours"))
            out.append(f"| `{label}`: {what} | {rate('flink-cdc', 'as shipped')} / {rate('flink-cdc', 'tuned')} "
                       f"| {rate('debezium', 'as shipped')} / {rate('debezium', 'tuned')} | {ours:,} "
                       f"| {s['ours_vs_faster_peer']:.2f}x"
                       + (f" (median of {', '.join(f'{x:.2f}' for x in s['pairs'])})" if "pairs" in s else "")
                       + f" | {run['load_average']['start']} |")
    return out


def _goal(value: float, target: float, at_least: bool, text: str) -> str:
    met = value >= target if at_least else value <= target
    return f"{text} ({'met' if met else 'not met'})"


def _snapshot_vs_single(run: dict[str, Any]) -> float:
    return float(run["got"]["snapshot_rows_per_s"]) / _line(run, "single reader")["rows_per_s"]


def _backlog(run: dict[str, Any]) -> tuple[float, int]:
    """The median rate and the driver's peak RSS (MiB) of a 2M-update run's catch-ups at the job's defaults."""
    lines = [ln for ln in run["lines"] if ln["kind"] == "catch-up"
             and ("defaults" in ln["name"] or "max_batch_bytes" not in ln["name"])]
    return float(statistics.median(ln["rows_per_s"] for ln in lines)), max(ln["rss"]["driver"] for ln in lines)


def goals_table(files: list[tuple[str, str]]) -> list[str]:
    """Issues #16 and #18's goals against the newest runs, and how often the kept runs met them.

    ``files`` names runs by role, the newest of each role first: ``mysql`` and ``postgres``
    (tpcds_customer.py and postgres_bench.py at SF100), ``peers`` and ``peers postgres`` (peers.py,
    MariaDB and ``--source postgres``; without the latter the PostgreSQL column says the peers were
    not measured), ``mysql 2M`` and ``postgres 2M`` (2M-update catch-ups). A role listed more than once gets, after its newest
    value, how many of its runs met the goal and their range: on this shared machine one run
    says little about a goal near its line."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for role, f in files:
        runs.setdefault(role, []).append(_load(f))

    def cell(role: str, value: Callable[[dict[str, Any]], float], target: float, at_least: bool,
             text: Callable[[float], str]) -> str:
        values = [value(r) for r in runs[role]]
        met = [v >= target if at_least else v <= target for v in values]
        out = f"{text(values[0])} ({'met' if met[0] else 'not met'})"
        if len(values) > 1:
            out += f"; met in {sum(met)} of {len(values)} runs, {text(min(values))} to {text(max(values))}"
        return out

    def both(value: Callable[[dict[str, Any]], float], target: float, at_least: bool,
             text: Callable[[float], str]) -> str:
        return f"{cell('mysql', value, target, at_least, text)} | {cell('postgres', value, target, at_least, text)}"

    def backlog(role: str) -> str:
        got = [_backlog(r) for r in runs[role]]
        met = [rate >= 150_000 and rss <= 1024 for rate, rss in got]
        out = f"{_k(got[0][0])} changes/s, {got[0][1]:,} MiB ({'met' if met[0] else 'not met'})"
        if len(got) > 1:
            rates = [rate for rate, _ in got]
            out += (f"; met in {sum(met)} of {len(got)} runs, {_k(min(rates))} to {_k(max(rates))} changes/s, "
                    f"at most {max(rss for _, rss in got):,} MiB")
        return out

    def ratio(v: float) -> str:
        return f"{v:.2f}x"

    def peers_snapshot(r: dict[str, Any]) -> float:
        return float(r["summary"]["snapshot"]["ours_vs_faster_peer"])

    def per_s(v: float) -> str:
        return f"{_k(v)}/s"

    def secs(v: float) -> str:
        return f"{v:.2f} s"

    rows = [
        ("snapshot into the mirror and changelog at p=2, against Spark JDBC tuned (median of pairs)", "≥ 1.2x",
         both(lambda r: r["got"]["snapshot_vs_jdbc"], 1.2, True, ratio)),
        ("the same, against the faster of Flink CDC and Debezium tuned, from launch (median of pairs)", "≥ 1.5x",
         cell("peers", peers_snapshot, 1.5, True, ratio) + " | "
         + (cell("peers postgres", peers_snapshot, 1.5, True, ratio) if "peers postgres" in runs
            else "not measured (the peers read MariaDB)")),
        ("the same, against our single reader", "≥ 0.8x", both(_snapshot_vs_single, 0.8, True, ratio)),
        ("catch-up of 300,000 updates, end to end (median of runs)", "≥ 100k changes/s",
         both(lambda r: r["got"]["catch_up_per_s"], 100_000, True, per_s)),
        ("catch-up of a 2,000,000-update backlog; the driver's peak RSS", "≥ 150k changes/s; ≤ 1 GiB",
         f"{backlog('mysql 2M')} | {backlog('postgres 2M')}"),
        ("visibility at 1,000 changes/s: the changelog's p50", "≤ 1 s",
         both(lambda r: r["got"]["changelog_latency_p50_s"], 1.0, False, secs)),
        ("visibility at 1,000 changes/s: the mirror's p50", "≤ 2 s",
         both(lambda r: r["got"]["mirror_latency_p50_s"], 2.0, False, secs)),
    ]
    out = ["| goal | target | MariaDB | PostgreSQL |", "| --- | --- | --- | --- |"]
    out += [f"| {goal} | {target} | {cells} |" for goal, target, cells in rows]
    out += ["", "The runs (in `benchmarks/results/`), the newest of each first:", ""]
    for role, group in runs.items():
        names = [f for r, f in files if r == role]
        out.append(f"- {GOAL_RUNS[role]}: " + "; ".join(
            f"`{f}` ({r['date']}, load {r['load_average']['start']} at its start"
            + (f", Python probe {r['python_probe_s']['start']} s" if "python_probe_s" in r else "")
            + (f"; `{r['command']}`" if "command" in r else "") + ")" for f, r in zip(names, group, strict=True)))
    return out


def headline_table(files: list[tuple[str, str]]) -> list[str]:
    """README's one table: the newest run of each role of :func:`goals_table`, without dates,
    commits or loads (docs/performance/index.md has those)."""
    newest: dict[str, dict[str, Any]] = {}
    for role, f in files:
        newest.setdefault(role, _load(f))
    my, pg = newest["mysql"], newest["postgres"]

    def both(cell: Callable[[dict[str, Any]], str]) -> str:
        return f"{cell(my)} | {cell(pg)}"

    def backlog(run: dict[str, Any]) -> str:
        rate, rss = _backlog(run)
        return f"{_k(rate)} changes/s ({rss:,} MiB)"

    rows = [
        ("snapshot into the Delta mirror and changelog (p=2)",
         both(lambda r: f"{_k(r['got']['snapshot_rows_per_s'])} rows/s")),
        ("... against Spark's JDBC source into Parquet, tuned, same parallelism",
         both(lambda r: f"{r['got']['snapshot_vs_jdbc']:.2f}x")),
        ("... against the faster of Flink CDC and Debezium, tuned, timed from launch (they only count records)",
         f"{newest['peers']['summary']['snapshot']['ours_vs_faster_peer']:.2f}x | not measured"),
        ("catch-up of 300,000 updates, end to end", both(lambda r: f"{_k(r['got']['catch_up_per_s'])} changes/s")),
        ("catch-up of a 2,000,000-update backlog (the driver's peak memory)",
         f"{backlog(newest['mysql 2M'])} | {backlog(newest['postgres 2M'])}"),
        ("visibility at 1,000 changes/s, p50: changelog / mirror", both(
            lambda r: f"{r['got']['changelog_latency_p50_s']:.2f} s / {r['got']['mirror_latency_p50_s']:.2f} s")),
    ]
    out = [f"| TPC-DS `customer`, {my['rows']:,} rows, 2 cores | MariaDB | PostgreSQL |", "| --- | --- | --- |"]
    return out + [f"| {name} | {cells} |" for name, cells in rows]


def kafka_table(files: list[tuple[str, str]]) -> list[str]:
    """The Kafka sink against a raw transactional producer (``kafka_bench.py`` runs), a column per file."""
    runs = [(label, _load(f)) for label, f in files]
    names = [ln["name"] for ln in runs[0][1]["lines"]]
    out = ["| messages/s | " + " | ".join(f"`{label}` ({r['date']}, {r['rows']:,} rows)" for label, r in runs) + " |",
           "| --- |" + " --- |" * len(runs)]
    for name in names:
        cells = []
        for _, r in runs:
            line = next((ln for ln in r["lines"] if ln["name"] == name), None)
            cells.append(f"{line['rows_per_s']:,} ({line['messages']:,} in {line['seconds']:.2f} s)" if line else "")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("| ours / raw producer: snapshot commit, catch-up commit | " + " | ".join(
        f"{r['ratios']['snapshot sink commit']:.2f}x, {r['ratios']['catch-up sink commit']:.2f}x" for _, r in runs) + " |")
    return out


def delta_engines_table(files: list[tuple[str, str]]) -> list[str]:
    """A MERGE of random keys into the same mirror by each engine (``delta_engines.py`` runs):
    seconds per MERGE by keys per batch, one line per engine and file."""
    out = ["| run | engine | 1,000 keys | 10,000 keys | 100,000 keys | changelog append of 100,000 rows |",
           "| --- | --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        for engine, sizes in run["results"].items():
            merges = " | ".join(f"{sizes[n]['merge_s']:.2f} s" for n in ("1000", "10000", "100000"))
            out.append(f"| `{label}` ({run['rows']:,}-row mirror) | {engine} | {merges} | {sizes['100000']['append_s']:.2f} s |")
    return out


def mirror_merges_table(files: list[tuple[str, str]]) -> list[str]:
    """Repeated MERGEs of 1,000 random keys into one large mirror (``mirror_merges.py`` runs)."""
    out = ["| run | mirror rows | MERGEs | the first | the median of the others |", "| --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        out.append(f"| `{label}` | {run['rows']:,} | {len(run['seconds'])} of {run['keys']:,} keys "
                   f"| {run['first_s']:.2f} s | {run['median_rest_s']:.2f} s |")
    return out


def maintenance_table(files: list[tuple[str, str]]) -> list[str]:
    """The job's compaction and VACUUM on and off (``maintenance_bench.py``, which renders its own table)."""
    (_, f), = files
    return str(_load(f)["markdown"]).strip().splitlines()


def startup_table(files: list[tuple[str, str]]) -> list[str]:
    """``run --once`` with nothing to do and with two changes, of this tree and a baseline revision
    (``startup.py`` runs), a line per tree."""
    out = ["| run | tree | snapshot | nothing to do: median (runs) | two changes: median (runs) | load at start / end |",
           "| --- | --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        for tree, r in run["trees"].items():
            runs = ", ".join(f"{x:.1f}" for x in r["noop_s"])
            catch_ups = ", ".join(f"{x:.1f}" for x in r.get("catch_up_s", []))
            changes = f"{r['catch_up_median_s']:.2f} s ({catch_ups})" if catch_ups else "not run"
            out.append(f"| `{label}` ({run['rows']:,} rows) | {tree} | {r['snapshot_s']:.1f} s "
                       f"| {r['noop_median_s']:.2f} s ({runs}) | {changes} "
                       f"| {run['load_start']:.1f} / {run['load_end']:.1f} |")
    return out


def pgoutput_table(files: list[tuple[str, str]]) -> list[str]:
    """pgoutput's modes decoded by the server alone (``pgoutput_modes.py`` runs), a line per workload."""
    out = ["| run | workload | text (the job's mode) | `binary 'true'` | `streaming 'on'` (protocol 2) | load |",
           "| --- | --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        for workload, w in run["workloads"].items():
            m = w["modes"]
            text = f"{m['text']['seconds']:.2f} s, {m['text']['bytes'] / 1e6:.1f} MB"
            other = " | ".join(f"{m[mode]['vs_text']:.2f}x text, {m[mode]['bytes'] / 1e6:.1f} MB"
                               for mode in ("binary", "streaming"))
            out.append(f"| `{label}` ({run['rows']:,} updates) | {workload} | {text} | {other} | {w['load']:.1f} |")
    return out


def pg_chunk_read_table(files: list[tuple[str, str]]) -> list[str]:
    """Snapshot chunk reads, COPY csv against binary, on key and CTID ranges (``pg_chunk_read.py``
    runs), a line per way and file; ratios against csv on key ranges."""
    out = ["| run | way | rows/s | vs csv, key ranges | client CPU s | server backend CPU s | equal tables "
           "| load at start / end |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        for way, w in run["ways"].items():
            out.append(f"| `{label}` ({run['rows']:,} rows, {run['chunks']} chunks, {run['rounds']} rounds) | {way} "
                       f"| {w['rows_per_s']:,} | {w['vs_csv']:.2f}x | {w['client_cpu_s']:.2f} ({w['client_cpu_vs_csv']:.2f}x) "
                       f"| {w['server_cpu_s']:.2f} ({w['server_cpu_vs_csv']:.2f}x) | {'yes' if run['equal'] else 'no'} "
                       f"| {run['load_average']['start']} / {run['load_average']['end']} |")
    return out


def pravega_table(files: list[tuple[str, str]]) -> list[str]:
    """The Pravega sink against the raw transactional writer (``pravega_bench.py`` runs): a line
    per run, rows/s of each phase's sink commit and raw writer, and their ratio (target 0.5x)."""
    out = ["| run | snapshot: sink | raw | ratio | catch-up: sink | raw | ratio "
           "| end to end / raw (snapshot, catch-up) | load at start / end |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, f in files:
        run = _load(f)
        rate = {line["name"]: line["rows_per_s"] for line in run["lines"]}
        r = run["ratios"]
        cells = []
        for phase in ("snapshot", "catch-up"):
            cells += [f"{rate[f'{phase}: sink commit (ours)']:,}", f"{rate[f'{phase}: raw transactional writer']:,}",
                      f"{r[f'{phase} sink commit / raw']:.2f}x"]
        out.append(f"| `{label}` ({run['rows']:,} rows, {run['burst']['updates']:,} updates) | {' | '.join(cells)} "
                   f"| {r['snapshot end to end / raw']:.2f}x, {r['catch-up end to end / raw']:.2f}x "
                   f"| {run['load_average']['start']} / {run['load_average']['end']} |")
    return out


GOAL_RUNS = {"mysql": "MariaDB", "postgres": "PostgreSQL", "peers": "the peers",
             "peers postgres": "the PostgreSQL peers",
             "mysql 2M": "MariaDB's 2M-update backlog", "postgres 2M": "PostgreSQL's 2M-update backlog"}


# The runs of issues #16 and #18's goals by role, the newest of each role first: README's headline
# shows the first of each role, docs/performance/index.md's goals table all of them.
GOAL_RUNS_FILES: list[tuple[str, str]] = [("mysql", "tpcds_customer-2026-12-03-sf100-30ed98a.json"),
    ("mysql", "tpcds_customer-2026-12-03-sf100-9166311.json"),
    ("mysql", "tpcds_customer-2026-12-03-sf100-7a2e828-2.json"),
    ("mysql", "tpcds_customer-2026-12-03-sf100-7a2e828-1.json"),
    ("mysql", "tpcds_customer-2026-12-02-sf100-661663d.json"),
    ("mysql", "tpcds_customer-2026-12-02-sf100-824502c.json"),
    ("postgres", "postgres-2026-12-03-sf100-30ed98a.json"),
    ("postgres", "postgres-2026-12-03-sf100-9166311.json"),
    ("postgres", "postgres-2026-12-03-sf100-7a2e828-2.json"),
    ("postgres", "postgres-2026-12-03-sf100-7a2e828-1.json"),
    ("postgres", "postgres-2026-12-02-sf100-661663d.json"),
    ("postgres", "postgres-2026-12-02-sf100-824502c.json"),
    ("peers", "peers-2026-12-02-sf100-quick-661663d.json"),
    ("peers", "peers-2026-12-02-sf100-quick-2e03751.json"),
    ("peers postgres", "peers-postgres-2026-12-07-sf100-run3.json"),
    ("peers postgres", "peers-postgres-2026-12-07-sf100-run2.json"),
    ("peers postgres", "peers-postgres-2026-12-07-sf100.json"),
    ("mysql 2M", "tpcds_customer-2026-12-02-sf100-catchup-burst2000000-661663d.json"),
    ("mysql 2M", "tpcds_customer-2026-12-02-sf100-catchup-burst2000000-599472e.json"),
    ("mysql 2M", "tpcds_customer-2026-12-02-sf100-catchup-burst2000000-e574a7f.json"),
    ("postgres 2M", "postgres-2026-12-02-sf100-catch-up-2m-661663d.json"),
    ("postgres 2M", "postgres-2026-12-02-sf100-catch-up-2m-599472e.json"),
    ("postgres 2M", "postgres-2026-12-02-sf100-catch-up-2m-e574a7f.json")]

TABLES: dict[str, tuple[Callable[[list[tuple[str, str]]], list[str]], list[tuple[str, str]], str]] = {
    "headline": (headline_table, GOAL_RUNS_FILES, "README.md"),
    "goals": (goals_table, GOAL_RUNS_FILES, "docs/performance/index.md"),
    "mysql-current": (tpcds_table, [("newest", "tpcds_customer-2026-12-03-sf100-30ed98a.json"),
                                    ("second", "tpcds_customer-2026-12-03-sf100-9166311.json"),
                                    ("third", "tpcds_customer-2026-12-03-sf100-7a2e828-2.json")],
                      "docs/performance/index.md"),
    "postgres-current": (tpcds_table, [("newest", "postgres-2026-12-03-sf100-30ed98a.json"),
                                       ("second", "postgres-2026-12-03-sf100-9166311.json"),
                                       ("third", "postgres-2026-12-03-sf100-7a2e828-2.json")],
                         "docs/performance/index.md"),
    "peers-current": (peers_table, [("newest", "peers-2026-12-02-sf100-quick-661663d.json"),
                                    ("second", "peers-2026-12-02-sf100-quick-2e03751.json")],
                      "docs/performance/index.md"),
    "peers-postgres-current": (peers_table, [("newest", "peers-postgres-2026-12-07-sf100-run3.json"),
                                             ("second", "peers-postgres-2026-12-07-sf100-run2.json"),
                                             ("third", "peers-postgres-2026-12-07-sf100.json")],
                               "docs/performance/index.md"),
    "kafka-current": (kafka_table, [("make bench", "kafka_bench-2026-11-28-sf1.json"),
                                    ("make bench-quick", "kafka_bench-2026-12-03-sf1-quick.json")],
                      "docs/performance/index.md"),
    "delta-engines-current": (delta_engines_table, [("newest", "delta_engines-2026-11-26-2000000.json"),
                                                    ("before", "delta_engines-2026-11-25-2000000.json")],
                              "docs/performance/index.md"),
    "mirror-merges-current": (mirror_merges_table, [("after the key index", "mirror_merges-2026-11-28-12000000-64904c5.json"),
                                                    ("before it", "mirror_merges-2026-11-28-12000000-7ac1dd3.json")],
                              "docs/performance/index.md"),
    "maintenance-current": (maintenance_table, [("newest", "maintenance-2026-11-26.json")], "docs/performance/index.md"),
    "startup-current": (startup_table, [("with work too", "startup-2026-12-07-catch-up.json"),
                                        ("quiet machine", "startup-2026-12-07.json"),
                                        ("beside a CI run", "startup-2026-12-07-loaded.json")],
                        "docs/performance/index.md"),
    "pgoutput-current": (pgoutput_table, [("quiet machine", "pgoutput-modes-2026-12-07.json"),
                                          ("beside a CI run", "pgoutput-modes-2026-12-07-loaded.json")],
                         "docs/performance/index.md"),
    "pg-chunk-read-current": (pg_chunk_read_table, [("SF100", "pg_chunk_read-2026-12-07-sf100-43d608d.json")],
                              "docs/performance/index.md"),
    "pravega-current": (pravega_table, [(f"make bench {i}", f"pravega_bench-2026-12-07-sf1-run{i}.json") for i in (1, 2, 3)]
                        + [(f"quick {i}", f"pravega_bench-2026-12-07-sf1-quick-quiet-run{i}.json") for i in (1, 2, 3)]
                        + [(f"quick {i}, loaded", f"pravega_bench-2026-12-07-sf1-quick-run{i}.json") for i in (1, 2, 3)],
                        "docs/sinks/pravega.md"),
    "tpcds": (tpcds_table, [("make bench-quick", "tpcds_customer-2026-12-03-sf10-quick.json"),
                            ("make bench-quick at 3f149bf", "tpcds_customer-2026-11-28-sf10-quick.json"),
                            ("--scale 10 --quick", "tpcds_customer-2026-11-28-sf10-quick-ff3a456.json"),
                            ("make bench", "tpcds_customer-2026-11-28-sf100.json"),
                            ("--scale 100 at 2d3ce6c", "tpcds_customer-2026-11-29-sf100-2d3ce6c.json"),
                            ("--scale 100 at e24900c", "tpcds_customer-2026-11-29-sf100-e24900c.json"),
                            ("--scale 100 at 4e0d823", "tpcds_customer-2026-11-29-sf100-4e0d823.json"),
                            ("--scale 100 at c8bfe4e", "tpcds_customer-2026-11-29-sf100-c8bfe4e.json"),
                            ("--scale 100 at cf51878", "tpcds_customer-2026-11-29-sf100-cf51878.json"),
                            ("--scale 100 at b1b16c6", "tpcds_customer-2026-12-01-sf100-b1b16c6.json"),
                            ("--scale 100 at 02d225c", "tpcds_customer-2026-12-02-sf100-02d225c.json"),
                            ("--scale 100 at 8632c68", "tpcds_customer-2026-12-02-sf100-8632c68.json"),
                            ("--scale 100 at aae827b", "tpcds_customer-2026-12-02-sf100-aae827b.json"),
                            ("--scale 100 at dbe8197", "tpcds_customer-2026-12-02-sf100-dbe8197.json"),
                            ("--scale 100 at 824502c", "tpcds_customer-2026-12-02-sf100-824502c.json"),
                            ("--scale 100 at 661663d", "tpcds_customer-2026-12-02-sf100-661663d.json"),
                            ("--scale 100 at 7a2e828, 00:29", "tpcds_customer-2026-12-03-sf100-7a2e828-1.json"),
                            ("--scale 100 at 7a2e828, 00:43", "tpcds_customer-2026-12-03-sf100-7a2e828-2.json"),
                            ("--scale 100 at 9166311", "tpcds_customer-2026-12-03-sf100-9166311.json"),
                            ("--scale 100 at 30ed98a", "tpcds_customer-2026-12-03-sf100-30ed98a.json"),
                            ("--full", "tpcds_customer-2026-11-22-sf100-full.json"),
                            ("--burst 2000000", "tpcds_customer-2026-11-26-sf100-burst2000000.json")],
              "docs/performance/history.md"),
    "peers": (peers_table, [("make bench-quick", "peers-2026-12-03-sf10-quick.json"),
                            ("make bench-quick at 3f149bf", "peers-2026-11-28-sf10-quick.json"),
                            ("--quick", "peers-2026-11-28-sf100-quick.json"),
                            ("make bench", "peers-2026-11-28-sf100.json"),
                            ("--scale 100 at 2d3ce6c", "peers-2026-11-29-sf100.json"),
                            ("--scale 100 at e24900c", "peers-2026-11-29-sf100-e24900c.json"),
                            ("--scale 100 at 4e0d823", "peers-2026-11-29-sf100-4e0d823.json"),
                            ("--scale 100 at fee29e5", "peers-2026-11-29-sf100-fee29e5.json"),
                            ("--scale 100 at e545cd9", "peers-2026-11-29-sf100-e545cd9.json"),
                            ("--scale 100 at b1b16c6", "peers-2026-12-01-sf100-b1b16c6.json"),
                            ("--quick at 02d225c", "peers-2026-12-02-sf100-quick-02d225c.json"),
                            ("--scale 100 at 471911b", "peers-2026-12-02-sf100-471911b.json"),
                            ("--quick at 8632c68", "peers-2026-12-02-sf100-quick-8632c68.json"),
                            ("--quick at aae827b", "peers-2026-12-02-sf100-quick-aae827b.json"),
                            ("--quick --rounds 3 at 2e03751", "peers-2026-12-02-sf100-quick-2e03751.json"),
                            ("--quick --rounds 3 at 661663d", "peers-2026-12-02-sf100-quick-661663d.json")],
              "docs/performance/history.md"),
}


def _between_markers(pattern: re.Pattern[str], table: str, text: str) -> str:
    return pattern.sub(lambda m: f"{m.group(1)}{table}{m.group(2)}", text)


def render(document: str, text: str) -> str:
    """``text`` (the document at path ``document``, from the repository's root) with each of its
    marked tables rebuilt from its JSON.

    Raises:
        ValueError: a table's markers are missing.
    """
    for name, (build, files, where) in TABLES.items():
        if where != document:
            continue
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"{document} lacks the markers <!-- bench:{name} --> ... <!-- /bench:{name} -->")
        table = "\n".join(build(files)) + "\n"
        text = _between_markers(pattern, table, text)
    return text


def sync(wanted: dict[str, str], check: bool) -> list[str]:
    """Write each generated document (its path from the repository's root -> the text it should
    hold) whose file differs, or with ``check`` only find them; returns those that differed.
    scripts/docs_pages.py writes the docs' reference pages with it too."""
    stale = [name for name, text in wanted.items()
             if not (ROOT / name).exists() or (ROOT / name).read_text() != text]
    if not check:
        for name in stale:
            (ROOT / name).write_text(wanted[name])
    return stale


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--check", action="store_true", help="exit 1 when a document's tables differ from the JSON")
    args = p.parse_args()
    documents = sorted({where for _, _, where in TABLES.values()})
    stale = sync({d: render(d, (ROOT / d).read_text()) for d in documents}, args.check)
    if args.check and stale:
        print(f"{', '.join(stale)}: the benchmark tables differ from benchmarks/results: run "
              "python benchmarks/readme_tables.py", file=sys.stderr)
        return 1
    if not args.check:
        print(f"{len(TABLES)} tables rebuilt from benchmarks/results" + (f" ({', '.join(stale)} changed)" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
