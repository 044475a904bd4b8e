"""What the stream-store benchmarks share (benchmarks/kafka_bench.py, benchmarks/pulsar_bench.py,
benchmarks/pravega_bench.py).

A measured :class:`Line`; :class:`CommitTimer` around a sink's driver-side ``commit``; the common
command-line options; and :func:`run_bench`, the run itself: a throwaway broker and a throwaway
MariaDB with TPC-DS ``customer``, a store's phases, its ratios, and the results file
``benchmarks/results/<store>_bench-<date>-sf<scale>[<mode>][-quick].json``. Not a test.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline_bench import RunStart
from tpcds import CustomerTable, customer_rows, customer_sandbox

from cdc.app.config import parse_config
from cdc.model.config import DEFAULT_CHUNK_SIZE, JobConfig

RESULTS = Path(__file__).with_name("results")
TARGET_RATIO = 0.5


@dataclass
class Line:
    """One measurement: a row of the printed table."""

    name: str
    messages: int
    rows: int
    seconds: float
    load: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def show(self) -> Line:
        print(f"  {self.name:<46} {self.rows:>9,} rows {self.messages:>9,} msgs {self.seconds:>7.2f}s "
              f"{self.rate:>9,.0f} rows/s  load {self.load}", flush=True)
        return self


class CommitTimer:
    """Wraps ``sink_class.commit`` (driver side) to sum its wall time, cProfiled with ``profile``."""

    def __init__(self, sink_class: type, profile: bool) -> None:
        self.seconds, self.calls = 0.0, 0
        self.prof = cProfile.Profile() if profile else None
        self.sink_class = sink_class
        self._original = sink_class.commit
        timer = self

        def commit(sink: Any, batch_id: int, tables: list[Any]) -> Any:
            started = time.perf_counter()
            if timer.prof is not None:
                timer.prof.enable()
            try:
                return timer._original(sink, batch_id, tables)
            finally:
                if timer.prof is not None:
                    timer.prof.disable()
                timer.seconds += time.perf_counter() - started
                timer.calls += 1

        sink_class.commit = commit

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def restore(self) -> None:
        self.sink_class.commit = self._original


def parse_args(doc: str | None, argv: list[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], object] | None = None) -> argparse.Namespace:
    """The options every stream-store benchmark takes, and a store's own (``extra`` adds them)."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    p.add_argument("--scale", type=int, default=1, help="TPC-DS scale (1 = 100,000 customers)")
    p.add_argument("--burst", type=int, default=50_000, help="updates before the catch-up run")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--partitions", type=int, default=3, help="partitions of the topics")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--chunks-per-batch", type=int, default=8)
    p.add_argument("--no-schemas", action="store_true", help="schemas_enable: false (payload-only values)")
    p.add_argument("--profile", action="store_true", help="cProfile the sink's commits")
    p.add_argument("--quick", action="store_true", help="a 20k-update burst (``make bench-quick``)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    if args.quick:
        args.burst = min(args.burst, 20_000)
    return args


def job_config(table: CustomerTable, args: argparse.Namespace, work: Path, sink: dict[str, Any],
               server_ids: str, count_key: str = "partitions") -> JobConfig:
    """The benchmarked job: the customer table, ``args``' chunking, into ``sink`` (a store's
    connection keys) with the shared topic prefix, partitions (``count_key``: the store's word for
    them, Pravega's ``segments``), encoding and staging folder."""
    c = table.box.cdc
    return parse_config({
        "source": {"hostname": c.host, "port": c.port, "username": c.user, "password": c.password,
                   "tables": [f"{table.database}\\.{table.table}"], "chunk_size": args.chunk_size,
                   "chunks_per_batch": args.chunks_per_batch, "server_id": server_ids},
        "sink": {**sink, "topic_prefix": "bench", count_key: args.partitions, "schemas_enable": not args.no_schemas,
                 "staging_path": str(work / "staging")},
        "checkpoint": str(work / "checkpoint"), "parallelism": args.parallelism,
    }, warn_plain_password=False)


class StoreBench(Protocol):
    """A store's phases against one loaded table and one broker."""

    lines: list[Line]
    facts: dict[str, Any]

    def run(self) -> None: ...

    def close(self) -> None: ...


class Broker(Protocol):
    def stop(self) -> None: ...


def run_bench(store: str, args: argparse.Namespace, start_broker: Callable[[], Broker],
              bench: Callable[[CustomerTable, Any, argparse.Namespace, Path], StoreBench],
              ratios: Callable[[StoreBench], dict[str, float]], heading: str) -> None:
    """Load the table, start the broker, run ``bench``'s phases, print ``ratios`` under ``heading``
    (and any profiles the phases kept), write the results file."""
    print(f"TPC-DS customer, scale {args.scale} (~{customer_rows(args.scale):,} rows); load {os.getloadavg()}",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"spark-cdc-bench-{store}-"))
    start = RunStart.now()
    print(start.describe(), flush=True)
    broker = start_broker()
    try:
        with customer_sandbox(args.scale) as table:
            print(f"loaded {table.rows:,} rows; {store} broker up; work dir {work}", flush=True)
            b = bench(table, broker, args, work)
            try:
                b.run()
            finally:
                b.close()
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    got = ratios(b)
    print(f"\n{heading}:\n  " + "\n  ".join(f"{k}: {v:.2f}x" for k, v in got.items()))
    for key, title in (("encode_profile", "where encoding time goes"), ("commit_profile", "where the sink's commit time goes")):
        if key in b.facts:
            print(f"\n{title} (cProfile, tottime):\n" + b.facts[key])
    stamp = dt.date.today().isoformat()
    mode = ("-noschemas" if args.no_schemas else "") + ("-quick" if args.quick else "")
    out = RESULTS / f"{store}_bench-{stamp}-sf{args.scale}{mode}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "scale": args.scale, "rows": table.rows, "date": stamp, "args": vars(args),
        **start.conditions(), "wall_seconds": round(time.perf_counter() - start.clock),
        "ratios": got, "target_ratio": TARGET_RATIO,
        "lines": [{**asdict(ln), "rows_per_s": round(ln.rate)} for ln in b.lines], **b.facts,
    }, indent=2) + "\n")
    print(f"wrote {out} in {time.perf_counter() - start.clock:.0f}s")
