"""The Pulsar sink against raw producers of the same messages into the same broker, in one run.

Run: ``.venv/bin/python benchmarks/pulsar_bench.py [--scale 1] [--burst 50000] [--quick] [--profile]``
(``make bench`` runs ``--scale 1``: 100,000 customers; ``make bench-quick`` adds ``--quick``: a
20k-update burst).

Starts a throwaway mariadbd with TPC-DS ``customer`` (benchmarks/tpcds.py) and a standalone Pulsar
(:class:`cdc.app.sandbox.pulsar.PulsarSandbox`), then measures, on the same data:

* **snapshot**: the real job (``--once``, ``type: pulsar``) from nothing:
  - *sink commit*: the time inside ``PulsarSink.commit`` (the driver reads the staged files and
    sends them with their sequence ids, then the marker): messages/s;
  - *end to end*: from the run's start until a consumer (a subscription on the partitioned topic,
    in a process of its own, subscribed before the run) has received every message;
* **raw producers**, writing the very messages the consumer received (keys, values, properties)
  into a fresh topic with the same partitions, with ``pulsar-client``:
  - *batched*: one partitioned producer, batching on (the client's defaults: 1,000 messages or
    128 KiB), no sequence ids, no delivery callbacks: the client's best case, with no
    exactly-once at all. The ratios are against it;
  - *deduplicated*: the sink's sender alone (:class:`sinks.pulsar.sender.BatchSender`: one
    producer per partition, batches cut by the sink, its sequence ids), on messages in memory:
    what the sink's mechanism costs, without reading the staged files;
* **catch-up**: ``--burst`` updates (1,000 rows each), then the job again: the same lines.

Every client here, the sink's included, logs through the C++ client's own logger (a Python logger
would be handed every debug line). With ``--profile`` the sink's commits run under cProfile and
the top functions are printed. Prints a table (rows/s, ratios, the load average next to each
line) and writes ``benchmarks/results/pulsar_bench-<date>-sf<scale>[-noschemas][-quick].json``.
Target (reported, never asserted): the sink commit at least 0.5x the batched raw producer. Not a
test; do not run it next to the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pyarrow.ipc
from pipeline_bench import apply_burst, load, top_functions
from stream_bench import TARGET_RATIO, CommitTimer, Line, job_config, parse_args, run_bench
from tpcds import CustomerTable

from cdc.app.runner import JobRunner
from cdc.app.sandbox.pulsar import PulsarSandbox, start_pulsar_sandbox
from cdc.model.config import JobConfig
from cdc.spark.session import local_session
from sinks.pulsar.admin import PulsarAdmin
from sinks.pulsar.config import PulsarSinkConfig
from sinks.pulsar.producers import Producers, partition_topics
from sinks.pulsar.sender import BatchSender
from sinks.pulsar.sink import PulsarSink
from sinks.stream.messages import Message

Msg = tuple[str | None, bytes, dict[str, str]]


def quiet() -> pulsar.ConsoleLogger:
    """The clients' logger: errors only, filtered in C++."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def consume(service_url: str, topic: str, expected: int, skip: int, out: str, ready: Any, result: Any) -> None:
    """A consumer process of the whole partitioned topic (a new subscription from the earliest
    message): notes (``time.monotonic``, one clock for every process here) when it has
    ``expected`` messages after the first ``skip`` (earlier phases'), and writes them to ``out``
    (Arrow: key, value, properties as JSON). A process of its own, as a downstream consumer is:
    a thread of the driver's process would take the GIL once per message from the commit it
    measures."""
    client = pulsar.Client(service_url, logger=quiet())
    consumer = client.subscribe(topic, f"bench-{uuid.uuid4().hex[:8]}", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=5000)
    ready.set()
    keys: list[str | None] = []
    values: list[bytes] = []
    props: list[str] = []
    seen, deadline = 0, time.monotonic() + 900
    while len(values) < expected and time.monotonic() < deadline:
        try:
            msg = consumer.receive(500)
        except pulsar.Timeout:
            continue
        seen += 1
        if seen > skip:
            keys.append(msg.partition_key() or None)
            values.append(msg.data())
            props.append(json.dumps(dict(msg.properties())))
    done = time.monotonic() if len(values) >= expected else None
    with pa.OSFile(out, "wb") as f, pa.ipc.new_file(f, _MESSAGES) as w:
        w.write_table(pa.table([pa.array(keys, pa.string()), pa.array(values, pa.binary()),
                                pa.array(props, pa.string())], schema=_MESSAGES))
    client.close()
    result.put((done, len(values)))


_MESSAGES = pa.schema([("key", pa.string()), ("value", pa.binary()), ("properties", pa.string())])


def read_consumed(path: str) -> list[Msg]:
    with pa.memory_map(path) as source:
        table = pa.ipc.open_file(source).read_all()
    return [(k, v, json.loads(p)) for k, v, p in zip(*(table[c].to_pylist() for c in _MESSAGES.names), strict=True)]


class Consumed:
    """A :func:`consume` process around a block: subscribed when the block starts; its finish
    awaited when the block ends (``done_at``, on ``time.monotonic``'s clock).

    Raises:
        SystemExit: it did not subscribe, or did not see every message.
    """

    def __init__(self, service_url: str, topic: str, expected: int, skip: int, out: Path) -> None:
        self.out, self.expected = out, expected
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.result = ctx.Event(), ctx.Queue()
        self.process = ctx.Process(target=consume, args=(service_url, topic, expected, skip, str(out),
                                                         self.ready, self.result), daemon=True)
        self.done_at = 0.0

    def __enter__(self) -> Consumed:
        self.process.start()
        if not self.ready.wait(300):
            raise SystemExit(f"the consumer of {self.out.name} did not subscribe")
        return self

    def __exit__(self, *exc: object) -> None:
        done_at, seen = self.result.get(timeout=1200)
        self.process.join(60)
        if done_at is None:
            raise SystemExit(f"{self.out.name}: the consumer saw {seen:,} of {self.expected:,} messages")
        self.done_at = done_at


def raw_batched(service_url: str, topic: str, messages: list[Msg]) -> float:
    """One partitioned producer, batching on (the client's defaults), routed by key: seconds to
    send and acknowledge all."""
    client = pulsar.Client(service_url, logger=quiet())
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=10,
                                          block_if_queue_full=True, max_pending_messages=10_000,
                                          compression_type=pulsar.CompressionType.LZ4)
        started = time.perf_counter()
        for key, value, props in messages:  # no callback: no call into Python per message
            producer.send_async(value, None, partition_key=key, properties=props or None)
        producer.flush()
        return time.perf_counter() - started
    finally:
        client.close()


def raw_deduplicated(config: PulsarSinkConfig, topic: str, partitions: int, messages: list[Msg]) -> float:
    """The sink's sender alone (batch 1, a producer name of its own): seconds."""
    staged = [Message(key.encode() if key else None, value, "", "", tuple((k, v.encode()) for k, v in props.items()))
              for key, value, props in messages]
    producers = Producers(config, f"raw-{uuid.uuid4().hex[:8]}")
    try:
        for t in partition_topics(topic, partitions):
            producers.get(t)
        sender = BatchSender(producers, 1, {topic: partitions})
        started = time.perf_counter()
        sender.send_all(topic, staged)
        producers.flush()
        sender.check()
        return time.perf_counter() - started
    finally:
        producers.close()


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
        self.timer = CommitTimer(PulsarSink, args.profile)
        self.consumed = 0

    def job_config(self) -> JobConfig:
        return job_config(self.table, self.args, self.work, {"type": "pulsar", "service_url": self.broker.service_url,
                                                                "admin_url": self.broker.admin_url}, "5440-5449")

    @property
    def topic(self) -> str:
        assert isinstance(self.sink, PulsarSinkConfig)
        return self.sink.full(f"bench.{self.table.database}.{self.table.table}")

    def add(self, line: Line) -> Line:
        self.lines.append(line)
        return line.show()

    def job_phase(self, phase: str, rows: int, expected: int) -> list[Msg]:
        """One ``--once`` run of the job, read by a consumer: sink commit and end-to-end lines;
        its messages."""
        if self.admin.partitions(self.topic) is None:  # the consumer needs the partitioned topic first
            self.admin.create_partitioned(self.topic, self.args.partitions)
        with Consumed(self.broker.service_url, self.topic, expected, self.consumed,
                      self.work / f"consumed-{phase}.arrow") as consumer:
            self.timer.reset()
            started_load, started = load(), time.monotonic()
            runner = JobRunner(self.config, self.spark)
            runner.run(once=True)
            ran = time.monotonic() - started
        self.consumed += expected
        batches = sum(1 for b in runner.batches if b.snapshot_rows or b.change_rows)
        detail = {"batches": batches, "commit_calls": self.timer.calls, "job_seconds": round(ran, 2)}
        self.add(Line(f"{phase}: sink commit (ours)", expected, rows, self.timer.seconds, started_load, detail))
        self.add(Line(f"{phase}: end to end (ours)", expected, rows, consumer.done_at - started, started_load))
        return read_consumed(str(consumer.out))

    def raw_phase(self, phase: str, rows: int, messages: list[Msg]) -> None:
        """The raw producers, each into a fresh topic that a consumer reads meanwhile, as the job's
        topic is read while the sink commits."""
        for kind in ("batched", "deduplicated"):
            topic = self.sink.full(f"raw-{kind}-{phase}-{uuid.uuid4().hex[:6]}")  # type: ignore[union-attr]
            self.admin.create_partitioned(topic, self.args.partitions)
            with Consumed(self.broker.service_url, topic, len(messages), 0, self.work / f"raw-{kind}-{phase}.arrow"):
                started_load = load()
                seconds = (raw_batched(self.broker.service_url, topic, messages) if kind == "batched" else
                           raw_deduplicated(self.sink, topic, self.args.partitions, messages))  # type: ignore[arg-type]
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
        if self.timer.prof is not None:
            self.facts["commit_profile"] = top_functions(self.timer.prof, "tottime", 20)

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


def main() -> None:
    args = parse_args(__doc__)
    run_bench("pulsar", args, start_pulsar_sandbox, Bench, lambda b: ratios(b.lines),
              f"ratios (rows/s; target: sink commit >= {TARGET_RATIO}x the batched raw producer)")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
