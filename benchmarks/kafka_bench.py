"""The Kafka sink against a raw transactional producer of the same messages, in one run.

Run: ``.venv/bin/python benchmarks/kafka_bench.py [--scale 1] [--burst 50000] [--quick] [--profile]``
(``make bench`` runs ``--scale 1``: 100,000 customers, about 3 minutes on 2 shared cores;
``make bench-quick`` adds ``--quick``: a 20k-update burst).

Starts a throwaway mariadbd with TPC-DS ``customer`` (benchmarks/tpcds.py) and a Kafka broker
(:class:`cdc.app.sandbox.kafka.KafkaSandbox`), then measures, on the same data:

* **snapshot**: the real job (``--once``, ``type: kafka``, ``schemas_enable`` as set) from nothing:
  - *sink commit*: the time inside ``KafkaSink.commit`` (the driver reads the staged files and
    produces them in one transaction per batch): messages/s;
  - *end to end*: from the run's start until a ``read_committed`` consumer (confluent-kafka,
    started before the run, in a thread) has received every message;
* **raw producer**: a confluent-kafka transactional producer, with the sink's producer settings,
  writing the very messages the consumer received (already encoded: keys, values, headers) into
  a fresh topic with the same partitions, one transaction per batch of the same size as the
  sink's batches. It is the baseline of the ratios;
* **encoding without Spark**: the executor side's work (``encode_rows``: change rows -> key and
  value JSON) on the whole table in 8,096-row slices, on one thread of this process (cProfiled
  with ``--profile``): what each Spark task spends before the driver's commit;
* **catch-up**: ``--burst`` updates (UPDATE ... BETWEEN, 1,000 rows each), then the job again:
  sink commit and end to end, and the raw producer of the same change messages;
* **fixed cost**: the job once more with nothing to do (start-up checks, the sink's open, the
  streaming query's start and its empty batch): what every end-to-end figure above includes
  whatever the volume; the ratios are printed with it subtracted too.

With ``--profile`` the sink's commits run under cProfile and the top functions are printed (the
profile slows the commits it measures; the rates of a profiled run are not the headline).

Prints a table (rows/s, ratios to the raw producer), writes
``benchmarks/results/kafka_bench-<date>-sf<scale>[-noschemas][-quick].json``. Target (reported, never asserted): the
sink commit at least 0.5x the raw producer. Not a test; do not run it next to the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pipeline_bench import RunStart, apply_burst, load, top_functions
from tpcds import CustomerTable, customer_rows, customer_sandbox

from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.app.sandbox.kafka import KafkaSandbox, start_kafka_sandbox
from cdc.model.config import DEFAULT_CHUNK_SIZE, JobConfig
from cdc.spark.session import local_session
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.sink import KafkaSink
from sinks.stream.messages import encode_rows

RESULTS = Path(__file__).with_name("results")
TARGET_RATIO = 0.5
Msg = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


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


class CommitTimer:
    """Wraps ``KafkaSink.commit`` (driver side) to sum its wall time, optionally cProfiled."""

    def __init__(self, profile: bool) -> None:
        self.seconds, self.calls = 0.0, 0
        self.prof = cProfile.Profile() if profile else None
        self._original = KafkaSink.commit
        timer = self

        def commit(sink: KafkaSink, batch_id: int, tables: list[Any]) -> Any:
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

        KafkaSink.commit = commit  # type: ignore[method-assign]

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def restore(self) -> None:
        KafkaSink.commit = self._original  # type: ignore[method-assign]


class TopicReader(threading.Thread):
    """A read_committed consumer of one topic that keeps every message it receives and notes
    when it has ``expected`` of them (the end-to-end clock's stop)."""

    def __init__(self, bootstrap: str, topic: str, starts: dict[int, int], expected: int) -> None:
        super().__init__(name=f"reader-{topic}", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 50, "log_level": 3})
        self.consumer.assign([TopicPartition(topic, p, at) for p, at in starts.items()])
        self.expected = expected
        self.messages: list[Msg] = []
        self.done_at: float | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while len(self.messages) < self.expected and not self.stopping.is_set():
                for m in self.consumer.consume(10_000, 0.2):
                    if m.error() is None:
                        self.messages.append((m.key(), m.value(), m.headers()))
            self.done_at = time.perf_counter()
        finally:
            self.consumer.close()

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        self.stopping.set()
        self.join()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result()


def raw_producer(bootstrap: str, settings: dict[str, Any], topic: str, messages: list[Msg],
                 per_transaction: int) -> float:
    """Seconds a transactional producer takes to write ``messages`` to ``topic`` in transactions of
    ``per_transaction`` messages (the sink's producer settings; one producer, as the sink's)."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20,
                         "log_level": 3, **settings, "transactional.id": f"raw-{uuid.uuid4().hex}",
                         "enable.idempotence": True})
    producer.init_transactions(30)
    started = time.perf_counter()
    for at in range(0, len(messages), per_transaction):
        producer.begin_transaction()
        for key, value, headers in messages[at:at + per_transaction]:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(60)
        producer.commit_transaction(60)
    return time.perf_counter() - started


class Bench:
    """Every phase against one loaded table and one broker."""

    def __init__(self, table: CustomerTable, broker: KafkaSandbox, args: argparse.Namespace, work: Path) -> None:
        self.table, self.broker, self.args, self.work = table, broker, args, work
        self.lines: list[Line] = []
        self.facts: dict[str, Any] = {}
        self.spark = local_session("spark-cdc-bench-kafka", parallelism=args.parallelism)
        self.config = self.job_config()
        self.timer = CommitTimer(args.profile)

    def job_config(self) -> JobConfig:
        c, t, a = self.table.box.cdc, self.table, self.args
        return parse_config({
            "source": {"hostname": c.host, "port": c.port, "username": c.user, "password": c.password,
                       "tables": [f"{t.database}\\.{t.table}"], "chunk_size": a.chunk_size,
                       "chunks_per_batch": a.chunks_per_batch, "server_id": "5430-5439"},
            "sink": {"type": "kafka", "bootstrap_servers": self.broker.bootstrap_servers, "topic_prefix": "bench",
                     "partitions": a.partitions, "schemas_enable": not a.no_schemas,
                     "staging_path": str(self.work / "staging")},
            "checkpoint": str(self.work / "checkpoint"), "parallelism": a.parallelism,
        }, warn_plain_password=False)

    @property
    def topic(self) -> str:
        return f"bench.{self.table.database}.{self.table.table}"

    def add(self, line: Line) -> Line:
        self.lines.append(line)
        print(f"  {line.name:<40} {line.rows:>9,} rows {line.messages:>9,} msgs {line.seconds:>7.2f}s "
              f"{line.rate:>9,.0f} rows/s  load {line.load}", flush=True)
        return line

    def ends(self) -> dict[int, int]:
        """Where each partition of the topic ends now (the next phase's reader starts there)."""
        probe = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "bench-probe",
                          "log_level": 3})
        try:
            return {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                    for p in range(self.args.partitions)}
        finally:
            probe.close()

    def job_phase(self, phase: str, rows: int, expected: int, first: bool) -> list[Msg]:
        """One ``--once`` run of the job: sink commit and end-to-end lines; the new messages (read
        from where the topic ended before the run)."""
        if first:  # the sink creates the topic at open; the reader needs it first
            create_topic(self.broker.bootstrap_servers, self.topic, self.args.partitions)
        starts = ({p: OFFSET_BEGINNING for p in range(self.args.partitions)} if first else self.ends())
        reader = TopicReader(self.broker.bootstrap_servers, self.topic, starts, expected)
        self.timer.reset()
        started_load, started = load(), time.perf_counter()
        reader.start()
        runner = JobRunner(self.config, self.spark)
        runner.run(once=True)
        ran = time.perf_counter() - started
        reader.finish(600)
        if reader.done_at is None:
            raise SystemExit(f"{phase}: the consumer saw {len(reader.messages):,} of {expected:,} messages")
        batches = sum(1 for b in runner.batches if b.snapshot_rows or b.change_rows)
        detail = {"batches": batches, "commit_calls": self.timer.calls, "job_seconds": round(ran, 2)}
        self.add(Line(f"{phase}: sink commit (ours)", expected, rows, self.timer.seconds, started_load, detail))
        self.add(Line(f"{phase}: end to end (ours)", expected, rows, reader.done_at - started, started_load))
        self.facts[f"{phase}_batches"] = batches
        return reader.messages

    def raw_phase(self, phase: str, rows: int, messages: list[Msg], batches: int) -> None:
        topic = f"raw-{phase}-{uuid.uuid4().hex[:6]}"
        create_topic(self.broker.bootstrap_servers, topic, self.args.partitions)
        per = max(1, -(-len(messages) // max(1, batches)))
        started_load = load()
        seconds = raw_producer(self.broker.bootstrap_servers, self.config.sink[0].producer, topic, messages, per)
        self.add(Line(f"{phase}: raw transactional producer", len(messages), rows, seconds, started_load,
                      {"messages_per_transaction": per}))

    def encode_phase(self) -> None:
        """encode_rows on the whole table, one thread, no Spark (the executors' share of the work)."""
        from binlog.mysql.fetch import fetch_arrow
        from cdc.model.envelope import snapshot_envelope, source_block

        runner = JobRunner(self.config)
        schema = next(iter(runner.check().values()))
        rows = pa.Table.from_batches(list(fetch_arrow(runner.dialect.settings, schema)))  # type: ignore[attr-defined]
        source = source_block("mysql", "cdc", schema.table_id, int(time.time() * 1000), "true",
                              {"file": "mysql-bin.000001", "pos": 4, "row": 0, "server_id": 1})
        changes = snapshot_envelope(schema, rows, source)
        sink = self.config.sink[0]
        assert isinstance(sink, KafkaSinkConfig)
        prof = cProfile.Profile() if self.args.profile else None
        started_load, started = load(), time.perf_counter()
        if prof is not None:
            prof.enable()
        for at in range(0, changes.num_rows, 8096):
            encode_rows(sink, schema, changes.slice(at, 8096))
        if prof is not None:
            prof.disable()
            self.facts["encode_profile"] = top_functions(prof, "tottime", 15)
        self.add(Line("encode_rows, one thread, no Spark", changes.num_rows, changes.num_rows,
                      time.perf_counter() - started, started_load))

    def run(self) -> None:
        rows = self.table.rows
        snapshot = self.job_phase("snapshot", rows, rows, first=True)
        self.facts["bytes_per_message"] = round(sum(len(v or b"") + len(k or b"") for k, v, _ in snapshot)
                                                / max(1, len(snapshot)))
        self.raw_phase("snapshot", rows, snapshot, self.facts["snapshot_batches"])
        self.encode_phase()
        changed, seconds = apply_burst(self.table.box.admin, self.table, self.args.burst)
        self.facts["burst"] = {"updates": changed, "seconds": round(seconds, 2)}
        changes = self.job_phase("catch-up", changed, changed, first=False)
        self.raw_phase("catch-up", changed, changes, self.facts["catch-up_batches"])
        started_load, started = load(), time.perf_counter()
        JobRunner(self.config, self.spark).run(once=True)
        self.facts["fixed_cost_s"] = round(time.perf_counter() - started, 2)
        print(f"  job --once with nothing to do (fixed cost)  {self.facts['fixed_cost_s']:.2f}s  "
              f"load {started_load}", flush=True)
        if self.timer.prof is not None:
            self.facts["commit_profile"] = top_functions(self.timer.prof, "tottime", 20)

    def close(self) -> None:
        self.timer.restore()
        self.spark.stop()


def ratios(lines: list[Line], fixed_s: float) -> dict[str, float]:
    """Ours / the raw producer, per phase (rates in rows/s); end to end also without the fixed
    cost of a run."""
    out = {}
    for phase in ("snapshot", "catch-up"):
        raw = next(ln for ln in lines if ln.name == f"{phase}: raw transactional producer")
        for what in ("sink commit", "end to end"):
            ours = next(ln for ln in lines if ln.name == f"{phase}: {what} (ours)")
            out[f"{phase} {what}"] = round(ours.rate / raw.rate, 3)
            if what == "end to end" and ours.seconds > fixed_s:
                out[f"{phase} end to end without the fixed cost"] = round(raw.seconds / (ours.seconds - fixed_s), 3)
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
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
    args = p.parse_args()
    if args.quick:
        args.burst = min(args.burst, 20_000)
    return args


def main() -> None:
    args = parse_args()
    print(f"TPC-DS customer, scale {args.scale} (~{customer_rows(args.scale):,} rows); load {os.getloadavg()}",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-bench-kafka-"))
    start = RunStart.now()
    print(start.describe(), flush=True)
    started = start.clock
    broker = start_kafka_sandbox()
    try:
        with customer_sandbox(args.scale) as table:
            print(f"loaded {table.rows:,} rows; Kafka on {broker.bootstrap_servers}; work dir {work}", flush=True)
            bench = Bench(table, broker, args, work)
            try:
                bench.run()
            finally:
                bench.close()
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    got = ratios(bench.lines, bench.facts.get("fixed_cost_s", 0.0))
    print("\nratios to the raw transactional producer (rows/s; target: sink commit >= "
          f"{TARGET_RATIO}x):\n  " + "\n  ".join(f"{k}: {v:.2f}x" for k, v in got.items()))
    if "encode_profile" in bench.facts:
        print("\nwhere encoding time goes (cProfile, tottime):\n" + bench.facts["encode_profile"])
    if "commit_profile" in bench.facts:
        print("\nwhere the sink's commit time goes (cProfile, tottime):\n" + bench.facts["commit_profile"])
    stamp = dt.date.today().isoformat()
    mode = ("-noschemas" if args.no_schemas else "") + ("-quick" if args.quick else "")
    out = RESULTS / f"kafka_bench-{stamp}-sf{args.scale}{mode}.json"
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
