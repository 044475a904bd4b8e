"""Whole-pipeline helpers for Postgres: the job on a real PostgreSQL, random writers, and the
exactness checks of tests/pipeline.py with LSN positions.

Each pipeline's tables live in a schema named after its database (unique per test): the Spark
session, shared by the tests, names its catalog tables ``<schema>.<table>``.

The reference log comes from a second slot made when the pipeline starts (the job's own slot
moves on as batches commit), read with the same dialect code.
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from faults import FileFaults
from pipeline import MAINTENANCE_EVERY, WriterThread, _identity, _normalize
from postgres_server import pg_dialect

from binlog.postgres.positions import ChangeLsn, LsnOffset
from binlog.registry import create_dialect
from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.config import JobConfig
from cdc.model.schema import TableId, TableSchema
from cdc.spark.commit import BatchRecord
from cdc.spark.source import table_schemas
from sinks.delta.tables import read_table


@dataclass
class PgPipeline:
    """One Postgres database flowing into one lake through one checkpoint, run by the real job."""

    spark: Any
    box: PostgresSandbox
    database: str
    workdir: Path
    source: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    sinks: list[dict[str, Any]] = field(default_factory=list)  # default: one Delta lake
    started_at: LsnOffset | None = None

    def __post_init__(self) -> None:
        self.checkpoint = self.workdir / "checkpoint"
        self.lake = self.workdir / "lake"
        self.state_dir = self.workdir / "checkpoint_state"
        self.faults = FileFaults(self.workdir / "faults")
        self.async_mirror = True
        self.maintenance = {"every": MAINTENANCE_EVERY}  # as tests/pipeline.py
        self.reference_slot = f"ref_{self.database}"
        self.schema = self.database
        self.box.create_schema(self.database, self.schema)

    def raw_config(self) -> dict[str, Any]:
        c = self.box.cdc
        source = {"type": "postgres", "hostname": c.host, "port": c.port, "username": c.user,
                  "password": c.password, "database": self.database, "tables": [f"{self.schema}\\..*"],
                  "chunk_size": 100, "chunks_per_batch": 4, **self.source}
        sink = self.sinks or {"type": "delta", "path": str(self.lake), "async_mirror": self.async_mirror,
                              "register_tables": False,  # names cost a Delta JVM start (tests/pipeline.py)
                              "maintenance": self.maintenance}
        return {"source": source, "sink": sink, "checkpoint": str(self.checkpoint),
                "state_dir": str(self.state_dir), "parallelism": 2, **self.job}

    def config(self) -> JobConfig:
        return parse_config(self.raw_config(), warn_plain_password=False)

    def admin(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A superuser connection whose unqualified names are the pipeline's schema."""
        return self.box.admin.connect(self.database, options=f"-c search_path={self.schema}", **kwargs)

    def run(self) -> list[BatchRecord]:
        """One available-now run (the first also makes the reference slot)."""
        self.start_reference()
        runner = JobRunner(self.config(), self.spark, hooks=self.faults)
        runner.run(once=True)
        return runner.batches

    def start_reference(self) -> None:
        """Make the reference slot (once): the log from here on, for the checks."""
        if self.started_at is None:
            with contextlib.closing(self.admin()) as conn:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.reference_slot,))
                row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
                assert row is not None
                self.started_at = LsnOffset.parse(row[0])

    def arm(self, point: str, after: int = 0) -> None:
        self.faults.arm(point, after=after)

    def schemas(self) -> dict[TableId, TableSchema]:
        return table_schemas(create_dialect(self.config().source))

    def mirror(self, table: str) -> pa.Table:
        return read_table(str(self.lake / self.schema / table))

    def changelog(self, table: str) -> pa.Table:
        return read_table(str(self.lake / self.schema / f"{table}_changelog"))

    def source_rows(self, table: str) -> list[dict[str, Any]]:
        with contextlib.closing(self.admin(row_factory=psycopg.rows.dict_row)) as conn:
            return list(conn.execute(f'SELECT * FROM "{table}"').fetchall())

    def slot_confirmed(self) -> LsnOffset:
        with contextlib.closing(self.admin()) as conn:
            row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                               (self.config().source.slot,)).fetchone()  # type: ignore[attr-defined]
            assert row is not None
            return LsnOffset.parse(row[0])

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def assert_mirror_equals_source(p: PgPipeline, table: str, schema: TableSchema) -> None:
    key = tuple(schema.primary_key or schema.column_names)
    mirror_rows = _normalize(p.mirror(table).to_pylist(), schema)
    source_rows = _normalize(p.source_rows(table), schema)
    mirror = Counter(_identity(r, key) for r in mirror_rows)
    source = Counter(_identity(r, key) for r in source_rows)
    missing, extra = source - mirror, mirror - source
    assert not missing and not extra, f"{table}: missing {list(missing)[:5]}, extra {list(extra)[:5]}"
    if schema.primary_key:
        by_key = {_identity(r, key): r for r in source_rows}
        for r in mirror_rows:
            assert r == by_key[_identity(r, key)], (table, r, by_key[_identity(r, key)])


def reference_changes(p: PgPipeline, schema: TableSchema, end: LsnOffset) -> list[Any]:
    """Every change of the table since the pipeline started, from the reference slot."""
    assert p.started_at is not None
    dialect = pg_dialect(p.box, p.database, slot_name=p.reference_slot, tables=[f"{p.schema}\\..*"])
    with dialect.log_reader(0, [schema]) as reader:
        return [(r.position, r.op, r.before if r.op == "d" else r.after)
                for r in _split(list(reader.raw_changes(p.started_at, end)), schema)]


def _split(raws: list[Any], schema: TableSchema) -> list[Any]:
    from binlog.postgres.reader import split_key_changes

    return split_key_changes(raws, schema)


def assert_changelog_exact(p: PgPipeline, table: str, schema: TableSchema) -> None:
    """One r row per snapshotted key; each log change present iff after its chunk's HW."""
    log = [{"op": r["op"], "after": r["after"], "lsn": r["source"]["lsn"], "commit": r["source"]["commit_lsn"]}
           for r in p.changelog(table).to_pylist()]
    assert_log_exact(p, table, schema, log)


def assert_log_exact(p: PgPipeline, table: str, schema: TableSchema, log: list[dict[str, Any]]) -> None:
    """:func:`assert_changelog_exact`'s checks on changes read from any sink, each a dict of
    ``op``, ``after`` (r rows), ``lsn`` (its own; a snapshot read: its chunk's HW) and
    ``commit`` (the transaction's commit LSN). A change is identified by (commit, lsn, op)."""
    with contextlib.closing(p.admin()) as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        end = LsnOffset.parse(row[0])
    key = tuple(schema.primary_key or schema.column_names)
    reads = [r for r in log if r["op"] == "r"]
    read_keys = Counter(_identity(r["after"], key) for r in reads)
    dup = [k for k, n in read_keys.items() if n > 1]
    assert not dup, f"{table}: keys read twice by the snapshot: {dup[:5]}"
    hw = {_identity(r["after"], key): LsnOffset(r["lsn"]) for r in reads}
    last_hw = max(hw.values()) if hw else p.started_at
    events = Counter((r["commit"], r["lsn"], r["op"]) for r in log if r["op"] != "r")
    twice = [e for e, n in events.items() if n > 1]
    assert not twice, f"{table}: changes written twice: {twice[:5]}"
    reference: dict[tuple[int, int, str], tuple[ChangeLsn, dict[str, Any]]] = {}
    names = schema.column_names
    for position, op, image in reference_changes(p, schema, end):
        values = {c: (None if v is None else str(v)) for c, v in zip(names, image, strict=True)}
        ident = (position.commit, position.lsn, op)
        assert ident not in reference, f"{table}: two changes at {ident} (a multi-insert): identify by row"
        reference[ident] = (position, values)
    invented = set(events) - set(reference)
    assert not invented, f"{table}: changes that are no log change: {sorted(invented)[:5]}"
    for ident, (pos, image) in reference.items():
        k = tuple(int(image[c]) if image[c] is not None else None for c in key)  # integer keys in these tests
        if k in hw:
            expected: bool | None = not hw[k].covers(pos)
        elif last_hw is not None and not last_hw.covers(pos):
            expected = True
        else:
            expected = None
        if expected is not None:
            assert (ident in events) == expected, (
                f"{table}: change {ident} on key {k} {'missing' if expected else 'emitted but absorbed'}")


class PgRandomWriter(WriterThread):
    """Random inserts, updates, deletes, key updates and small transactions on Postgres tables
    (a deadlock rolls a whole transaction back)."""

    def __init__(self, p: PgPipeline, table: str, seed: int, key_space: int = 3000,
                 pause_s: float | None = None) -> None:
        super().__init__(p.admin(), table, seed, key_space, pause_s)

    def was_rolled_back(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.errors.DeadlockDetected)

    def _statement(self) -> str:
        r, t, k = self.rng, self.table, self.rng.randrange(0, self.key_space)
        return r.choice([
            f"INSERT INTO {t} (id, v, n) VALUES ({k}, 'w{k}', {r.randrange(1000)}) ON CONFLICT DO NOTHING",
            f"UPDATE {t} SET v = 'u{r.randrange(1000)}', n = n + 1 WHERE id = {k}",
            f"DELETE FROM {t} WHERE id = {k}",
            f"UPDATE {t} SET id = {r.randrange(0, self.key_space)} WHERE id = {k}",
            f"UPDATE {t} SET n = n - 1 WHERE id BETWEEN {k} AND {k + 5}",
        ])

    def one(self) -> None:
        try:
            if self.rng.random() < 0.2:
                with self.conn.transaction():
                    for _ in range(self.rng.randint(2, 4)):
                        self.conn.execute(self._statement())
            else:
                self.conn.execute(self._statement())
        except psycopg.errors.UniqueViolation:
            pass  # a key update onto an existing key: nothing changed
        self.statements += 1
