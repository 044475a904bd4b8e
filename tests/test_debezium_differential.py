"""Drop-in for Debezium, proven against the real Debezium 3.5 (issue 62).

Debezium's embedded engine (tests/debezium_capture.py: its own JVM, jars/debezium) and our job
(the Kafka sink, into the test broker) read the same tables of the same server: one table per
type family of docs/sources/types.md (NULLs, extremes, zero dates, time zones, JSON, spatial, enums and
sets; arrays and domains on PostgreSQL), a table with a composite key and one without a primary
key. Both take a snapshot; then the test writes inserts, updates, deletes, primary-key updates, a
multi-row transaction and a DDL, and both stream them. A sentinel row ends Debezium's run.

One Debezium run per database gives both JsonConverter modes (schemas on and off) from the same
records; our job runs once per mode (two Kafka sinks of one job would share one transactional
id), with Debezium's logical name and ``schema_change.behavior: evolve`` (messages after a DDL
carry the table's own schema, as Debezium's do); every other setting that shapes a message is
both sides' default. Per table the messages are paired: snapshot reads by key (our chunks are
read in parallel, so their order is not Debezium's), streamed changes by position (the log's
order, tombstones included). Keys, values, headers and the schema change topic are compared byte for byte after
normalising only what must differ (tests/debezium_diff.py says what and why).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from debezium_capture import Captured, DebeziumCapture
from debezium_diff import (
    Message,
    Normal,
    assert_self_consistent,
    explain,
    normalise,
    normalise_ddl,
)
from debezium_tables import (
    MARIADB_CHANGES,
    MARIADB_KNOWN,
    MARIADB_SNAPSHOT,
    MARIADB_TABLES,
    POSTGRES_CHANGES,
    POSTGRES_KNOWN,
    POSTGRES_SNAPSHOT,
    POSTGRES_TABLES,
    SENTINEL,
    Known,
    adjust,
)
from kafka_broker import read_topic
from pipeline import Pipeline
from pipeline_pg import PgPipeline

from cdc.app.sandbox.kafka import KafkaSandbox
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.postgres import PostgresSandbox

pytestmark = pytest.mark.slow

MODES = ("schemas", "plain")  # JsonConverter schemas.enable true / false
SERVER = "dbz"  # Debezium's topic.prefix and our source.name: the same logical server name

# --- runs --------------------------------------------------------------------------------------------


@dataclass
class Topics:
    """The messages of one side (Debezium or ours) in one JsonConverter mode, by table; the schema
    change topic's under ``None``."""

    by_table: dict[str | None, list[Message]] = field(default_factory=dict)


@dataclass
class Capture:
    """Both sides of one database: ``theirs[mode]`` and ``ours[mode]``."""

    theirs: dict[str, Topics]
    ours: dict[str, Topics]
    database: str
    database_kind: str
    known: tuple[Known, ...] = ()
    folder: Path | None = None  # where :meth:`dump` wrote the messages

    def dump(self, folder: Path) -> None:
        """Every message of both sides as JSON lines (``debezium-<mode>.jsonl``, ``ours-<mode>.jsonl``),
        for reading a difference in full."""
        self.folder = folder
        for side, by_mode in (("debezium", self.theirs), ("ours", self.ours)):
            for mode, topics in by_mode.items():
                with (folder / f"{side}-{mode}.jsonl").open("w") as out:
                    for table, messages in topics.by_table.items():
                        for m in messages:
                            out.write(json.dumps({"table": table, "key": _text(m.key), "value": _text(m.value),
                                                  "headers": [[n, _text(v)] for n, v in m.headers]},
                                                 ensure_ascii=False) + "\n")


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def _debezium_topics(records: list[Captured], prefix: str) -> dict[str, Topics]:
    out = {mode: Topics() for mode in MODES}
    for r in records:
        table = None if r.topic == SERVER else r.topic.removeprefix(f"{SERVER}.{prefix}.")
        for mode in MODES:
            out[mode].by_table.setdefault(table, []).append(Message(r.key[mode], r.value[mode], r.headers))
    return out


def _our_topics(bootstrap: str, topic_prefix: str, prefix: str, tables: list[str]) -> Topics:
    out = Topics()
    for table in [None, *tables]:
        topic = topic_prefix if table is None else f"{topic_prefix}.{prefix}.{table}"
        out.by_table[table] = [Message(r.key, r.value, r.headers) for r in read_topic(bootstrap, topic)]
    return out


def _kafka_sink(workdir: Path, bootstrap: str, topic_prefix: str, mode: str) -> dict[str, Any]:
    return {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": topic_prefix, "partitions": 1,
            "schemas_enable": mode == "schemas", "staging_path": str(workdir / "kafka-staging")}


def _capture(kind: str, debezium: DebeziumCapture, jobs: dict[str, Any], write_changes: Callable[[], None],
             db: str, bootstrap: str, work: Path, known: tuple[Known, ...]) -> Capture:
    """Both sides of one database: our jobs' snapshots (while Debezium's JVM starts and snapshots),
    the changes once Debezium streams, our jobs again; then both sides' messages (dumped to ``work``)."""
    try:
        for job in jobs.values():
            job.run()  # the snapshot
        debezium.wait_streaming()
        write_changes()
        for job in jobs.values():
            job.run()  # the changes
        theirs = _debezium_topics(debezium.records(), db)
    finally:
        debezium.stop()
    tables = sorted(t for t in theirs["schemas"].by_table if t is not None)
    ours = {mode: _our_topics(bootstrap, f"{mode}{db}", db, tables) for mode in MODES}
    capture = Capture(theirs, ours, db, kind, known)
    capture.dump(work)
    return capture


def _job_source(db: str, no_key: str) -> dict[str, Any]:
    """Our source's keys: the same logical name as Debezium's, and the schema each message carries
    after a DDL being the table's own (``evolve``), as in Debezium (docs/sinks/kafka.md)."""
    return {"name": SERVER, "chunk_key_columns": {f"{db}.{no_key}": "a"}, "schema_change": {"behavior": "evolve"}}


@pytest.fixture(scope="module")
def mariadb(spark: Any, mysql_server: Sandbox, kafka_broker: KafkaSandbox,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Capture]:
    """Debezium's MariaDB connector and our job on the same database: snapshot, then the changes
    (written in sessions of time zone +05:30, with ALLOW_INVALID_DATES)."""
    db = mysql_server.create_database(f"dz_{uuid.uuid4().hex[:8]}")
    work = tmp_path_factory.mktemp("debezium-mariadb")
    admin = mysql_server.admin
    setup = "SET sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+05:30'"

    def write_changes() -> None:
        for transaction in MARIADB_CHANGES:
            with contextlib.closing(admin.connect(db, init_command=setup)) as conn, conn.cursor() as cur:
                conn.begin()
                for statement in transaction:
                    cur.execute(statement)
                conn.commit()

    try:
        with contextlib.closing(admin.connect(db, init_command=setup)) as conn, conn.cursor() as cur:
            for statement in MARIADB_TABLES + MARIADB_SNAPSHOT:
                cur.execute(statement)
        debezium = DebeziumCapture(
            {"name": SERVER, "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
             "database.hostname": admin.host, "database.port": str(admin.port), "database.user": admin.user,
             "database.server.id": "5790", "topic.prefix": SERVER, "database.include.list": db,
             "snapshot.locking.mode": "none"},
            admin.password, work / "debezium", f"{SERVER}.{db}.{SENTINEL}")
        jobs = {mode: Pipeline(spark, mysql_server, db, work / mode,
                               source={**_job_source(db, "t_nopk"), "server_id": f"58{i}0-58{i}3"},
                               sinks=[_kafka_sink(work / mode, kafka_broker.bootstrap_servers, f"{mode}{db}", mode)])
                for i, mode in enumerate(MODES)}
        yield _capture("mariadb", debezium, jobs, write_changes, db, kafka_broker.bootstrap_servers, work,
                       MARIADB_KNOWN)
    finally:
        mysql_server.drop_database(db)


@pytest.fixture(scope="module")
def postgres(spark: Any, postgres_server: PostgresSandbox, kafka_broker: KafkaSandbox,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Capture]:
    """Debezium's PostgreSQL connector and our job on the same schema: snapshot, then the changes."""
    db = postgres_server.create_database(f"dz_{uuid.uuid4().hex[:8]}")  # its schema has the same name
    work = tmp_path_factory.mktemp("debezium-postgres")
    admin = postgres_server.admin
    try:
        jobs = {mode: PgPipeline(spark, postgres_server, db, work / mode,
                                 source={**_job_source(db, "p_nopk"), "slot_name": f"job_{mode}"},
                                 sinks=[_kafka_sink(work / mode, kafka_broker.bootstrap_servers, f"{mode}{db}", mode)])
                for mode in MODES}
        for mode, job in jobs.items():
            job.reference_slot = f"ref_{mode}_{db}"

        def write_changes() -> None:
            with contextlib.closing(jobs["schemas"].admin()) as conn:
                for transaction in POSTGRES_CHANGES:
                    with conn.transaction():
                        for statement in transaction:
                            conn.execute(statement)

        with contextlib.closing(jobs["schemas"].admin()) as conn:
            for statement in POSTGRES_TABLES + POSTGRES_SNAPSHOT:
                conn.execute(statement)
        debezium = DebeziumCapture(
            {"name": SERVER, "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
             "database.hostname": admin.host, "database.port": str(admin.port), "database.user": admin.user,
             "database.dbname": db, "topic.prefix": SERVER, "plugin.name": "pgoutput",
             "slot.name": f"dbz_{db}", "publication.name": "spark_cdc", "publication.autocreate.mode": "disabled",
             "schema.include.list": db},
            admin.password, work / "debezium", f"{SERVER}.{db}.{SENTINEL}")
        yield _capture("postgres", debezium, jobs, write_changes, db, kafka_broker.bootstrap_servers, work,
                       POSTGRES_KNOWN)
    finally:
        postgres_server.drop_database(db)


# --- the comparisons ----------------------------------------------------------------------------------


def _split(messages: list[Message], mode: str) -> tuple[list[Message], list[Message]]:
    """(snapshot reads, everything after: changes and tombstones), in topic order."""
    from debezium_diff import parse

    def is_read(m: Message) -> bool:
        if m.value is None:
            return False
        doc = parse(m.value)
        return (doc["payload"] if mode == "schemas" else doc).get("op") == "r"

    reads = [m for m in messages if is_read(m)]
    return reads, [m for m in messages if not is_read(m)]


def _by_key(messages: list[Normal]) -> dict[str, list[Normal]]:
    out: dict[str, list[Normal]] = {}
    for m in messages:
        out.setdefault(m[0] or "", []).append(m)
    return {k: sorted(v, key=repr) for k, v in out.items()}  # a table without a key: all under ""


def _assert_same(theirs: list[Normal], ours: list[Normal], what: str) -> None:
    assert len(theirs) == len(ours), (
        f"{what}: Debezium wrote {len(theirs)} messages, we wrote {len(ours)}\n"
        f"  Debezium: {[m[:2] for m in theirs][:6]}\n  ours: {[m[:2] for m in ours][:6]}")
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        assert a == b, f"{what}, message {i}: {explain(a, b)}"


def check_json_writing(capture: Capture, mode: str) -> None:
    """Every key and value of both sides is compact JSON as the comparison's writer produces it
    (Jackson's: JsonConverter's), so comparing normalised forms compares bytes."""
    for side, topics in (("Debezium", capture.theirs[mode]), ("ours", capture.ours[mode])):
        for table, messages in topics.by_table.items():
            assert_self_consistent(messages, f"{side} {table} ({mode})")


def check_tables(capture: Capture, mode: str) -> None:
    """The same tables reach Kafka."""
    theirs = {t for t, ms in capture.theirs[mode].by_table.items() if t is not None and ms}
    ours = {t for t, ms in capture.ours[mode].by_table.items() if t is not None and ms}
    assert theirs == ours


def check_snapshot(capture: Capture, mode: str) -> None:
    """Each table's snapshot reads, paired by key (ours are read in parallel chunks, in no fixed order)."""
    schemas = mode == "schemas"
    for table, messages in capture.theirs[mode].by_table.items():
        if table is None:
            continue
        theirs = _by_key([normalise(m, schemas, adjust(capture.known, table, "theirs"))
                          for m in _split(messages, mode)[0]])
        ours = _by_key([normalise(m, schemas, adjust(capture.known, table, "ours"))
                        for m in _split(capture.ours[mode].by_table[table], mode)[0]])
        assert sorted(theirs) == sorted(ours), f"{table}: the snapshot's keys differ"
        for key in theirs:
            _assert_same(theirs[key], ours[key], f"{table} snapshot read {key} ({mode})")


def check_changes(capture: Capture, mode: str) -> None:
    """Inserts, updates, deletes with their tombstones, primary-key updates (delete, tombstone,
    create, with the ``__debezium.newkey``/``oldkey`` headers), a multi-row transaction and the
    changes after a DDL, message for message in log order."""
    schemas = mode == "schemas"
    for table, messages in capture.theirs[mode].by_table.items():
        if table is None:
            continue
        theirs = [normalise(m, schemas, adjust(capture.known, table, "theirs")) for m in _split(messages, mode)[1]]
        ours = [normalise(m, schemas, adjust(capture.known, table, "ours"))
                for m in _split(capture.ours[mode].by_table[table], mode)[1]]
        _assert_same(theirs, ours, f"{table} changes ({mode})")


def _in_snapshot(m: Message, schemas: bool) -> bool:
    """A schema change event of Debezium's schema snapshot (``source.snapshot`` true)."""
    from debezium_diff import parse

    assert m.value is not None
    doc = parse(m.value)
    return bool((doc["payload"] if schemas else doc)["source"]["snapshot"] == "true")


def check_schema_changes(capture: Capture, mode: str) -> None:
    """The events of the DDL the log shows, event for event. Debezium's schema snapshot (the SET,
    DROP TABLE, DROP/CREATE DATABASE, USE and CREATE TABLE statements it publishes at start, its
    schema history replayed into the topic) has no counterpart: docs/sinks/kafka.md."""
    schemas = mode == "schemas"
    theirs = [normalise_ddl(m, schemas) for m in capture.theirs[mode].by_table.get(None, [])
              if not _in_snapshot(m, schemas)]
    ours = [normalise_ddl(m, schemas) for m in capture.ours[mode].by_table[None]]
    if capture.database_kind == "postgres":
        # Debezium's PostgreSQL connector has no schema change topic (PostgreSQL logs no DDL); we
        # publish the relation's change there (include_schema_changes: false leaves it out)
        assert not theirs and len(ours) == 1, (theirs, ours)
        return
    assert theirs, "Debezium published no schema change event for the DDL"
    _assert_same(theirs, ours, f"schema change topic ({mode})")


CHECKS = (check_json_writing, check_tables, check_snapshot, check_changes, check_schema_changes)


@pytest.mark.parametrize("database", ["mariadb", "postgres"])
def test_our_kafka_messages_are_debeziums(database: str, request: pytest.FixtureRequest) -> None:
    """Every check, in both JsonConverter modes, on one database's capture (one Debezium run and one
    job run per mode, shared by the checks). The failures of all checks are reported together, so
    one run shows every difference; the messages of both sides are in the capture's folder
    (``debezium-<mode>.jsonl``, ``ours-<mode>.jsonl``)."""
    capture: Capture = request.getfixturevalue(database)
    failures = []
    for mode in MODES:
        for check in CHECKS:
            try:
                check(capture, mode)
            except AssertionError as exc:
                failures.append(f"{check.__name__} ({mode}): {str(exc).splitlines()[0]}")
    assert not failures, (f"{len(failures)} checks differ from Debezium (both sides' messages: {capture.folder}):\n"
                          + "\n".join(failures))
