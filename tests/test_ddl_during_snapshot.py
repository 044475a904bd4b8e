"""DDL while a table's snapshot is in flight (issue #17): followed, exactly once.

A table of a few thousand rows is snapshotted in chunks of 100 while random writers change it, and
DDL (ADD COLUMN, widening, RENAME COLUMN, DROP COLUMN) is run from inside the job at exactly the
moments that matter, through its hooks (cdc/model/hooks.py): while batches are planned (between
chunks: the chunks staged before it have the DDL inside their window), right after a chunk's low
watermark (before its SELECT: the read is done again under the new definition), and right after a
chunk's SELECT (inside its window (LW, HW]: its rows stop at the DDL and the changes of its keys
after it follow as changes). docs/concepts/schema-evolution.md, "DDL during a snapshot", has the rules.

The checks: each changelog row carries the schema version in force where it was read or written;
each change is in the changelog exactly once (present iff after its key's chunk); replaying the
changelog gives the mirror, and, stopped at the moment before each DDL, the table as it was then
(each row as its last write left it under ``lenient``); the mirror is the source under ``lenient``.
A driver SIGKILLed right after a DDL recovers exactly. ``exception`` stops at the DDL naming it,
``ignore`` keeps the first schema. Postgres: the same under its Relation messages.

This file is also the crash tests' driver process: ``python tests/test_ddl_during_snapshot.py
'<json>'`` runs the job with the DDL hooks until it is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from ddl_writers import mysql_ddl_statement, pg_ddl_statement
from pipeline import Pipeline, RandomWriter, _ReadOnlyHistory, assert_changelog_exact, writing
from pipeline_pg import PgPipeline, PgRandomWriter
from postgres_server import pg_dialect

from binlog.mysql.connection import Endpoint
from binlog.mysql.reader import current_offset
from binlog.postgres.positions import LsnOffset
from cdc.app.runner import JobFailed, JobRunner
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.history import SchemaHistory, SchemaVersion
from cdc.model.schema import TableId
from cdc.spark.state import StateStore

ROWS = 3000  # 30 chunks of 100


# ---------------------------------------------------------------- DDL from inside the job


class DdlHooks:
    """Hooks (cdc/model/hooks.py) that run armed DDL at a named point, each once.

    A DDL is armed as a file ``<dir>/<point>.<n>.json`` (the statements, and how many passes to
    let through first, counted in a file each pass appends a byte to), so that the Spark workers
    and the driver's streaming source process, which get this object pickled, share it. The pass
    that fires claims the file by renaming it, takes the
    table as it is at one binlog position (MariaDB's consistent snapshot: the *cut* just before the
    DDL, ``<dir>/cuts/``), then runs the statements; failures are written to ``<dir>/errors``.
    """

    def __init__(self, directory: Path, admin: Endpoint | dict[str, Any], database: str, table: str = "t") -> None:
        self.directory = str(directory)
        self.admin = admin  # MariaDB: an Endpoint; Postgres: psycopg.connect's keywords
        self.database = database
        self.table = table

    def arm(self, point: str, statements: list[str], after: int = 0) -> None:
        os.makedirs(self.directory, exist_ok=True)
        n = len([f for f in os.listdir(self.directory) if f.startswith(f"{point}.")])
        Path(self.directory, f"{point}.{n}.json").write_text(json.dumps({"after": after, "statements": statements}))

    def reached(self, point: str) -> None:
        try:
            armed = sorted(f for f in os.listdir(self.directory) if f.startswith(f"{point}.") and f.endswith(".json"))
        except FileNotFoundError:
            return
        if not armed:
            return
        path = Path(self.directory, armed[0])
        try:
            spec = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return  # another process fired it
        with open(f"{path}.passes", "ab") as f:  # one byte per pass: appends from processes add up
            f.write(b".")
        if os.path.getsize(f"{path}.passes") <= spec["after"]:
            return
        try:
            os.rename(path, f"{path}.fired")
        except FileNotFoundError:
            return  # another process fired it
        try:
            self._run(point, spec["statements"])
        except Exception as exc:  # the test says so
            with open(Path(self.directory, "errors"), "a") as f:
                f.write(f"{point} {spec['statements']}: {exc!r}\n")

    def _run(self, point: str, statements: list[str]) -> None:
        cuts = Path(self.directory, "cuts")
        cuts.mkdir(exist_ok=True)
        name = f"{time.time():.6f}-{point}.json"
        if isinstance(self.admin, Endpoint):
            with contextlib.closing(self.admin.connect(self.database)) as conn, \
                    conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {r["Variable_name"].lower(): r["Value"] for r in cur.fetchall()}
                cur.execute(f"SELECT * FROM `{self.table}`")
                rows = list(cur.fetchall())
                cur.execute("COMMIT")
                cut = {"point": point, "ddl": statements, "file": status["binlog_snapshot_file"],
                       "pos": int(status["binlog_snapshot_position"]), "rows": rows}
                for s in statements:
                    cur.execute(s)
        else:
            with contextlib.closing(psycopg.connect(**self.admin, autocommit=True)) as pg:
                for s in statements:
                    pg.execute(s)
                cut = {"point": point, "ddl": statements}
        part = Path(cuts, f"{name}.part")  # whole or absent: the test polls the folder meanwhile
        part.write_text(json.dumps(cut, default=str))
        os.replace(part, Path(cuts, name))

    def cuts(self) -> list[Cut]:
        """The cuts taken so far, in the order the DDL ran."""
        folder = Path(self.directory, "cuts")
        out = []
        for f in sorted(folder.glob("*.json")) if folder.exists() else []:
            d = json.loads(f.read_text())
            out.append(Cut(tuple(d["ddl"]), d["point"], d.get("file"), d.get("pos"), d.get("rows")))
        return out

    def errors(self) -> str:
        path = Path(self.directory, "errors")
        return path.read_text() if path.exists() else ""

    def pending(self) -> list[str]:
        """Armed DDL that has not fired yet."""
        return sorted(f for f in os.listdir(self.directory) if f.endswith(".json"))


@dataclass(frozen=True)
class Cut:
    """The table just before a DDL: the binlog position of a consistent read, and its rows."""

    ddl: tuple[str, ...]
    point: str
    file: str | None
    pos: int | None
    rows: list[dict[str, Any]] | None


class AdaptiveWriter(RandomWriter):
    """Random writes on ``t (id, <text columns>, n)`` that follow DDL made elsewhere (by the
    job's hooks): a statement that meets a changed table (a column gone, the definition changed)
    is dropped and the columns are read again; long values only once the columns hold them."""

    def __init__(self, box: Sandbox, database: str, seed: int, key_space: int) -> None:
        super().__init__(box, database, "t", seed, key_space, pause_s=0.002)
        self.text: tuple[str, ...] = ("v",)
        self.wide = {"n": False}
        self.error: str | None = None
        self.dropped = 0

    def refresh(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION")
            columns = cur.fetchall()
        self.text = tuple(c for c, t, _ in columns if t == "varchar")
        self.wide = {"n": any(c == "n" and t == "bigint" for c, t, _ in columns),
                     **{c: (n or 0) >= 80 for c, t, n in columns if t == "varchar"}}

    def _value(self, k: int, column: str) -> str:
        long = self.wide.get(column, False) and self.rng.random() < 0.3
        return f"w{k}" + ("-" * self.rng.randrange(40, 70) if long else "")

    def one(self) -> None:
        number = self.rng.randrange(1000) + (self.rng.choice([0, 5_000_000_000]) if self.wide["n"] else 0)
        statement = mysql_ddl_statement(self, self.text, number, self._value)
        try:
            with self.conn.cursor() as cur:
                cur.execute(statement)
        except pymysql.err.MySQLError as e:
            if e.args and e.args[0] in (1054, 1412, 1213, 1205, 1406, 1264):  # a DDL got in between
                self.dropped += 1
                self.refresh()
                return
            self.error = f"{statement}: {e!r}"
            raise
        self.statements += 1
        if self.statements % 25 == 0:
            self.refresh()


# ---------------------------------------------------------------- the checks


def _file_index(file: str) -> int:
    return int(file.rsplit(".", 1)[1])


def _at(row: dict[str, Any]) -> tuple[int, int, int]:
    """A changelog row's place in the binlog: a change's own position; a snapshot read's
    offset (its chunk's HW, or the DDL its rows stop at), before every change there."""
    s = row["source"]
    return (_file_index(s["file"]), s["pos"], -1 if row["op"] == "r" else s["row"])


def _version_of(versions: list[SchemaVersion], row: dict[str, Any]) -> SchemaVersion:
    """The version a changelog row must carry: a change's, in force at its position; a snapshot
    read's, in force just before its offset (a DDL that ends exactly there came after its rows)."""
    at = _at(row)[:2]
    keys = [v.key for v in versions]
    return versions[(bisect_left if row["op"] == "r" else bisect_right)(keys, at) - 1]


def lenient_view(log: list[dict[str, Any]], versions: dict[int, list[str]], source: dict[Any, dict[str, Any]],
                 columns: list[str], key: str, keys: set[Any] | None = None, at: Any = None,
                 ) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any] | None]]:
    """The changelog replayed in log order (the table it gives), and what ``lenient`` says those
    rows must be given the source ``source`` at the same moment: each row as its last write left
    it, in a column that write's version lacks null, in a column the source has the source's
    value (docs/concepts/schema-evolution.md). Only ``keys`` when given."""
    table: dict[Any, dict[str, Any]] = {}
    last: dict[Any, list[str]] = {}
    for row in sorted(log, key=at or _at):
        if row["before"] is not None:
            table.pop(row["before"][key], None)
        if row["after"] is not None:
            table[row["after"][key]] = row["after"]
            last[row["after"][key]] = versions[row["schema_version"]]
    wanted = keys if keys is not None else set(table) | set(source)
    expected: dict[Any, dict[str, Any] | None] = {}
    for k in wanted:
        if k not in source:
            expected[k] = None
        elif k not in table:
            expected[k] = {"missing": True}
        else:
            had = last[k]
            expected[k] = {c: (source[k][c] if c in source[k] else table[k][c]) if c in had else None for c in columns}
    return {k: v for k, v in table.items() if k in wanted}, expected


def _difference(got: dict[Any, Any], expected: dict[Any, Any]) -> str:
    wrong = [(k, got.get(k), expected[k]) for k in sorted(expected) if got.get(k) != expected[k]]
    return f"{len(wrong)} rows differ (replayed, expected): {wrong[:3]}"


def assert_exact_under_ddl(p: Pipeline, hooks: DdlHooks, table: str = "t") -> None:
    """The changelog exactly once, each row under the right schema version, its replay the mirror
    and the source (now and just before each DDL, under ``lenient``)."""
    schema = p.schemas()[TableId(p.database, table)]
    [key] = schema.primary_key
    assert_changelog_exact(p, table, schema)
    versions = SchemaHistory(StateStore(str(p.state_dir))).versions(TableId(p.database, table))
    names = {v.version: v.schema.column_names for v in versions}
    log = p.changelog(table).to_pylist()
    for row in log:
        version = _version_of(versions, row)
        assert row["schema_version"] == version.version, (row, version.key)
        written = {c for image in (row["before"], row["after"]) if image for c, v in image.items() if v is not None}
        assert written <= set(version.schema.column_names), (row, version.schema.column_names)
    mirror = {r[key]: r for r in p.mirror(table).to_pylist()}
    columns = p.mirror(table).schema.names
    source = {r[key]: r for r in p.source_rows(table)}
    got, expected = lenient_view(log, names, source, columns, key)
    assert got == mirror, "the changelog replayed is not the mirror"
    assert {k: v for k, v in got.items()} == {k: v for k, v in expected.items() if v is not None}, \
        f"the mirror is not the source under lenient: {_difference(got, expected)}"
    reads = {r["after"][key]: _at(r) for r in log if r["op"] == "r"}
    for cut in hooks.cuts():
        assert cut.file is not None and cut.pos is not None and cut.rows is not None
        at = (_file_index(cut.file), cut.pos)
        before = [r for r in log if _at(r)[:2] < at or (r["op"] == "r" and _at(r)[:2] <= at)]
        keys = {k for k, pos in reads.items() if pos[:2] <= at}  # keys whose chunk was emitted by then
        got, expected = lenient_view(before, names, {r[key]: r for r in cut.rows}, columns, key, keys)
        assert got == {k: v for k, v in expected.items() if v is not None}, (
            f"the changelog replayed up to {cut.ddl[0]!r} is not the table then: {_difference(got, expected)}")


# ---------------------------------------------------------------- MariaDB


@pytest.fixture
def pipeline(spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> Pipeline:
    return make_pipeline(spark, mysql_server, database, tmp_path, ROWS)


def make_pipeline(spark: Any, box: Sandbox, database: str, workdir: Path, rows: int) -> Pipeline:
    with contextlib.closing(box.admin.connect(database)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}', {i})" for i in range(rows)))
    return Pipeline(spark, box, database, workdir)


def run(p: Pipeline, hooks: DdlHooks) -> None:
    """One available-now run of the job with the DDL hooks."""
    if p.started_at is None:
        with contextlib.closing(p.box.admin.connect()) as conn:
            p.started_at = current_offset(conn)
    JobRunner(p.config(), p.spark, hooks=hooks).run(once=True)


# (point, statements, passes let through first): spread over the ~30 chunks of the snapshot
DDL_MIX = [
    ("plan", ["ALTER TABLE t ADD COLUMN note VARCHAR(20)"], 2),  # between batches: staged chunks' windows hold it
    ("low_watermark", ["ALTER TABLE t MODIFY n BIGINT", "ALTER TABLE t MODIFY v VARCHAR(80)"], 11),  # LW..SELECT
    ("stage", ["ALTER TABLE t RENAME COLUMN v TO title"], 17),  # after a SELECT, inside its window
    ("emit", ["ALTER TABLE t DROP COLUMN note"], 19),  # while chunks are merged and emitted
]


def arm_mix(hooks: DdlHooks, scale: float = 1.0, mix: list[tuple[str, list[str], int]] = DDL_MIX) -> None:
    for point, statements, after in mix:
        hooks.arm(point, statements, int(after * scale))


@pytest.mark.slow  # two runs of the job under random writers
def test_ddl_during_the_snapshot_is_followed_exactly(pipeline: Pipeline, mysql_server: Sandbox, database: str) -> None:
    p = pipeline
    hooks = DdlHooks(p.workdir / "ddl", mysql_server.admin, database)
    arm_mix(hooks)
    writer = AdaptiveWriter(mysql_server, database, seed=7, key_space=ROWS + 200)
    with writing(writer):
        run(p, hooks)  # the snapshot, with the four DDLs in it
    assert writer.error is None and writer.statements > 100, writer.error
    assert not hooks.errors() and not hooks.pending(), (hooks.errors(), hooks.pending())
    run(p, hooks)  # catch up with the writes after the first run's end
    assert [c.ddl[0].split()[3] for c in hooks.cuts()] == ["ADD", "MODIFY", "RENAME", "DROP"]
    assert p.mirror("t").schema.names == ["id", "v", "n", "note", "title"]
    assert_exact_under_ddl(p, hooks)
    log = p.changelog("t").to_pylist()
    read_under = {r["schema_version"] for r in log if r["op"] == "r"}
    assert len(read_under) >= 3, f"the snapshot's chunks were read under versions {read_under} only"


def test_exception_stops_at_a_ddl_during_the_snapshot(pipeline: Pipeline, mysql_server: Sandbox,
                                                        database: str) -> None:
    p = pipeline
    p.source = {"schema_change": {"behavior": "exception"}}
    hooks = DdlHooks(p.workdir / "ddl", mysql_server.admin, database)
    hooks.arm("stage", ["ALTER TABLE t ADD COLUMN note TEXT"], 5)
    with pytest.raises(JobFailed, match=r"ALTER of captured table .*\.t at mysql-bin\.\d+:\d+: "
                                        r"'ALTER TABLE t ADD COLUMN note TEXT'.*'exception'"):
        run(p, hooks)
    assert "note" not in p.mirror("t").schema.names


def test_ignore_keeps_the_first_schema_through_ddl_during_the_snapshot(
        pipeline: Pipeline, mysql_server: Sandbox, database: str) -> None:
    """Chunks read after an ADD and a DROP COLUMN are written in the first schema: the added
    column left out, the dropped one null, each row tagged with the version it was read under."""
    p = pipeline
    p.source = {"schema_change": {"behavior": "ignore"}}
    hooks = DdlHooks(p.workdir / "ddl", mysql_server.admin, database)
    hooks.arm("stage", ["ALTER TABLE t ADD COLUMN note TEXT DEFAULT 'x'"], 6)
    hooks.arm("low_watermark", ["ALTER TABLE t DROP COLUMN v"], 16)
    run(p, hooks)
    assert not hooks.errors() and not hooks.pending(), (hooks.errors(), hooks.pending())
    mirror = p.mirror("t")
    assert mirror.schema.names == ["id", "v", "n"]
    rows = {r["id"]: r for r in mirror.to_pylist()}
    assert sorted(rows) == list(range(ROWS))
    log = p.changelog("t").to_pylist()
    version = {r["after"]["id"]: r["schema_version"] for r in log}
    assert set(version.values()) == {0, 1, 2}
    for i, r in rows.items():
        assert r == {"id": i, "v": f"v{i}" if version[i] < 2 else None, "n": i}, (r, version[i])


# ---------------------------------------------------------------- Postgres


class PgAdaptiveWriter(PgRandomWriter):
    """:class:`AdaptiveWriter` on Postgres: random writes (some in small transactions) that
    follow the columns the job's hooks change."""

    def __init__(self, p: PgPipeline, seed: int, key_space: int) -> None:
        super().__init__(p, "t", seed, key_space)
        self.p = p
        self.text: tuple[str, ...] = ("v",)
        self.wide = False
        self.error: str | None = None

    def refresh(self) -> None:
        rows = self.conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = "
                                 "%s AND table_name = 't' ORDER BY ordinal_position", (self.p.schema,)).fetchall()
        self.text = tuple(c for c, t in rows if t == "character varying")
        self.wide = any(c == "n" and t == "bigint" for c, t in rows)

    def _statement(self) -> str:
        return pg_ddl_statement(self, self.text, self.wide, lambda k, column: f"w{k}")

    def one(self) -> None:
        try:
            super().one()
        except psycopg.errors.UniqueViolation:
            pass
        except (psycopg.errors.UndefinedColumn, psycopg.errors.NumericValueOutOfRange,
                psycopg.errors.DeadlockDetected):
            self.refresh()  # a DDL got in between
        except Exception as e:
            self.error = repr(e)
            raise
        if self.statements % 25 == 0:
            self.refresh()
        time.sleep(0.002)


def _pg_at(row: dict[str, Any]) -> tuple[int, int, int]:
    """A changelog row's place in the WAL: a change's (commit, own LSN, row); a snapshot read's
    offset (its chunk's HW, or the first change its rows stop before), before every change there."""
    s = row["source"]
    return (s["lsn"], -1, -1) if row["op"] == "r" else (s["commit_lsn"], s["lsn"], s["row"])


def pg_changes(p: PgPipeline, schema: Any, end: LsnOffset) -> list[tuple[tuple[int, int, str], Any]]:
    """Every change of the table since the pipeline started, from the reference slot, decoded
    with the job's schema history: its identity and key."""
    assert p.started_at is not None
    d = pg_dialect(p.box, p.database, slot_name=p.reference_slot, tables=[f"{p.schema}\\..*"])
    d.use_schema_history(_ReadOnlyHistory(p.state_dir), {schema.table_id: schema})
    out = []
    with d.log_reader(0, [schema]) as reader:
        for batch in reader.change_rows(p.started_at, end):
            for r in batch.rows.to_pylist():
                image = r["before"] if r["op"] == "d" else r["after"]
                out.append(((r["source"]["commit_lsn"], r["source"]["lsn"], r["op"]), image["id"]))
    return out


def assert_pg_exact_under_ddl(p: PgPipeline) -> None:
    """:func:`assert_exact_under_ddl` on Postgres (without the cuts)."""
    table = TableId(p.schema, "t")
    schema = p.schemas()[table]
    with contextlib.closing(p.admin()) as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
    reference = pg_changes(p, schema, LsnOffset.parse(row[0]))
    log = p.changelog("t").to_pylist()
    reads = Counter(r["after"]["id"] for r in log if r["op"] == "r")
    assert not [k for k, n in reads.items() if n > 1], "keys read twice"
    label = {r["after"]["id"]: r["source"]["lsn"] for r in log if r["op"] == "r"}
    events = Counter((r["source"]["commit_lsn"], r["source"]["lsn"], r["op"]) for r in log if r["op"] != "r")
    assert not [e for e, n in events.items() if n > 1], "changes written twice"
    assert set(events) <= {ident for ident, _ in reference}, "changes that are no log change"
    last = max(label.values())
    for ident, k in reference:
        expected = ident[0] >= label[k] if k in label else (True if ident[0] >= last else None)
        if expected is not None:
            assert (ident in events) == expected, f"change {ident} of key {k} {'missing' if expected else 'absorbed'}"
    versions = SchemaHistory(StateStore(str(p.state_dir))).versions(table)
    keys = [v.key for v in versions]
    for r in log:
        at = _pg_at(r)
        if r["op"] == "r":  # the version just before its offset, or one recorded at it (PostgreSQL shows
            # a DDL with the table's next change: a chunk read under a definition no change has shown)
            allowed = {versions[bisect_left(keys, (at[0], -1)) - 1].version} | \
                {v.version for v in versions if tuple(v.key) == (at[0], 0)}
        else:
            allowed = {versions[bisect_right(keys, (at[0], at[1])) - 1].version}
        assert r["schema_version"] in allowed, (r, allowed)
        version = versions[r["schema_version"]]
        written = {c for image in (r["before"], r["after"]) if image for c, v in image.items() if v is not None}
        assert written <= set(version.schema.column_names), (r, version.schema.column_names)
    names = {v.version: v.schema.column_names for v in versions}
    mirror = {r["id"]: r for r in p.mirror("t").to_pylist()}
    source = {r["id"]: r for r in p.source_rows("t")}
    got, expected = lenient_view(log, names, source, p.mirror("t").schema.names, "id", at=_pg_at)
    assert got == mirror, "the changelog replayed is not the mirror"
    assert got == {k: v for k, v in expected.items() if v is not None}, \
        f"the mirror is not the source under lenient: {_difference(got, expected)}"


PG_DDL_MIX = [  # over the ~13 chunks of the snapshot
    ("plan", ["ALTER TABLE t ADD COLUMN note varchar(20)"], 1),
    ("low_watermark", ["ALTER TABLE t ALTER COLUMN n TYPE bigint"], 4),
    ("stage", ["ALTER TABLE t RENAME COLUMN v TO title"], 7),
    ("emit", ["ALTER TABLE t DROP COLUMN note"], 8),
]


@pytest.mark.slow  # two runs of the job under random writers
def test_postgres_ddl_during_the_snapshot_is_followed_exactly(
        spark: Any, postgres_server: PostgresSandbox, pg_database: str, tmp_path: Path) -> None:
    p = PgPipeline(spark, postgres_server, pg_database, tmp_path)
    rows = ROWS * 2 // 3
    with contextlib.closing(p.admin()) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v varchar(40), n int)")
        conn.execute(f"INSERT INTO t SELECT i, 'v' || i, i FROM generate_series(0, {rows - 1}) AS i")
    a = postgres_server.admin
    hooks = DdlHooks(p.workdir / "ddl", {"host": a.host, "port": a.port, "user": a.user, "password": a.password,
                                          "dbname": pg_database, "options": f"-c search_path={p.schema}"}, pg_database)
    arm_mix(hooks, mix=PG_DDL_MIX)
    p.start_reference()
    writer = PgAdaptiveWriter(p, seed=5, key_space=rows + 100)
    with writing(writer):  # type: ignore[arg-type]
        JobRunner(p.config(), spark, hooks=hooks).run(once=True)
    assert writer.error is None and writer.statements > 100, writer.error
    assert not hooks.errors() and not hooks.pending(), (hooks.errors(), hooks.pending())
    JobRunner(p.config(), spark, hooks=hooks).run(once=True)
    assert p.mirror("t").schema.names == ["id", "v", "n", "note", "title"]
    assert_pg_exact_under_ddl(p)
    read_under = {r["schema_version"] for r in p.changelog("t").to_pylist() if r["op"] == "r"}
    assert len(read_under) >= 3, f"the snapshot's chunks were read under versions {read_under} only"


def test_postgres_a_ddl_no_change_has_shown_yet_starts_at_the_emitting_batch(
        spark: Any, postgres_server: PostgresSandbox, pg_database: str, tmp_path: Path) -> None:
    """PostgreSQL shows a DDL only with the table's next change: chunks read after an ADD COLUMN
    that no change has followed are written under a version recorded at their batch's HW; the
    first change after it finds that version (no other is made)."""
    p = PgPipeline(spark, postgres_server, pg_database, tmp_path)
    with contextlib.closing(p.admin()) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v varchar(40), n int)")
        conn.execute("INSERT INTO t SELECT i, 'v' || i, i FROM generate_series(0, 599) AS i")
    a = postgres_server.admin
    hooks = DdlHooks(p.workdir / "ddl", {"host": a.host, "port": a.port, "user": a.user, "password": a.password,
                                          "dbname": pg_database, "options": f"-c search_path={p.schema}"}, pg_database)
    hooks.arm("stage", ["ALTER TABLE t ADD COLUMN note text DEFAULT 'x'"], 1)
    p.start_reference()
    JobRunner(p.config(), spark, hooks=hooks).run(once=True)
    assert not hooks.errors() and not hooks.pending(), (hooks.errors(), hooks.pending())
    versions = SchemaHistory(StateStore(str(p.state_dir))).versions(TableId(p.schema, "t"))
    assert len(versions) == 2 and "seen in the catalog by a snapshot chunk's read" in (versions[1].ddl or "")
    log = p.changelog("t").to_pylist()
    by_version = Counter(r["schema_version"] for r in log)
    assert set(by_version) == {0, 1} and sum(by_version.values()) == 600, by_version
    mirror = {r["id"]: r for r in p.mirror("t").to_pylist()}
    version = {r["after"]["id"]: r["schema_version"] for r in log}
    assert all(r["note"] == ("x" if version[i] else None) for i, r in mirror.items())
    with contextlib.closing(p.admin()) as conn:
        conn.execute("INSERT INTO t VALUES (1000, 'new', 1, 'y')")
    JobRunner(p.config(), spark, hooks=hooks).run(once=True)
    [change] = [r for r in p.changelog("t").to_pylist() if r["op"] == "c"]
    assert change["schema_version"] == 1 and change["after"]["note"] == "y"
    assert len(SchemaHistory(StateStore(str(p.state_dir))).versions(TableId(p.schema, "t"))) == 2


# ---------------------------------------------------------------- a driver killed right after a DDL


def _driver(p: Pipeline, hooks: DdlHooks) -> subprocess.Popen[str]:
    spec = json.dumps({"config": p.raw_config(), "hooks": hooks.directory, "database": p.database,
                       "admin": {"host": p.box.admin.host, "port": p.box.admin.port, "user": p.box.admin.user,
                                 "password": p.box.admin.password}})
    return subprocess.Popen([sys.executable, __file__, spec], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)


@pytest.mark.slow  # a driver process killed, then two runs
def test_a_driver_killed_right_after_a_ddl_during_the_snapshot_recovers_exactly(
        spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> None:
    rows = ROWS // 2
    p = make_pipeline(spark, mysql_server, database, tmp_path, rows)
    hooks = DdlHooks(p.workdir / "ddl", mysql_server.admin, database)
    arm_mix(hooks, scale=rows / ROWS)
    writer = AdaptiveWriter(mysql_server, database, seed=11, key_space=rows + 100)
    with writing(writer):
        with contextlib.closing(p.box.admin.connect()) as conn:
            p.started_at = current_offset(conn)
        driver = _driver(p, hooks)
        try:
            deadline = time.monotonic() + 120
            while len(hooks.cuts()) < 2:  # the ADD and the widening happened
                assert driver.poll() is None, "the driver exited early"
                assert time.monotonic() < deadline, "no DDL happened"
                time.sleep(0.05)
        finally:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and Python workers at once
            driver.wait(timeout=60)
        run(p, hooks)  # restart from the checkpoint: the rest of the snapshot, the other two DDLs
    assert writer.error is None, writer.error
    assert not hooks.errors() and not hooks.pending(), (hooks.errors(), hooks.pending())
    run(p, hooks)
    assert_exact_under_ddl(p, hooks)


def _main(arg: str) -> None:
    from spark_session import run_session
    from test_ddl_during_snapshot import DdlHooks as Hooks  # by module: the workers import it

    from cdc.app.config import parse_config

    spec = json.loads(arg)
    config = parse_config({**spec["config"], "trigger_interval": "200ms"}, warn_plain_password=False)
    hooks = Hooks(Path(spec["hooks"]), Endpoint(**spec["admin"]), spec["database"])
    spark = run_session("spark-cdc-ddl-driver", Path(spec["hooks"]).parent / "warehouse", long_lived=False)
    JobRunner(config, spark, hooks=hooks).run()


if __name__ == "__main__":
    _main(sys.argv[1])
