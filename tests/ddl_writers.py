"""DDL among random writers (issue #17, item 6): a writer that follows the table's columns, the
source table kept at each DDL, and the replay check of the changelog.

The checks rest on ``lenient`` (docs/concepts/schema-evolution.md): the sink schema only grows; a row
keeps the values of the last change that wrote it, and a column that change's schema did not
have (added or renamed-to after it) is null, so is a column dropped or renamed away before it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from pipeline import Pipeline, RandomWriter, _ReadOnlyHistory, lenient_rows, reference_changes
from pipeline_pg import PgPipeline, PgRandomWriter
from postgres_server import pg_dialect

from binlog.mysql.positions import BinlogOffset, ChangePosition
from binlog.mysql.reader import current_offset
from binlog.postgres.positions import LsnOffset
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.history import SchemaHistory, SchemaVersion, tagged_schema
from cdc.model.schema import TableId, TableSchema
from cdc.spark.state import StateStore


@dataclass(frozen=True)
class Cut:
    """The source table just before a DDL (the writers paused): its binlog offset and rows."""

    ddl: tuple[str, ...]
    offset: BinlogOffset
    rows: list[dict[str, Any]]


class DdlRandomWriter(RandomWriter):
    """:class:`RandomWriter` on a table ``(id, <text columns>, n)`` whose text columns and the
    width of ``n`` change with each :meth:`alter`; every statement names current columns only."""

    def __init__(self, box: Sandbox, database: str, table: str, seed: int, key_space: int = 3000,
                 text: tuple[str, ...] = ("v",), pause_s: float = 0.0) -> None:
        super().__init__(box, database, table, seed, key_space, pause_s)
        self.box, self.database = box, database
        self.text = text
        self.error: str | None = None
        self.wide = False  # n is BIGINT and the text columns VARCHAR(80): write values only they hold

    def alter(self, *statements: str, text: tuple[str, ...] | None = None, wide: bool | None = None) -> Cut:
        """Pause the writer, keep the table as it is, run the DDL, then resume with the new columns."""
        with self.paused(), contextlib.closing(self.box.admin.connect(self.database)) as conn:
            offset = current_offset(conn)
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM `{self.table}`")
                names = [d[0] for d in cur.description]
                rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
                for s in statements:
                    cur.execute(s)
            self.text = self.text if text is None else text
            self.wide = self.wide if wide is None else wide
            return Cut(tuple(statements), offset, rows)

    def _value(self, k: int, column: str) -> str:
        """A value for a text column: up to 80 characters in the widened ``v``/``title``."""
        long = self.wide and column != "note" and self.rng.random() < 0.3
        return f"w{k}" + ("-" * self.rng.randrange(40, 70) if long else "")

    def _number(self) -> int:
        return self.rng.randrange(1000) + (self.rng.choice([0, 5_000_000_000]) if self.wide else 0)

    def one(self) -> None:
        statement = mysql_ddl_statement(self, self.text, self._number(), self._value)
        try:
            with self.conn.cursor() as cur:
                cur.execute(statement)
        except Exception as e:
            self.error = f"{statement}: {e!r}"  # the thread ends; the test says why
            raise
        self.statements += 1


def wait_for_statements(writer: RandomWriter | PgRandomWriter, n: int, timeout: float = 60.0) -> None:
    """Block until the writer has made ``n`` more statements (changes under the last DDL too)."""
    deadline, target = time.monotonic() + timeout, writer.statements + n
    while writer.statements < target:
        assert writer.thread.is_alive() and time.monotonic() < deadline, f"the writer stopped: {getattr(writer, 'error', None)}"
        time.sleep(0.01)


def _position(row: dict[str, Any]) -> tuple[str, int, int]:
    """A changelog row's place in the log: a change's own position, a snapshot read's chunk HW
    (before every change at that offset: a change at the HW's position is not covered by it)."""
    s = row["source"]
    return (s["file"], s["pos"], -1 if row["op"] == "r" else s["row"])


def replay_changelog(log: list[dict[str, Any]], key: str, upto: BinlogOffset | None = None) -> dict[Any, dict[str, Any]]:
    """The table rebuilt from its changelog rows in log order (only those before ``upto``)."""
    ordered = sorted(log, key=lambda r: (int(r["source"]["file"].rsplit(".", 1)[1]), *_position(r)[1:]))
    return replay([r for r in ordered if upto is None or upto.covers(ChangePosition(*_position(r)[:2], 0))], key)


def replay(ordered: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    """Change rows applied in the given order: a before image removes its key, an after image
    puts its row (a primary-key update is a delete and a create)."""
    table: dict[Any, dict[str, Any]] = {}
    for row in ordered:
        if row["before"] is not None:
            table.pop(row["before"][key], None)
        if row["after"] is not None:
            table[row["after"][key]] = row["after"]
    return table


def change_versions(p: Pipeline, table_id: TableId,
                    log: list[dict[str, Any]]) -> list[tuple[dict[str, Any], SchemaVersion]]:
    """Each change row of a MySQL changelog with the schema version in force at its binlog
    position, having checked that every row carries its version: a snapshot row 0, a change
    that one."""
    history = SchemaHistory(StateStore(str(p.state_dir)))
    out = []
    for r in log:
        if r["op"] == "r":
            assert r["schema_version"] == 0, r
            continue
        s = r["source"]
        version = history.at(table_id, ChangePosition(s["file"], s["pos"], s["row"]).sort_key()[:2])
        assert version is not None and r["schema_version"] == version.version, (r, version)
        out.append((r, version))
    return out


def assert_changelog_replays(p: Pipeline, table: str, schema: TableSchema, initial: list[dict[str, Any]],
                             cuts: list[Cut]) -> None:
    """Replaying the changelog in log order gives the mirror, and, stopped just before each DDL,
    the source table as it was then (under ``lenient``); each change row carries the schema
    version in force at its position and no value in a column that version lacks."""
    [key] = schema.primary_key
    log = p.changelog(table).to_pylist()
    mirror = {r[key]: r for r in p.mirror(table).to_pylist()}
    assert replay_changelog(log, key) == mirror, f"{table}: the changelog replayed is not the mirror"
    for r, version in change_versions(p, TableId(p.database, table), log):
        written = {c for image in (r["before"], r["after"]) if image for c, v in image.items() if v is not None}
        assert written <= set(version.schema.column_names), (r, version.schema.column_names)
    columns = list(next(iter(mirror.values())))
    for cut in cuts:
        changes = reference_changes(p, schema, cut.offset)
        expected = lenient_rows(cut.rows, initial, changes, key, columns)
        got = replay_changelog(log, key, upto=cut.offset)
        assert got == expected, (f"{table}: the changelog replayed up to {cut.ddl[0]!r} is not the source then: "
                                 f"{_difference(got, expected)}")


def _difference(got: dict[Any, Any], expected: dict[Any, Any]) -> str:
    keys = sorted(set(got) ^ set(expected))[:5]
    if keys:
        return f"keys only on one side: {keys}"
    diff = [(k, got[k], expected[k]) for k in sorted(got) if got[k] != expected[k]][:3]
    return f"rows that differ (replayed, expected): {diff}"


# ---------------------------------------------------------------- Postgres

class PgDdlRandomWriter(PgRandomWriter):
    """:class:`DdlRandomWriter` on Postgres: a transaction of :class:`PgRandomWriter` never
    straddles a DDL (the writer pauses between statements and transactions)."""

    def __init__(self, p: PgPipeline, table: str, seed: int, key_space: int = 3000,
                 text: tuple[str, ...] = ("v",), pause_s: float | None = None) -> None:
        super().__init__(p, table, seed, key_space, pause_s)
        self.p, self.text, self.wide = p, text, False
        self.lock = threading.Lock()
        self.error: str | None = None

    def _run(self) -> None:
        with contextlib.closing(self.conn):
            while not self.stop_event.is_set():
                with self.lock:
                    try:
                        self.one()
                    except Exception as e:
                        self.error = repr(e)  # the thread ends; the test says why
                        raise
                if self.pause_s:
                    self.stop_event.wait(self.pause_s)

    def alter(self, *statements: str, text: tuple[str, ...] | None = None, wide: bool | None = None) -> PgCut:
        """Pause the writer, keep the table as it is, run the DDL, then resume with the new columns."""
        with self.lock, contextlib.closing(self.p.admin(row_factory=psycopg.rows.dict_row)) as conn:
            row = conn.execute("SELECT pg_current_wal_flush_lsn()::text AS lsn").fetchone()
            assert row is not None
            rows = list(conn.execute(f'SELECT * FROM "{self.table}"').fetchall())
            for s in statements:
                conn.execute(s)  # type: ignore[arg-type]
            self.text = self.text if text is None else text
            self.wide = self.wide if wide is None else wide
            return PgCut(tuple(statements), LsnOffset.parse(row["lsn"]), rows)

    def _value(self, k: int, column: str) -> str:
        long = self.wide and column != "note" and self.rng.random() < 0.3
        return f"w{k}" + ("-" * self.rng.randrange(40, 70) if long else "")

    def _statement(self) -> str:
        return pg_ddl_statement(self, self.text, self.wide, self._value)


@dataclass(frozen=True)
class PgCut:
    """:class:`Cut` on Postgres: the flush LSN before the DDL (every earlier commit is below it)."""

    ddl: tuple[str, ...]
    offset: LsnOffset
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class _PgChange:
    op: str
    after: dict[str, Any] | None
    ident: tuple[int, int, str]


def pg_reference(p: PgPipeline, schema: TableSchema, end: LsnOffset) -> list[_PgChange]:
    """Every change of the table since the pipeline started, from the reference slot, decoded
    with the job's schema history; each after image holds its version's columns only."""
    assert p.started_at is not None
    d = pg_dialect(p.box, p.database, slot_name=p.reference_slot, tables=[f"{p.schema}\\..*"])
    d.use_schema_history(_ReadOnlyHistory(p.state_dir), {schema.table_id: schema})
    versions = {v.version: v.schema.column_names
                for v in SchemaHistory(StateStore(str(p.state_dir))).versions(schema.table_id)}
    out = []
    with d.log_reader(0, [schema]) as reader:
        for batch in reader.change_rows(p.started_at, end):
            tag = tagged_schema(batch.rows)
            assert tag is not None
            columns = versions[tag[1]]
            for r in batch.rows.to_pylist():
                after = None if r["after"] is None else {c: r["after"][c] for c in columns}
                out.append(_PgChange(r["op"], after, (r["source"]["commit_lsn"], r["source"]["lsn"], r["op"])))
    return out


def assert_pg_exact_under_ddl(p: PgPipeline, table: str, schema: TableSchema, initial: list[dict[str, Any]],
                              cuts: list[PgCut]) -> None:
    """The checks of :func:`assert_changelog_replays` and the lenient mirror on Postgres, for a
    table snapshotted before any writer started (so every log change must flow, once)."""
    [key] = schema.primary_key
    with contextlib.closing(p.admin()) as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
    reference = pg_reference(p, schema, LsnOffset.parse(row[0]))
    mirror = {r[key]: r for r in p.mirror(table).to_pylist()}
    columns = p.mirror(table).schema.names
    expected = lenient_rows(p.source_rows(table), initial, reference, key, columns)
    assert mirror == expected, f"{table}: the mirror is not the source under lenient: {_difference(mirror, expected)}"
    log = p.changelog(table).to_pylist()
    assert sorted(r["after"][key] for r in log if r["op"] == "r") == sorted(r[key] for r in initial)
    events = Counter((r["source"]["commit_lsn"], r["source"]["lsn"], r["op"]) for r in log if r["op"] != "r")
    twice = [e for e, n in events.items() if n > 1]
    assert not twice, f"{table}: changes written twice: {twice[:5]}"
    idents = {c.ident for c in reference}
    assert set(events) == idents, (f"{table}: missing {sorted(idents - set(events))[:5]}, "
                                   f"invented {sorted(set(events) - idents)[:5]}")
    ordered = sorted(log, key=lambda r: (r["op"] != "r", r["source"]["commit_lsn"] or 0, r["source"]["lsn"]))
    assert replay(ordered, key) == mirror, f"{table}: the changelog replayed is not the mirror"
    for cut in cuts:
        then = [c for c in reference if c.ident[0] < cut.offset.lsn]
        expected = lenient_rows(cut.rows, initial, then, key, columns)
        got = replay([r for r in ordered if r["op"] == "r" or r["source"]["commit_lsn"] < cut.offset.lsn], key)
        assert got == expected, (f"{table}: the changelog replayed up to {cut.ddl[0]!r} is not the source then: "
                                 f"{_difference(got, expected)}")


def mysql_ddl_statement(w: RandomWriter, text: tuple[str, ...], number: int, value: Callable[[int, str], str]) -> str:
    """One random statement of ``w``, a MySQL writer that follows DDL: over the text columns
    ``text`` the table has now, ``number`` for ``n``; ``value(key, column)`` makes a text value."""
    r, t, k = w.rng, w.table, w.rng.randrange(0, w.key_space)
    values = ", ".join(f"'{value(k, c)}'" for c in text)
    column = r.choice(text)
    return r.choice([
        f"INSERT IGNORE INTO {t} (id, {', '.join(text)}, n) VALUES ({k}, {values}, {number})",
        f"UPDATE {t} SET {column} = '{value(k, column)}', n = n + 1 WHERE id = {k}",
        f"DELETE FROM {t} WHERE id = {k}",
        f"UPDATE IGNORE {t} SET id = {r.randrange(0, w.key_space)} WHERE id = {k}",
        f"UPDATE {t} SET n = n - 1 WHERE id BETWEEN {k} AND {k + 5}",
    ])


def pg_ddl_statement(w: PgRandomWriter, text: tuple[str, ...], wide: bool, value: Callable[[int, str], str]) -> str:
    """One random statement of ``w``, a Postgres writer that follows DDL: over the text columns
    ``text`` the table has now, with ``n`` past 32 bits once ``wide`` (after a widening);
    ``value(key, column)`` makes a text value."""
    r, t, k = w.rng, w.table, w.rng.randrange(0, w.key_space)
    column = r.choice(text)
    n = r.randrange(1000) + (r.choice([0, 5_000_000_000]) if wide else 0)
    values = ", ".join(f"'{value(k, c)}'" for c in text)
    return r.choice([
        f"INSERT INTO {t} (id, {', '.join(text)}, n) VALUES ({k}, {values}, {n}) ON CONFLICT DO NOTHING",
        f"UPDATE {t} SET {column} = '{value(k, column)}', n = n + 1 WHERE id = {k}",
        f"DELETE FROM {t} WHERE id = {k}",
        f"UPDATE {t} SET id = {r.randrange(0, w.key_space)} WHERE id = {k}",
        f"UPDATE {t} SET n = n - 1 WHERE id BETWEEN {k} AND {k + 5}",
    ])
