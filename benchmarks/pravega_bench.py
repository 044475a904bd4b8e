"""The Pravega sink against Pravega's raw transactional writer, same events, same Pravega, one run.

Run: ``.venv/bin/python benchmarks/pravega_bench.py [--scale 1] [--burst 50000] [--quick] [--profile]``
(``make bench`` runs ``--scale 1``: 100,000 customers; ``make bench-quick`` adds ``--quick``: a
20k-update burst).

Starts a throwaway mariadbd with TPC-DS ``customer`` (benchmarks/tpcds.py) and a standalone Pravega
(:class:`cdc.app.sandbox.pravega.PravegaSandbox`, its data on a ``--heap`` JVM heap, its segment-store
cache ``--cache-mb``), then measures,
on the same data:

* **snapshot**: the real job (``--once``, ``type: pravega``) from nothing:
  - *sink commit*: the time inside ``PravegaSink.commit`` (the driver reads the staged files and
    writes every event into one transaction per stream, records the batch in the control stream,
    commits, records that): events/s;
  - *end to end*: from the run's start until a reader (a reader group of its own from the
    stream's head, in a process of its own, started before the run) has read every event;
* **raw transactional writer**: the very events the reader got, each with its key's routing key,
  written by ``pravega_client``'s transactional writer into a fresh stream with the same segments,
  ``--raw-txn-events`` per transaction (0, the default: the whole phase in one, the raw writer's
  best case; each transaction costs ~40 ms) and nothing else: no control records, no staged
  files. A reader reads that stream meanwhile, as the job's is read. The ratios are against it;
* **catch-up**: ``--burst`` updates (1,000 rows each), then the job again: the same lines.

With ``--profile`` the sink's commits run under cProfile and the top functions are printed.
Prints a table (rows/s, ratios, the load average next to each line) and writes
``benchmarks/results/pravega_bench-<date>-sf<scale>[-noschemas][-quick].json``. Target (reported,
never asserted): the sink commit at least 0.5x the raw transactional writer. Not a test; do not run
it next to the tests. Needs the ``pravega`` client (CPython 3.10 or 3.11).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc
from pipeline_bench import apply_burst, load, top_functions
from stream_bench import TARGET_RATIO, CommitTimer, Line, job_config, parse_args, run_bench
from tpcds import CustomerTable

from cdc.app.runner import JobRunner
from cdc.app.sandbox.jvm import started
from cdc.app.sandbox.pravega import PravegaSandbox
from cdc.model.config import JobConfig
from cdc.spark.session import local_session
from sinks.pravega.client import client_module, stream_manager
from sinks.pravega.config import PravegaSinkConfig
from sinks.pravega.sink import PravegaSink

_EVENTS = pa.schema([("value", pa.binary())])


def read_events(controller_uri: str, scope: str, stream: str, expected: int, op: str, out: str,
                ready: Any, result: Any) -> None:
    """A reader process of the whole stream (a reader group of its own from the head): notes
    (``time.monotonic``, one clock for every process here) when it has ``expected`` events of
    Debezium op ``op`` (``r``: the snapshot's, ``u``: the burst's), and writes them to ``out``
    (Arrow). When the client gives up (on a loaded machine its reader-group state updates can run
    out of retries, and the Rust future panics), it starts again from the head with a new group."""
    manager = client_module().StreamManager(controller_uri, False, False)
    marker = f'"op":"{op}"'.encode()
    values: list[bytes] = []
    restarts, deadline = 0, time.monotonic() + 1200

    async def read(reader: Any) -> None:
        while len(values) < expected and time.monotonic() < deadline:
            slice_ = await reader.get_segment_slice_async()
            values.extend(v for v in (bytes(e.data()) for e in slice_) if marker in v)
            reader.release_segment(slice_)

    while len(values) < expected and time.monotonic() < deadline:
        values.clear()
        group = manager.create_reader_group(f"bench-{uuid.uuid4().hex[:8]}", scope, stream, False, None)
        reader = group.create_reader("bench")
        ready.set()
        try:
            asyncio.run(read(reader))
        except BaseException as exc:  # the client's panics (pyo3's PanicException) are BaseExceptions
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            restarts += 1
            print(f"bench reader of {stream}: {exc}; reading again from the head", flush=True)
            time.sleep(1)
    done = time.monotonic() if len(values) >= expected else None
    with pa.OSFile(out, "wb") as f, pa.ipc.new_file(f, _EVENTS) as w:
        w.write_table(pa.table([pa.array(values, pa.binary())], schema=_EVENTS))
    result.put((done, len(values), restarts))


def read_back(path: str) -> list[bytes]:
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()["value"].to_pylist()


class Read:
    """A :func:`read_events` process around a block: its reader group made when the block starts;
    its finish awaited when the block ends (``done_at``, on ``time.monotonic``'s clock).

    Raises:
        SystemExit: it did not start, or did not see every event.
    """

    def __init__(self, controller_uri: str, scope: str, stream: str, expected: int, op: str, out: Path) -> None:
        self.out, self.expected = out, expected
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.result = ctx.Event(), ctx.Queue()
        self.process = ctx.Process(target=read_events, args=(controller_uri, scope, stream, expected, op,
                                                             str(out), self.ready, self.result), daemon=True)
        self.done_at, self.restarts = 0.0, 0

    def __enter__(self) -> Read:
        self.process.start()
        if not self.ready.wait(300):
            raise SystemExit(f"the reader of {self.out.name} did not start")
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None:  # the block failed: the reader would wait for events never written
            self.process.terminate()
            return
        done_at, seen, self.restarts = self.result.get(timeout=1500)
        self.process.join(60)
        if done_at is None:
            raise SystemExit(f"{self.out.name}: the reader saw {seen:,} of {self.expected:,} events")
        self.done_at = done_at


def routing_key(value: bytes) -> str:
    """The customer's key as a routing key (as the sink's, one key's events stay in one segment)."""
    doc = orjson.loads(value)
    payload = doc.get("payload", doc)
    image = payload["after"] or payload["before"]
    return str(image["c_customer_sk"])


def raw_transactions(config: PravegaSinkConfig, stream: str, events: list[tuple[str, bytes]],
                     per_txn: int) -> float:
    """The raw transactional writer: seconds to write and commit ``events`` in transactions of
    ``per_txn`` (0: one)."""
    manager = stream_manager(config)  # held: a writer's client runtime closes with its manager
    writer = manager.create_transaction_writer(config.scope, stream, 1)
    size = per_txn or len(events)
    started = time.perf_counter()
    for first in range(0, len(events), size):
        txn = writer.begin_txn()
        for key, value in events[first:first + size]:
            txn.write_event_bytes(value, key)
        txn.commit()
    return time.perf_counter() - started


class Bench:
    """Every phase against one loaded table and one Pravega."""

    def __init__(self, table: CustomerTable, server: PravegaSandbox, args: argparse.Namespace, work: Path) -> None:
        self.table, self.server, self.args, self.work = table, server, args, work
        self.lines: list[Line] = []
        self.facts: dict[str, Any] = {"raw_txn_events": args.raw_txn_events, "heap": args.heap,
                                      "cache_mb": args.cache_mb}
        self.spark = local_session("spark-cdc-bench-pravega", parallelism=args.parallelism)
        self.config = self.job_config()
        sink = self.config.sink[0]
        assert isinstance(sink, PravegaSinkConfig)
        self.sink = sink
        self.manager = stream_manager(sink)
        self.timer = CommitTimer(PravegaSink, args.profile)

    def job_config(self) -> JobConfig:
        return job_config(self.table, self.args, self.work, {"type": "pravega", "controller_uri": self.server.controller_uri},
                          "5450-5459", count_key="segments")

    @property
    def stream(self) -> str:
        from cdc.model.schema import TableId

        return self.sink.topic(TableId(self.table.database, self.table.table))

    def add(self, line: Line) -> Line:
        self.lines.append(line)
        return line.show()

    def _create(self, stream: str) -> None:
        module = client_module()
        self.manager.create_scope(self.sink.scope)
        self.manager.create_stream_with_policy(self.sink.scope, stream,
                                               module.StreamScalingPolicy.fixed_scaling_policy(self.args.partitions),
                                               module.StreamRetentionPolicy.none(), [])

    def job_phase(self, phase: str, op: str, rows: int, expected: int) -> list[bytes]:
        """One ``--once`` run of the job, read by a reader: sink commit and end-to-end lines; its events."""
        self._create(self.stream)  # the reader's group needs the stream first (the sink's own settings)
        with Read(self.server.controller_uri, self.sink.scope, self.stream, expected, op,
                  self.work / f"read-{phase}.arrow") as reader:
            self.timer.reset()
            started_load, started = load(), time.monotonic()
            runner = JobRunner(self.config, self.spark)
            runner.run(once=True)
            ran = time.monotonic() - started
        batches = sum(1 for b in runner.batches if b.snapshot_rows or b.change_rows)
        detail = {"batches": batches, "commit_calls": self.timer.calls, "job_seconds": round(ran, 2)}
        self.add(Line(f"{phase}: sink commit (ours)", expected, rows, self.timer.seconds, started_load, detail))
        self.add(Line(f"{phase}: end to end (ours)", expected, rows, reader.done_at - started, started_load,
                      {"reader_restarts": reader.restarts}))
        return read_back(str(reader.out))

    def raw_phase(self, phase: str, op: str, rows: int, values: list[bytes]) -> None:
        """The raw transactional writer into a fresh stream that a reader reads meanwhile."""
        events = [(routing_key(v), v) for v in values]
        stream = f"raw-{phase}-{uuid.uuid4().hex[:6]}"
        self._create(stream)
        with Read(self.server.controller_uri, self.sink.scope, stream, len(events), op,
                  self.work / f"raw-{phase}.arrow"):
            started_load = load()
            seconds = raw_transactions(self.sink, stream, events, self.args.raw_txn_events)
        self.add(Line(f"{phase}: raw transactional writer", len(events), rows, seconds, started_load))

    def run(self) -> None:
        rows = self.table.rows
        snapshot = self.job_phase("snapshot", "r", rows, rows)
        self.facts["bytes_per_event"] = round(sum(len(v) for v in snapshot) / max(1, len(snapshot)))
        self.raw_phase("snapshot", "r", rows, snapshot)
        changed, seconds = apply_burst(self.table.box.admin, self.table, self.args.burst)
        self.facts["burst"] = {"updates": changed, "seconds": round(seconds, 2)}
        changes = self.job_phase("catch-up", "u", changed, changed)
        self.raw_phase("catch-up", "u", changed, changes)
        if self.timer.prof is not None:
            self.facts["commit_profile"] = top_functions(self.timer.prof, "tottime", 20)

    def close(self) -> None:
        self.timer.restore()
        self.spark.stop()


def ratios(lines: list[Line]) -> dict[str, float]:
    """Ours / the raw transactional writer, per phase (rates in rows/s)."""
    out = {}
    for phase in ("snapshot", "catch-up"):
        raw = next(ln for ln in lines if ln.name == f"{phase}: raw transactional writer")
        for what in ("sink commit", "end to end"):
            ours = next(ln for ln in lines if ln.name == f"{phase}: {what} (ours)")
            out[f"{phase} {what} / raw"] = round(ours.rate / raw.rate, 3)
    return out


def main() -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--raw-txn-events", type=int, default=0,
                       help="events per transaction of the raw writer (0: one transaction per phase)")
        p.add_argument("--heap", default="3g", help="the Pravega JVM's heap: it holds every event written")
        p.add_argument("--cache-mb", type=int, default=1024, help="the segment store's cache (MiB)")

    args = parse_args(__doc__, extra=extra)
    run_bench("pravega", args, lambda: started(PravegaSandbox(heap=args.heap, cache_mb=args.cache_mb)), Bench, lambda b: ratios(b.lines),
              f"ratios (rows/s; target: sink commit >= {TARGET_RATIO}x the raw transactional writer)")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
