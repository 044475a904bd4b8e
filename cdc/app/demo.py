"""`make demo`: TPC-DS customer in a throwaway MariaDB, captured into Delta (or a stream store) by the real job.

Steps (each prints what it did):

1. start a throwaway MariaDB (cdc/sandbox.py) and load TPC-DS ``customer`` (cdc/tpcds.py); with
   ``--source postgres`` a throwaway PostgreSQL instead (table ``tpcds.customer`` in database
   ``tpcds``, loaded with COPY; configs/demo-postgres.yaml); with ``--sink kafka`` (``pulsar``,
   ``pravega``) also a throwaway Kafka (Pulsar) broker or Pravega standalone server
   (cdc/app/sandbox/kafka.py, pulsar.py, pravega.py);
2. run the job of ``configs/demo.yaml`` (``configs/demo-kafka.yaml``, ``configs/demo-pulsar.yaml``,
   ``configs/demo-pravega.yaml``) with ``--once`` (snapshot,
   then the binlog up to now);
3. update, delete and insert a few customers;
4. run the job with ``--once`` again (a restart: it resumes from the checkpoint);
5. Delta: query the mirror and changelog by name with Spark SQL (the job registered them in its
   catalog, ``<state_dir>/catalog``) and check that the mirror equals the source; print the
   ``python -m cdc sql`` command that runs more queries on the same tables.
   Kafka: read the topics back with a plain ``read_committed`` consumer, print the message counts
   per topic and op and a few messages, and check that the newest message of each key equals the
   source (deleted keys end with a tombstone). Pulsar: the same with a plain reader. Pravega: the
   same with a reader group (an event has no key and no tombstone: a key's newest event is the
   newest of its changes, a delete ends it).

Runs on the driver. The work directory (default ``.demo``) is wiped first; the server is removed
at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cdc.app.config import parse_config
from cdc.app.runner import JobRunner, catalog_dir, job_session
from cdc.app.sandbox.jvm import LIGHT_SERVER_JVM_OPTIONS
from cdc.app.sandbox.mysql import Sandbox, sandbox
from cdc.app.tpcds import CUSTOMER_COLUMNS, generate_customer, load_customer
from cdc.model.config import JobConfig
from cdc.spark.session import environment
from sinks.delta.config import DeltaSinkConfig
from sinks.kafka.config import KafkaSinkConfig
from sinks.pravega.config import PravegaSinkConfig
from sinks.pulsar.config import PulsarSinkConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEMO_CONFIG = CONFIGS / "demo.yaml"
DEMO_CONFIGS = {"delta": DEMO_CONFIG, "kafka": CONFIGS / "demo-kafka.yaml", "pulsar": CONFIGS / "demo-pulsar.yaml",
                "pravega": CONFIGS / "demo-pravega.yaml"}
SOURCE_CONFIGS = {"mysql": DEMO_CONFIG, "postgres": CONFIGS / "demo-postgres.yaml"}
DATABASE = "tpcds"
UPDATED = (1, 2, 3, 4, 5)
DELETED = (10, 11, 12)
INSERTED = (10_000_001, 10_000_002)


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


@contextlib.contextmanager
def _stream_broker(sink: str) -> Iterator[dict[str, str]]:
    """A throwaway broker for ``--sink kafka``/``pulsar``/``pravega`` (the variables its demo file
    names), else nothing."""
    if sink == "pravega":
        from cdc.app.sandbox.pravega import start_pravega_sandbox

        _step("starting a throwaway Pravega (standalone server, temp folder, free ports, data in memory)")
        pravega = start_pravega_sandbox(jvm_options=LIGHT_SERVER_JVM_OPTIONS)
        try:
            yield {"PRAVEGA_CONTROLLER_URI": pravega.controller_uri}
        finally:
            pravega.stop()
        return
    if sink == "pulsar":
        from cdc.app.sandbox.pulsar import start_pulsar_sandbox

        _step("starting a throwaway Pulsar broker (standalone, temp folder, free ports, deduplication on)")
        pulsar = start_pulsar_sandbox(jvm_options=LIGHT_SERVER_JVM_OPTIONS)
        try:
            yield {"PULSAR_SERVICE_URL": pulsar.service_url, "PULSAR_ADMIN_URL": pulsar.admin_url}
        finally:
            pulsar.stop()
        return
    if sink != "kafka":
        yield {}
        return
    from cdc.app.sandbox.kafka import start_kafka_sandbox

    _step("starting a throwaway Kafka broker (KRaft, temp folder, free port)")
    broker = start_kafka_sandbox(jvm_options=LIGHT_SERVER_JVM_OPTIONS)
    try:
        yield {"KAFKA_BOOTSTRAP": broker.bootstrap_servers}
    finally:
        broker.stop()


@dataclass(frozen=True)
class DemoServer:
    """The demo's source server: ``admin``/``cdc`` endpoints whose ``connect(database)`` gives a
    DB-API connection (pymysql or psycopg), the variables its config file names, and its loader."""

    kind: str
    admin: Any
    cdc: Any
    env: dict[str, str]
    load: Callable[[float], int]


@contextlib.contextmanager
def demo_server(source: str) -> Iterator[DemoServer]:
    """A throwaway MariaDB (``mysql``) or PostgreSQL (``postgres``), removed on exit."""
    if source == "postgres":
        from cdc.app.sandbox.postgres import start_postgres

        _step("starting a throwaway PostgreSQL (temp datadir, free port, wal_level=logical)")
        pg = start_postgres()
        try:
            yield DemoServer("postgres", pg.admin, pg.cdc, {"PG_HOST": pg.cdc.host, "PG_PORT": str(pg.cdc.port),
                                                            "PG_PASSWORD": pg.cdc.password},
                             lambda scale: load_tpcds_postgres(pg, scale))
        finally:
            pg.stop()
        return
    _step("starting a throwaway MariaDB (temp datadir, free port)")
    with sandbox() as box:
        yield DemoServer("mysql", box.admin, box.cdc, {"MYSQL_HOST": box.cdc.host, "MYSQL_PORT": str(box.cdc.port),
                                                       "MYSQL_PASSWORD": box.cdc.password},
                         lambda scale: load_tpcds(box, scale))


@contextlib.contextmanager
def _demo_env(box: DemoServer, workdir: Path, broker: dict[str, str] | None = None) -> Iterator[None]:
    """The variables configs/demo*.yaml refer to, set for the duration of the demo."""
    with environment({**box.env, "CDC_DEMO_DIR": str(workdir), **(broker or {})}):
        yield


def load_tpcds(box: Sandbox, scale: float) -> int:
    """Generate TPC-DS customer at ``scale`` and load it into ``tpcds.customer``; the row count."""
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-demo-"))
    try:
        box.create_database(DATABASE)
        return load_customer(box, DATABASE, generate_customer(scale, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_tpcds_postgres(box: Any, scale: float) -> int:
    """Generate TPC-DS customer at ``scale`` into ``tpcds.customer`` of PostgreSQL database
    ``tpcds`` (COPY; the CDC role may read it, the sandbox's publication covers it); the row count."""
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-demo-"))
    try:
        csv_file = generate_customer(scale, work)
        box.create_database(DATABASE)
        box.create_schema(DATABASE, DATABASE)
        columns = ", ".join(f'"{name}" {sql_type}' for name, sql_type in CUSTOMER_COLUMNS)
        with contextlib.closing(box.admin.connect(DATABASE)) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {DATABASE}.customer ({columns}, PRIMARY KEY (c_customer_sk))")
            with cur.copy(f"COPY {DATABASE}.customer FROM STDIN WITH (FORMAT csv, HEADER true)") as copy, \
                    csv_file.open("rb") as f:
                while data := f.read(1 << 20):
                    copy.write(data)
            cur.execute(f"SELECT COUNT(*) FROM {DATABASE}.customer")
            (count,) = cur.fetchone() or (0,)
            return int(count)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def apply_changes(box: Any) -> None:
    """A few updates, deletes and inserts: the changes the second run must bring over."""
    deleted = ", ".join(["%s"] * len(DELETED))
    with contextlib.closing(box.admin.connect(DATABASE)) as conn, conn.cursor() as cur:
        for sk in UPDATED:
            cur.execute(f"UPDATE {DATABASE}.customer SET c_email_address = %s, c_preferred_cust_flag = 'Y' "
                        "WHERE c_customer_sk = %s", (f"changed-{sk}@example.com", sk))
        cur.execute(f"DELETE FROM {DATABASE}.customer WHERE c_customer_sk IN ({deleted})", DELETED)
        for sk in INSERTED:
            cur.execute(f"INSERT INTO {DATABASE}.customer (c_customer_sk, c_customer_id, c_first_name, "
                        "c_last_name, c_email_address) VALUES (%s, %s, 'New', 'Customer', %s)",
                        (sk, f"NEW{sk:013d}", f"new-{sk}@example.com"))


def source_count(box: Any) -> int:
    with contextlib.closing(box.cdc.connect(DATABASE)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {DATABASE}.customer")
        (count,) = cur.fetchone() or (0,)
        return int(count)


def query_lake(spark: Any) -> tuple[int, list[Any]]:
    """Spark SQL over the mirror and changelog by name; prints the queries and their results."""
    keys = ", ".join(map(str, UPDATED + DELETED + INSERTED))
    queries = [
        f"SELECT op, COUNT(*) AS events FROM {DATABASE}.customer_changelog GROUP BY op ORDER BY op",
        "SELECT c_customer_sk, c_first_name, c_email_address, c_preferred_cust_flag "
        f"FROM {DATABASE}.customer WHERE c_customer_sk IN ({keys}) ORDER BY c_customer_sk",
    ]
    rows: list[Any] = []
    for sql in queries:
        print(f"    spark-sql> {sql}")
        result = spark.sql(sql)
        print("    " + result.toPandas().to_string(index=False).replace("\n", "\n    "))
        rows = result.collect()
    count_query = f"SELECT count(*) FROM {DATABASE}.customer"
    print(f"    spark-sql> {count_query}")
    count = int(spark.sql(count_query).collect()[0][0])
    print(f"    {count}")
    return count, rows


def check_changes(rows: list[Any]) -> list[str]:
    """What the mirror got wrong about the demo's changes (empty when everything arrived)."""
    by_key = {r["c_customer_sk"]: r for r in rows}
    problems = [f"update of {sk} missing" for sk in UPDATED
                if sk not in by_key or by_key[sk]["c_email_address"].strip() != f"changed-{sk}@example.com"]
    problems += [f"delete of {sk} missing" for sk in DELETED if sk in by_key]
    problems += [f"insert of {sk} missing" for sk in INSERTED if sk not in by_key]
    return problems


def demo_config(source: str, sink: str) -> tuple[JobConfig, str]:
    """The demo's job and the files it comes from: the sink's demo file, with ``source:`` taken
    from configs/demo-postgres.yaml for ``--source postgres --sink kafka``."""
    if source == "mysql" or sink == "delta":
        path = DEMO_CONFIGS[sink] if source == "mysql" else SOURCE_CONFIGS[source]
        return parse_config(yaml.safe_load(path.read_text()), str(path)), str(path)
    raw = yaml.safe_load(DEMO_CONFIGS[sink].read_text())
    raw["source"] = yaml.safe_load(SOURCE_CONFIGS[source].read_text())["source"]
    origin = f"{DEMO_CONFIGS[sink]} (source: from {SOURCE_CONFIGS[source]})"
    return parse_config(raw, origin), origin


def run_demo(scale: float = 0.1, workdir: Path | None = None, spark: Any | None = None,
             sink: str = "delta", source: str = "mysql") -> int:
    """Run the demo end to end; returns an exit code (0 when the sink holds the source).

    Args:
        scale: TPC-DS scale factor (1 = 100,000 customers; 0.01 = 1,000).
        workdir: where the lake and checkpoint go (wiped first; default ``.demo``).
        spark: a Spark session to use (default: a local one, stopped at the end).
        sink: ``delta`` (configs/demo.yaml), ``kafka`` (configs/demo-kafka.yaml), ``pulsar``
            (configs/demo-pulsar.yaml) or ``pravega`` (configs/demo-pravega.yaml).
        source: ``mysql`` (MariaDB) or ``postgres`` (configs/demo-postgres.yaml's ``source:``).
    """
    started = time.monotonic()
    workdir = (workdir or Path(".demo")).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    with demo_server(source) as box, _stream_broker(sink) as broker, _demo_env(box, workdir, broker):
        _step(f"{box.kind} on {box.cdc.host}:{box.cdc.port}; loading TPC-DS customer at scale {scale} "
              "with tpcgen-cli")
        rows = box.load(scale)
        _step(f"{DATABASE}.customer: {rows} rows")
        config, origin = demo_config(source, sink)
        session = spark if spark is not None else job_session(config)  # as `cdc_job.py` starts it
        try:
            _run_twice(box, session, config, origin)
            if sink == "kafka":
                return _check_kafka(box, config, workdir, started)
            if sink == "pulsar":
                return _check_pulsar(box, config, workdir, started)
            if sink == "pravega":
                return _check_pravega(box, config, workdir, started)
            return _check_lake(box, spark=session, config=config, workdir=workdir, started=started)
        finally:
            if spark is None:
                session.stop()


def _run_twice(box: DemoServer, spark: Any, config: JobConfig, origin: str) -> None:
    """The job once, the source's changes, then the job again (a restart from the checkpoint)."""
    shown = origin.replace(str(CONFIGS.parent) + os.sep, "")
    _step(f"the job of {shown}, --once: the snapshot, then the change log up to now")
    print(JobRunner(config, spark).run(once=True).render(), flush=True)
    _step(f"changing the source: update {len(UPDATED)}, delete {len(DELETED)}, insert {len(INSERTED)} customers")
    apply_changes(box)
    _step("running --once again: it resumes from the checkpoint and brings the changes over")
    print(JobRunner(config, spark).run(once=True).render(), flush=True)


def _check_lake(box: DemoServer, spark: Any, config: JobConfig, workdir: Path, started: float) -> int:
    lake = next(s.path for s in config.sink if isinstance(s, DeltaSinkConfig))
    _step(f"querying the tables by name with Spark SQL (files at {lake})")
    mirror_rows, changed = query_lake(spark)
    expected = source_count(box)
    problems = check_changes(changed)
    if mirror_rows != expected:
        problems.append(f"mirror has {mirror_rows} rows, the source {expected}")
    if problems:
        _step("FAILED: " + "; ".join(problems))
        return 1
    _step(f"mirror equals the source ({expected} rows) and holds every change; done in "
          f"{time.monotonic() - started:.1f}s. Lake and checkpoint: {workdir}")
    print(f"    more queries: python -m cdc sql --catalog {catalog_dir(config)} "
          f'"SELECT count(*) FROM {DATABASE}.customer"', flush=True)
    return 0


def _check_kafka(box: DemoServer, config: JobConfig, workdir: Path, started: float) -> int:
    """Read the topics back (read_committed), print counts and a few messages, check each key."""
    from cdc.app.sandbox.kafka import read_committed
    from cdc.model.schema import TableId

    kafka = next(s for s in config.sink if isinstance(s, KafkaSinkConfig))
    topic = kafka.topic(TableId(DATABASE, "customer"))
    _step(f"reading the topics back at {kafka.bootstrap_servers} with a plain consumer "
          "(isolation.level=read_committed)")
    messages = read_committed(kafka.bootstrap_servers, topic)
    ops, latest = _tally((f"{topic} partition {m.partition()} offset {m.offset()}", m.key(), m.value())
                         for m in messages)
    markers = read_committed(kafka.bootstrap_servers, kafka.commits_topic())
    print(f"    {topic}: {len(messages)} messages ({', '.join(f'{k} {v}' for k, v in sorted(ops.items()))})")
    print(f"    {kafka.commits_topic()}: {len(markers)} batch markers (one per committed transaction)",
          flush=True)
    return _topic_verdict(box, latest, workdir, started)


def _tally(messages: Iterable[tuple[str, bytes | None, bytes | None]]) -> tuple[dict[str, int], dict[int, Any]]:
    """Messages ``(where, key, value)`` of the customer topic: each op's count (tombstones too)
    and the newest record per key; prints the changed keys' messages with ``where``. A message
    without a key (a Pravega event) is its change's key's, from its image."""
    from cdc.model.debezium.codec import decode_key, decode_value

    ops: dict[str, int] = {}
    latest: dict[int, Any] = {}
    shown = set(UPDATED[:1] + DELETED[:1] + INSERTED[:1])
    for where, key_bytes, value in messages:
        key = decode_key(key_bytes)
        record = decode_value(value)
        if key is None and record is not None:
            image = (record.before if record.op == "d" else record.after) or {}
            key = {"c_customer_sk": image["c_customer_sk"]}
        op = "tombstone" if record is None else record.op
        ops[op] = ops.get(op, 0) + 1
        sk = int((key or {})["c_customer_sk"])
        latest[sk] = record
        if sk in shown and record is not None:
            email = (record.after or record.before or {}).get("c_email_address")
            print(f"    {where}: key {key} op {record.op}"
                  + (f" c_email_address {email.strip()!r}" if email is not None else ""))
    return ops, latest


def _topic_verdict(box: DemoServer, latest: dict[int, Any], workdir: Path, started: float,
                   tombstones: bool = True) -> int:
    """The demo's end for a stream store: the newest message per key against the source."""
    if _report_problems(box, latest):
        return 1
    deletes = "deletes end in tombstones" if tombstones else "deleted keys end with their delete"
    _step(f"the newest message of every key equals the source ({source_count(box)} rows), {deletes}; "
          f"done in {time.monotonic() - started:.1f}s. Checkpoint: {workdir}")
    return 0


def _report_problems(box: DemoServer, latest: dict[int, Any]) -> bool:
    """Check the newest message per key against the demo's changes; print what is wrong."""
    live = {sk: r for sk, r in latest.items() if r is not None and r.op != "d"}
    problems = [f"update of {sk} missing" for sk in UPDATED
                if sk not in live or live[sk].after["c_email_address"].strip() != f"changed-{sk}@example.com"]
    problems += [f"delete of {sk} missing" for sk in DELETED if sk in live]
    problems += [f"insert of {sk} missing" for sk in INSERTED if sk not in live]
    expected = source_count(box)
    if len(live) != expected:
        problems.append(f"the topic's newest messages hold {len(live)} live keys, the source {expected} rows")
    if problems:
        _step("FAILED: " + "; ".join(problems))
    return bool(problems)


def _check_pulsar(box: DemoServer, config: JobConfig, workdir: Path, started: float) -> int:
    """Read the topic back with a plain reader, print counts and a few messages, check each key."""
    from cdc.app.sandbox.pulsar import read_messages
    from cdc.model.schema import TableId

    pulsar = next(s for s in config.sink if isinstance(s, PulsarSinkConfig))
    topic = pulsar.topic(TableId(DATABASE, "customer"))
    _step(f"reading {topic} back at {pulsar.service_url} with a plain reader (each partition from its start)")
    messages = read_messages(pulsar.service_url, topic, pulsar.partitions)
    ops, latest = _tally((f"partition {partition}", key, value) for partition, key, value, _ in messages)
    print(f"    {topic}: {len(messages)} messages ({', '.join(f'{k} {v}' for k, v in sorted(ops.items()))})",
          flush=True)
    return _topic_verdict(box, latest, workdir, started)


def _check_pravega(box: DemoServer, config: JobConfig, workdir: Path, started: float) -> int:
    """Read the stream back with a reader group of its own, print counts and a few events, check
    each key."""
    from cdc.app.sandbox.pravega import read_events
    from cdc.model.schema import TableId

    pravega = next(s for s in config.sink if isinstance(s, PravegaSinkConfig))
    stream = pravega.topic(TableId(DATABASE, "customer"))
    _step(f"reading {pravega.scope}/{stream} back at {pravega.controller_uri} with a reader group "
          "(each segment from its start)")
    events = read_events(pravega.controller_uri, pravega.scope, stream)
    ops, latest = _tally(("event", None, value) for value in events)
    print(f"    {pravega.scope}/{stream}: {len(events)} events "
          f"({', '.join(f'{k} {v}' for k, v in sorted(ops.items()))})", flush=True)
    return _topic_verdict(box, latest, workdir, started, tombstones=False)
