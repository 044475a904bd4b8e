"""The Pulsar sink against raw producers of the same messages into the same broker, in one run.

Run: ``.venv/bin/python benchmarks/pulsar_bench.py [--scale 1] [--burst 50000] [--quick]``
(``make bench`` runs ``--scale 1``: 100,000 customers; ``make bench-quick`` adds ``--quick``: a
20k-update burst).

Starts a throwaway mariadbd with TPC-DS ``customer`` (benchmarks/tpcds.py) and a standalone Pulsar
(:class:`cdc.app.sandbox.pulsar.PulsarSandbox`), then measures, on the same data:

* **snapshot**: the real job (``--once``, ``type: pulsar``) from nothing:
  - *sink commit*: the time inside ``PulsarSink.commit`` (the driver reads the staged files and
    sends them with their sequence ids, then the marker): messages/s;
  - *end to end*: from the run's start until a consumer (a subscription on the partitioned topic,
    started before the run, in a thread) has received every message;
* **raw producers**, writing the very messages the consumer received (keys, values, properties)
  into a fresh topic with the same partitions, with ``pulsar-client``:
  - *batched*: one partitioned producer, batching on, no sequence ids: the client's best case,
    with no exactly-once at all. The ratios are against it;
  - *deduplicated*: one producer per partition, batching off, the sink's sequence ids: what the
    sink's mechanism costs by itself, without the sink;
* **catch-up**: ``--burst`` updates (1,000 rows each), then the job again: the same lines.

Prints a table (rows/s, ratios, the load average next to each line) and writes
``benchmarks/results/pulsar_bench-<date>-sf<scale>[-quick].json``. Target (reported, never
asserted): the sink commit at least 0.5x the batched raw producer. Not a test; do not run it next
to the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pulsar
from kafka_bench import Line
from pipeline_bench import RunStart, apply_burst, load
from tpcds import CustomerTable, customer_rows, customer_sandbox

from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.app.sandbox.pulsar import PulsarSandbox, start_pulsar_sandbox
from cdc.model.config import DEFAULT_CHUNK_SIZE, JobConfig
from cdc.spark.session import local_session
from sinks.pulsar.admin import PulsarAdmin
from sinks.pulsar.config import PulsarSinkConfig
from sinks.pulsar.producers import SEQUENCE_BITS, partition_of
from sinks.pulsar.sink import PulsarSink

RESULTS = Path(__file__).with_name("results")
TARGET_RATIO = 0.5
Msg = tuple[str | None, bytes, dict[str, str]]
_QUIET = logging.getLogger("bench.pulsar.client")
_QUIET.setLevel(logging.ERROR)


class CommitTimer:
    """Wraps ``PulsarSink.commit`` (driver side) to sum its wall time."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0
        self._original = PulsarSink.commit
        timer = self

        def commit(sink: PulsarSink, batch_id: int, tables: list[Any]) -> Any:
            started = time.perf_counter()
            try:
                return timer._original(sink, batch_id, tables)
            finally:
                timer.seconds += time.perf_counter() - started
                timer.calls += 1

        PulsarSink.commit = commit  # type: ignore[method-assign]

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def restore(self) -> None:
        PulsarSink.commit = self._original  # type: ignore[method-assign]


class TopicConsumer(threading.Thread):
    """A consumer of the whole partitioned topic (a new subscription from the earliest message)
    that keeps each message it receives and notes when it has ``expected`` of them."""

    def __init__(self, service_url: str, topic: str, expected: int, skip: int) -> None:
        super().__init__(daemon=True)
        self.client = pulsar.Client(service_url, logger=_QUIET)
        self.consumer = self.client.subscribe(topic, f"bench-{uuid.uuid4().hex[:8]}",
                                              initial_position=pulsar.InitialPosition.Earliest,
                                              receiver_queue_size=5000)
        self.expected, self.skip = expected, skip
        self.messages: list[Msg] = []
        self.done_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        seen = 0
        while not self.stop.is_set() and len(self.messages) < self.expected:
            try:
                msg = self.consumer.receive(500)
            except pulsar.Timeout:
                continue
            seen += 1
            if seen > self.skip:  # messages of earlier phases
                self.messages.append((msg.partition_key() or None, msg.data(), dict(msg.properties())))
        self.done_at = time.perf_counter()

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        self.stop.set()
        self.client.close()


def raw_batched(service_url: str, topic: str, messages: list[Msg]) -> float:
    """One partitioned producer, batching on, routed by key: seconds to send and acknowledge all."""
    client = pulsar.Client(service_url, logger=_QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                          batching_max_messages=1000, block_if_queue_full=True,
                                          max_pending_messages=10_000,
                                          compression_type=pulsar.CompressionType.LZ4)
        started = time.perf_counter()
        for key, value, props in messages:
            producer.send_async(value, _ignore, partition_key=key, properties=props or None)
        producer.flush()
        return time.perf_counter() - started
    finally:
        client.close()


def raw_deduplicated(service_url: str, topic: str, partitions: int, messages: list[Msg]) -> float:
    """One producer per partition, batching off, the sink's sequence ids (batch 1): seconds."""
    client = pulsar.Client(service_url, logger=_QUIET)
    try:
        producers = [client.create_producer(f"{topic}-partition-{i}", producer_name="bench", batching_enabled=False,
                                            block_if_queue_full=True, max_pending_messages=10_000,
                                            compression_type=pulsar.CompressionType.LZ4)
                     for i in range(partitions)]
        index = [0] * partitions
        started = time.perf_counter()
        for key, value, props in messages:
            part = partition_of(key.encode() if key else None, partitions)
            producers[part].send_async(value, _ignore, partition_key=key, properties=props or None,
                                       sequence_id=(1 << SEQUENCE_BITS) | index[part])
            index[part] += 1
        for p in producers:
            p.flush()
        return time.perf_counter() - started
    finally:
        client.close()


def _ignore(_result: Any, _msg_id: Any) -> None:
    return None


class Bench:
    """Every phase against one loaded table and one broker."""

    def __init__(self, table: CustomerTable, broker: PulsarSandbox, args: argparse.Namespace, work: Path) -> None:
        self.table, self.broker, self.args, self.work = table, broker, args, work
        self.lines: list[Line] = []
        self.facts: dict[str, Any] = {}
        self.spark = local_session("spark-cdc-bench-pulsar", parallelism=args.parallelism)
        self.config = self.job_config()
        self.sink = self.config.sink[0]
        assert isinstance(self.sink, PulsarSinkConfig)
        self.admin = PulsarAdmin(self.sink)
        self.timer = CommitTimer()
        self.consumed = 0

    def job_config(self) -> JobConfig:
        c, t, a = self.table.box.cdc, self.table, self.args
        return parse_config({
            "source": {"hostname": c.host, "port": c.port, "username": c.user, "password": c.password,
                       "tables": [f"{t.database}\\.{t.table}"], "chunk_size": a.chunk_size,
                       "chunks_per_batch": a.chunks_per_batch, "server_id": "5440-5449"},
            "sink": {"type": "pulsar", "service_url": self.broker.service_url, "admin_url": self.broker.admin_url,
                     "topic_prefix": "bench", "partitions": a.partitions, "staging_path": str(self.work / "staging")},
            "checkpoint": str(self.work / "checkpoint"), "parallelism": a.parallelism,
        }, warn_plain_password=False)

    @property
    def topic(self) -> str:
        assert isinstance(self.sink, PulsarSinkConfig)
        return self.sink.full(f"bench.{self.table.database}.{self.table.table}")

    def add(self, line: Line) -> Line:
        self.lines.append(line)
        print(f"  {line.name:<42} {line.rows:>9,} rows {line.messages:>9,} msgs {line.seconds:>7.2f}s "
              f"{line.rate:>9,.0f} rows/s  load {line.load}", flush=True)
        return line

    def job_phase(self, phase: str, rows: int, expected: int) -> list[Msg]:
        """One ``--once`` run of the job: sink commit and end-to-end lines; its messages."""
        if self.admin.partitions(self.topic) is None:  # the consumer needs the partitioned topic first
            self.admin.create_partitioned(self.topic, self.args.partitions)
        consumer = TopicConsumer(self.broker.service_url, self.topic, expected, self.consumed)
        self.timer.reset()
        started_load, started = load(), time.perf_counter()
        consumer.start()
        runner = JobRunner(self.config, self.spark)
        runner.run(once=True)
        ran = time.perf_counter() - started
        consumer.finish(600)
        if consumer.done_at is None or len(consumer.messages) < expected:
            raise SystemExit(f"{phase}: the consumer saw {len(consumer.messages):,} of {expected:,} messages")
        self.consumed += expected
        batches = sum(1 for b in runner.batches if b.snapshot_rows or b.change_rows)
        detail = {"batches": batches, "commit_calls": self.timer.calls, "job_seconds": round(ran, 2)}
        self.add(Line(f"{phase}: sink commit (ours)", expected, rows, self.timer.seconds, started_load, detail))
        self.add(Line(f"{phase}: end to end (ours)", expected, rows, consumer.done_at - started, started_load))
        return consumer.messages

    def raw_phase(self, phase: str, rows: int, messages: list[Msg]) -> None:
        for kind in ("batched", "deduplicated"):
            topic = self.sink.full(f"raw-{kind}-{phase}-{uuid.uuid4().hex[:6]}")  # type: ignore[union-attr]
            self.admin.create_partitioned(topic, self.args.partitions)
            started_load = load()
            seconds = (raw_batched(self.broker.service_url, topic, messages) if kind == "batched" else
                       raw_deduplicated(self.broker.service_url, topic, self.args.partitions, messages))
            self.add(Line(f"{phase}: raw producer, {kind}", len(messages), rows, seconds, started_load))

    def run(self) -> None:
        rows = self.table.rows
        snapshot = self.job_phase("snapshot", rows, rows)
        self.facts["bytes_per_message"] = round(sum(len(v) + len(k or "") for k, v, _ in snapshot) / max(1, len(snapshot)))
        self.raw_phase("snapshot", rows, snapshot)
        changed, seconds = apply_burst(self.table.box.admin, self.table, self.args.burst)
        self.facts["burst"] = {"updates": changed, "seconds": round(seconds, 2)}
        changes = self.job_phase("catch-up", changed, changed)
        self.raw_phase("catch-up", changed, changes)

    def close(self) -> None:
        self.timer.restore()
        self.spark.stop()


def ratios(lines: list[Line]) -> dict[str, float]:
    """Ours / each raw producer, per phase (rates in rows/s)."""
    out = {}
    for phase in ("snapshot", "catch-up"):
        for kind in ("batched", "deduplicated"):
            raw = next(ln for ln in lines if ln.name == f"{phase}: raw producer, {kind}")
            for what in ("sink commit", "end to end"):
                ours = next(ln for ln in lines if ln.name == f"{phase}: {what} (ours)")
                out[f"{phase} {what} / raw {kind}"] = round(ours.rate / raw.rate, 3)
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    p.add_argument("--scale", type=int, default=1, help="TPC-DS scale (1 = 100,000 customers)")
    p.add_argument("--burst", type=int, default=50_000, help="updates before the catch-up run")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--partitions", type=int, default=3, help="partitions of the topics")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--chunks-per-batch", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="a 20k-update burst (``make bench-quick``)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    if args.quick:
        args.burst = min(args.burst, 20_000)
    return args


def main() -> None:
    args = parse_args()
    print(f"TPC-DS customer, scale {args.scale} (~{customer_rows(args.scale):,} rows); load {os.getloadavg()}",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-bench-pulsar-"))
    start = RunStart.now()
    print(start.describe(), flush=True)
    started = start.clock
    broker = start_pulsar_sandbox()
    try:
        with customer_sandbox(args.scale) as table:
            print(f"loaded {table.rows:,} rows; Pulsar at {broker.service_url}; work dir {work}", flush=True)
            bench = Bench(table, broker, args, work)
            try:
                bench.run()
            finally:
                bench.close()
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    got = ratios(bench.lines)
    print(f"\nratios (rows/s; target: sink commit >= {TARGET_RATIO}x the batched raw producer):\n  "
          + "\n  ".join(f"{k}: {v:.2f}x" for k, v in got.items()))
    stamp = dt.date.today().isoformat()
    out = RESULTS / f"pulsar_bench-{stamp}-sf{args.scale}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "scale": args.scale, "rows": table.rows, "date": stamp, "args": vars(args),
        **start.conditions(), "wall_seconds": round(time.perf_counter() - started),
        "ratios": got, "target_ratio": TARGET_RATIO,
        "lines": [{**asdict(ln), "rows_per_s": round(ln.rate)} for ln in bench.lines], **bench.facts,
    }, indent=2) + "\n")
    print(f"wrote {out} in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
