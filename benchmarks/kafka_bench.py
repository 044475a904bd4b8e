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
  whatever the volume; the ratios are printed with it subtracted too;
* **Debezium 3.5** on the same table into the same broker: its embedded engine with the MariaDB
  connector, each record converted as a Kafka Connect worker converts it (JsonConverter, the same
  ``schemas_enable``) and sent by a producer with the worker's defaults (acks=all, one request in
  flight, no transactions: at-least-once, where the job is exactly-once), from a fresh snapshot;
  timed from its JVM's launch to the broker's acknowledgement of the table's last record
  (``jvm/debezium``, ``DebeziumProducer``). Twice: as shipped, and tuned (``poll.interval.ms``
  10, ``max.batch.size`` 16384, ``max.queue.size`` 65536, as benchmarks/peers.py tunes it, and
  the producer's ``linger.ms`` 20 and ``batch.size`` 1 MiB). ``--no-debezium`` leaves it out.

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
import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pipeline_bench import apply_burst, load, top_functions
from stream_bench import TARGET_RATIO, CommitTimer, Line, job_config, parse_args, run_bench
from tpcds import CustomerTable

from cdc.app.runner import JobRunner
from cdc.app.sandbox.kafka import KafkaSandbox, start_kafka_sandbox
from cdc.model.config import JobConfig
from cdc.spark.session import local_session
from sinks.kafka.config import KafkaSinkConfig
from sinks.kafka.sink import KafkaSink
from sinks.stream.messages import encode_rows

Msg = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


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


DEBEZIUM_JARS = Path(os.environ.get("SPARK_CDC_JARS", Path(__file__).resolve().parent.parent / "jars")) / "debezium"
# Debezium's throughput settings (as benchmarks/peers.py tunes it), and the producer's a Kafka Connect
# worker would take (producer.*): batches as large and as lingering as our sink's producer's (linger.ms 20)
DEBEZIUM_TUNING = {"poll.interval.ms": "10", "max.batch.size": "16384", "max.queue.size": "65536",
                   "producer.linger.ms": "20", "producer.batch.size": "1048576"}


def debezium_snapshot(table: CustomerTable, bootstrap: str, work: Path, prefix: str, schemas: bool,
                      partitions: int, tuned: bool) -> dict[str, Any]:
    """Debezium's embedded engine snapshotting ``table`` into Kafka through a Kafka Connect
    worker's producer (``DebeziumProducer``); its JSON line (records, seconds from launch)."""
    if not (DEBEZIUM_JARS / "spark-cdc-debezium.jar").exists():
        raise SystemExit(f"{DEBEZIUM_JARS} lacks spark-cdc-debezium.jar: run `make setup`, or pass --no-debezium")
    admin, folder = table.box.admin, work / prefix
    folder.mkdir(parents=True)
    topic = f"{prefix}.{table.database}.{table.table}"
    create_topic(bootstrap, topic, partitions)
    create_topic(bootstrap, prefix, 1)  # its schema change topic
    props = {"name": prefix, "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
             "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
             "offset.storage.file.filename": str(folder / "offsets.dat"),
             "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
             "schema.history.internal.file.filename": str(folder / "history.dat"),
             "database.hostname": admin.host, "database.port": str(admin.port), "database.user": admin.user,
             "database.server.id": "5650", "topic.prefix": prefix, "database.include.list": table.database,
             "table.include.list": f"{table.database}.{table.table}", **(DEBEZIUM_TUNING if tuned else {})}
    (folder / "connector.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    done = subprocess.run(
        ["java", "-cp", f"{DEBEZIUM_JARS}/*", "dev.sparkcdc.debezium.DebeziumProducer",
         "--properties", str(folder / "connector.properties"), "--bootstrap", bootstrap, "--topic", topic,
         "--expect", str(table.rows), "--schemas", str(schemas).lower(), "--timeout", "1800"],
        capture_output=True, text=True, env={**os.environ, "DEBEZIUM_PASSWORD": admin.password}, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": done.stderr[-2000:]}
    if done.returncode != 0 or result.get("error"):
        raise SystemExit(f"Debezium ({'tuned' if tuned else 'as shipped'}) failed: {result.get('error')}")
    return result


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
        self.timer = CommitTimer(KafkaSink, args.profile)

    def job_config(self) -> JobConfig:
        return job_config(self.table, self.args, self.work, {"type": "kafka", "bootstrap_servers": self.broker.bootstrap_servers}, "5430-5439")

    @property
    def topic(self) -> str:
        return f"bench.{self.table.database}.{self.table.table}"

    def add(self, line: Line) -> Line:
        self.lines.append(line)
        return line.show()

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

    def debezium_phase(self, tuned: bool) -> None:
        """Debezium's snapshot of the table into the broker, at-least-once (see the module doc)."""
        how, prefix = ("tuned", "dbz-tuned") if tuned else ("as shipped", "dbz-shipped")
        started_load = load()
        got = debezium_snapshot(self.table, self.broker.bootstrap_servers, self.work, prefix,
                                not self.args.no_schemas, self.args.partitions, tuned)
        self.add(Line(f"snapshot: Debezium 3.5 + Kafka producer ({how})", got["records"], self.table.rows,
                      got["seconds"], started_load,
                      {"delivery": "at-least-once", "from": "JVM launch to the last acknowledgement",
                       "tuning": DEBEZIUM_TUNING if tuned else {}}))

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
        if not self.args.no_debezium:
            for tuned in (False, True):
                self.debezium_phase(tuned)
        print(f"  job --once with nothing to do (fixed cost)  {self.facts['fixed_cost_s']:.2f}s  "
              f"load {started_load}", flush=True)
        if self.timer.prof is not None:
            self.facts["commit_profile"] = top_functions(self.timer.prof, "tottime", 20)

    def close(self) -> None:
        self.timer.restore()
        self.spark.stop()


def ratios(lines: list[Line], fixed_s: float) -> dict[str, float]:
    """Ours / the raw producer, per phase (rates in rows/s); end to end also without the fixed
    cost of a run; the snapshot end to end against Debezium's (the faster of its two runs)."""
    out = {}
    ours = next(ln for ln in lines if ln.name == "snapshot: end to end (ours)")
    debezium = [ln for ln in lines if ln.name.startswith("snapshot: Debezium")]
    if debezium:
        fastest = max(debezium, key=lambda ln: ln.rate)
        out["snapshot end to end, ours (exactly-once) / Debezium's faster (at-least-once)"] = round(
            ours.rate / fastest.rate, 3)
    for phase in ("snapshot", "catch-up"):
        raw = next(ln for ln in lines if ln.name == f"{phase}: raw transactional producer")
        for what in ("sink commit", "end to end"):
            ours = next(ln for ln in lines if ln.name == f"{phase}: {what} (ours)")
            out[f"{phase} {what}"] = round(ours.rate / raw.rate, 3)
            if what == "end to end" and ours.seconds > fixed_s:
                out[f"{phase} end to end without the fixed cost"] = round(raw.seconds / (ours.seconds - fixed_s), 3)
    return out


def main() -> None:
    args = parse_args(__doc__, extra=lambda p: p.add_argument(
        "--no-debezium", action="store_true", help="leave Debezium's snapshot into the broker out"))
    run_bench("kafka", args, start_kafka_sandbox, Bench,
              lambda b: ratios(b.lines, b.facts.get("fixed_cost_s", 0.0)),
              f"ratios (rows/s) to the raw transactional producer (target: sink commit >= {TARGET_RATIO}x) "
              "and to Debezium")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
