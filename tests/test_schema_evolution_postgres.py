"""Schema evolution on Postgres (docs/concepts/schema-evolution.md): pgoutput's Relation messages make
schema versions, and DDL flows to Delta as it does from MySQL.

The reader tests decode a real slot's log with both decoders (column-wise and per row) through
ALTER TABLE ADD / ALTER TYPE (widen) / DROP / RENAME COLUMN, under replica identity DEFAULT and
FULL with unchanged TOASTed values; the pipeline tests run the real job against the Postgres
fixture: the mirror, the changelog, ``exception``, ``ignore``, and a crash whose replay decodes
rows from before the DDL with the old version.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from faults import InjectedFault
from pipeline import PACE_S
from pipeline_pg import PgPipeline
from postgres_server import pg_dialect
from test_postgres import TYPE_ROWS, TYPES_DDL

from binlog.postgres.dialect import PostgresDialect
from binlog.postgres.positions import LsnOffset
from cdc.app.runner import JobFailed
from cdc.app.sandbox.postgres import PostgresSandbox
from cdc.model.debezium.schema_change import schema_change_message
from cdc.model.errors import SchemaChanged
from cdc.model.history import SchemaHistory, tagged_change, tagged_schema
from cdc.model.schema import TableId, TableSchema
from cdc.spark.state import StateStore

T = TableId("public", "t")
CREATE = "CREATE TABLE t (id int PRIMARY KEY, name varchar(10), qty int, old varchar(5), big text)"
BIG = "(SELECT string_agg(md5(i::text || random()::text), '') FROM generate_series(1, 400) AS i)"  # TOASTed

DDL_STEPS = [  # (DDL, writes after it)
    ("ALTER TABLE t ADD COLUMN note varchar(20)",
     ["INSERT INTO t (id, name, qty, old, note) VALUES (100, 'a', 1, 'x', 'added')",
      "UPDATE t SET note = 'n-' || id", "DELETE FROM t WHERE id = 19"]),
    ("ALTER TABLE t ALTER COLUMN qty TYPE bigint",
     ["INSERT INTO t (id, name, qty, old, note) VALUES (101, 'b', 5000000000, 'y', 'wide')",
      "UPDATE t SET qty = qty + 4000000000"]),
    ("ALTER TABLE t DROP COLUMN old",
     ["INSERT INTO t (id, name, qty, note) VALUES (102, 'c', 2, 'dropped')", "UPDATE t SET qty = qty + 1",
      "DELETE FROM t WHERE id = 18"]),
    ("ALTER TABLE t RENAME COLUMN name TO title",
     ["INSERT INTO t (id, title, qty, note) VALUES (103, 'd', 3, 'renamed')", "UPDATE t SET title = 't' || id"]),
]


# ---- the log reader on a real slot (no Spark) -------------------------------------------------------

@pytest.fixture
def dialect(postgres_server: PostgresSandbox, pg_database: str) -> PostgresDialect:
    return pg_dialect(postgres_server, pg_database)


def _offset(d: PostgresDialect) -> LsnOffset:
    with contextlib.closing(d.connect()) as conn:
        return d.current_offset(conn)


def _started(d: PostgresDialect, admin: Any, identity: str = "DEFAULT") -> TableSchema:
    """The table with 3 rows (a TOASTed ``big``) and the slot; the table's schema (version 0)."""
    admin.execute(CREATE)
    admin.execute("ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL")  # out of line: 'u' when unchanged
    admin.execute(f"ALTER TABLE t REPLICA IDENTITY {identity}")
    admin.execute(f"INSERT INTO t SELECT i, 'n' || i, i, 'o' || i, {BIG} FROM generate_series(1, 3) AS i")
    with contextlib.closing(d.connect()) as conn:
        d.check_source(conn)
        return d.table_schema(conn, T)


def _read(d: PostgresDialect, state: Path, start: LsnOffset, end: LsnOffset, decoder: str,
          first: TableSchema) -> list[tuple[int, list[str], list[dict[str, Any]]]]:
    """Each change batch as (its version, the sink schema's columns, its rows without source),
    read by a job that started with ``first`` (its version 0) and keeps its history in ``state``."""
    with contextlib.closing(d.connect()) as conn:
        schema = d.table_schema(conn, T)  # the catalog now: a restart's schema
    d.use_schema_history(StateStore(str(state)), {T: first})
    out = []
    with d.log_reader(0, [schema]) as reader:
        reader.decoder = decoder
        for batch in reader.change_rows(start, end):
            tagged = tagged_schema(batch.rows)
            assert tagged is not None
            rows = [{k: r[k] for k in ("op", "before", "after")} for r in batch.rows.to_pylist()]
            out.append((tagged[1], tagged[0].column_names, rows))
    return out


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_relation_messages_make_versions_in_both_decoders(
        identity: str, dialect: PostgresDialect, pg_admin: Any, tmp_path: Path) -> None:
    d = dialect
    first = _started(d, pg_admin, identity)
    start = _offset(d)
    pg_admin.execute("UPDATE t SET qty = 10 WHERE id = 1")  # version 0; big unchanged (TOASTed)
    for statement, _ in DDL_STEPS:
        pg_admin.execute(statement)
        pg_admin.execute("UPDATE t SET qty = qty + 1 WHERE id = 1")  # big unchanged under each version
    pg_admin.execute("BEGIN")
    pg_admin.execute("INSERT INTO t (id, title, qty) VALUES (7, 'same txn', 7)")
    pg_admin.execute("ALTER TABLE t ADD COLUMN late int")
    pg_admin.execute("INSERT INTO t (id, title, qty, late) VALUES (8, 'same txn', 8, 8)")
    pg_admin.execute("COMMIT")
    end = _offset(d)
    big = pg_admin.execute("SELECT big FROM t WHERE id = 1").fetchone()[0]

    columnar = _read(d, tmp_path / "a", start, end, "columnar", first)
    rows = _read(d, tmp_path / "b", start, end, "rows", first)
    assert columnar == rows
    assert [v for v, _, _ in columnar] == [0, 1, 2, 3, 4, 5]
    last_columns = columnar[-1][1]
    assert last_columns == ["id", "name", "qty", "old", "big", "note", "title", "late"], "lenient: only grows"
    afters = [r["after"] for _, _, batch in columnar for r in batch]
    assert all(a["big"] == big for a in afters[:5]), "an unchanged TOASTed value is never null"
    assert [a["qty"] for a in afters[:5]] == [10, 11, 12, 13, 14]
    assert afters[1]["note"] is None and afters[2]["note"] is None
    assert afters[3]["old"] is None and afters[4]["name"] is None and afters[4]["title"] == "n1"
    assert afters[5] == {"id": 7, "name": None, "qty": 7, "old": None, "big": None, "note": None, "title": "same txn"}
    assert afters[6]["late"] == 8
    befores = [r["before"] for _, _, batch in columnar for r in batch]
    if identity == "FULL":
        assert befores[1]["qty"] == 10 and befores[1]["big"] == big
    else:  # the key only
        assert befores[1] == {"id": 1, "name": None, "qty": None, "old": None, "big": None, "note": None}

    # the history: one version per definition, at the first change under it, with a described ddl
    history = SchemaHistory(StateStore(str(tmp_path / "a")))
    versions = history.versions(T)
    assert [v.version for v in versions] == [0, 1, 2, 3, 4, 5]
    assert versions[1].ddl == "relation message (PostgreSQL logs no DDL text): added column note character varying(20)"
    assert versions[2].ddl.endswith("changed column qty integer to bigint")  # type: ignore[union-attr]
    assert versions[2].schema.column("qty").arrow == pa.int64()
    assert versions[3].ddl.endswith("dropped column old")  # type: ignore[union-attr]
    assert versions[4].ddl.endswith("dropped column name; added column title character varying(10)")  # type: ignore[union-attr]
    assert versions[4].schema.column_names == ["id", "title", "qty", "big", "note"]
    assert versions[4].schema.primary_key == ("id",)

    # a replay, and a read that starts after the first DDL, find the same versions (no new file)
    files = sorted(p.name for p in (tmp_path / "a" / "schemas" / "public.t").iterdir())
    assert _read(d, tmp_path / "a", start, end, "columnar", first) == columnar
    later = LsnOffset(versions[2].key[0])
    assert [v for v, _, _ in _read(d, tmp_path / "a", later, end, "rows", first)] == [2, 3, 4, 5]
    assert sorted(p.name for p in (tmp_path / "a" / "schemas" / "public.t").iterdir()) == files


def _pieces(d: PostgresDialect, state: Path, start: LsnOffset, cut: LsnOffset, end: LsnOffset, decoder: str,
            first: TableSchema) -> list[tuple[int, dict[str, Any]]]:
    """``(start, end]`` read as a slice cut at ``cut`` is: two readers, each with its own history
    over ``state``; the later piece (``decode_from``) first, as a task may run before another.
    Each change as (its version, its op, before and after)."""
    with contextlib.closing(d.connect()) as conn:
        schema = d.table_schema(conn, T)
    out: list[list[tuple[int, dict[str, Any]]]] = []
    for lo, hi, decode_from in ((start, end, cut), (start, cut, None)):
        d.use_schema_history(StateStore(str(state)), {T: first})
        with d.log_reader(0, [schema]) as reader:
            reader.decoder = decoder
            out.append([(tagged_schema(b.rows)[1], {k: r[k] for k in ("op", "before", "after")})  # type: ignore[index]
                        for b in reader.change_rows(lo, hi, decode_from) for r in b.rows.to_pylist()])
            held = reader.connection().execute("SELECT count(*) FROM pg_replication_slots WHERE active_pid = "
                                               "pg_backend_pid()").fetchone()[0]
            assert held == 0, "the reader still holds its copy of the slot"
    return out[1] + out[0]


def _history(state: Path) -> list[tuple[Any, ...]]:
    return [(v.version, v.key, v.ddl, v.schema) for v in SchemaHistory(StateStore(str(state))).versions(T)]


@pytest.mark.parametrize("decoder", ["columnar", "rows"])
def test_a_slice_cut_anywhere_is_read_once_with_the_same_versions(
        decoder: str, dialect: PostgresDialect, pg_admin: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A catch-up slice cut for several readers: wherever the cut falls (on a commit, inside a
    transaction, between DDL and the first change under it), the pieces' changes are the whole
    slice's, once each, with the same versions, and both readers record the history a single
    reader records, whichever runs first. The later piece reads a temporary copy of the slot,
    which is gone afterwards; with no free slot on the server it peeks the job's slot instead."""
    d = dialect
    first = _started(d, pg_admin, "FULL")
    start = _offset(d)
    lsns = [start]
    for statement, writes in DDL_STEPS:
        pg_admin.execute(statement)
        lsns.append(_offset(d))
        for w in writes:
            pg_admin.execute(w)
            lsns.append(_offset(d))
    pg_admin.execute("CREATE TABLE other (id int PRIMARY KEY)")
    pg_admin.execute("BEGIN")
    pg_admin.execute("INSERT INTO t (id, title, qty) VALUES (7, 'same txn', 7)")
    pg_admin.execute("INSERT INTO other VALUES (1)")
    pg_admin.execute("ALTER TABLE t ADD COLUMN late int")
    pg_admin.execute("INSERT INTO t (id, title, qty, late) VALUES (8, 'same txn', 8, 8)")
    pg_admin.execute("COMMIT")
    pg_admin.execute("TRUNCATE other")
    pg_admin.execute("UPDATE t SET late = id")
    end = _offset(d)
    lsns.append(end)
    whole = [(v, r) for v, _, rows in _read(d, tmp_path / "whole", start, end, decoder, first) for r in rows]
    assert [v for v, _ in whole][-1] == 5 and len(whole) > 20
    cuts = sorted({*lsns[1:-1], *(LsnOffset(a.lsn + 1) for a in lsns[1:-1]),
                   *(LsnOffset((a.lsn + b.lsn) // 2) for a, b in itertools.pairwise(lsns))})
    for i, cut in enumerate(cuts):
        state = tmp_path / f"cut{i}"
        assert _pieces(d, state, start, cut, end, decoder, first) == whole, f"cut at {cut}"
        assert _history(state) == _history(tmp_path / "whole"), f"cut at {cut}"
    slots = "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
    assert [r[0] for r in pg_admin.execute(slots).fetchall()] == [d.postgres.slot]

    # every slot taken: the later piece peeks the job's slot itself, with the same result
    free = pg_admin.execute("SELECT current_setting('max_replication_slots')::int - count(*) "
                            "FROM pg_replication_slots").fetchone()[0]
    pg_admin.execute("SELECT pg_create_physical_replication_slot('fill_' || i, false, true) "
                     "FROM generate_series(1, %s) AS i", (free,))
    middle = cuts[len(cuts) // 2]
    with caplog.at_level(logging.WARNING, logger="binlog.postgres.reader"):
        assert _pieces(d, tmp_path / "full", start, middle, end, decoder, first) == whole
    assert ("no free replication slot" in caplog.text) == (decoder == "columnar")
    assert _history(tmp_path / "full") == _history(tmp_path / "whole")


def test_the_schema_change_event_is_labelled_and_carries_the_table(
        dialect: PostgresDialect, pg_admin: Any, tmp_path: Path) -> None:
    d = dialect
    first = _started(d, pg_admin)
    start = _offset(d)
    pg_admin.execute("ALTER TABLE t ADD COLUMN note text")
    pg_admin.execute("INSERT INTO t (id, note) VALUES (9, 'x')")
    end = _offset(d)
    d.use_schema_history(StateStore(str(tmp_path)), {T: first})
    with d.log_reader(0, [first]) as reader:
        [batch] = list(reader.change_rows(start, end))
    change = tagged_change(batch.rows)
    assert change is not None and change.version == 1
    assert change.ddl == "relation message (PostgreSQL logs no DDL text): added column note text"
    assert change.schema.column_names == ["id", "name", "qty", "old", "big", "note"]
    source = batch.rows.column("source")[0].as_py()
    assert change.source["lsn"] == source["lsn"] and change.source["connector"] == "postgresql"
    # what the Kafka sink publishes to the schema change topic
    key, value = schema_change_message("postgresql", change.schema, change.ddl, change.source, 0)
    payload = json.loads(value)["payload"]
    assert json.loads(key)["payload"] == {"databaseName": d.postgres.database}
    assert (payload["databaseName"], payload["schemaName"], payload["ddl"]) == (d.postgres.database, "public",
                                                                                change.ddl)
    assert [c["name"] for c in payload["tableChanges"][0]["table"]["columns"]][-1] == "note"


@pytest.mark.parametrize("decoder", ["columnar", "rows"])
def test_exception_names_the_table_the_lsn_and_the_change(
        decoder: str, postgres_server: PostgresSandbox, pg_database: str, pg_admin: Any, tmp_path: Path) -> None:
    d = pg_dialect(postgres_server, pg_database, schema_change={"behavior": "exception"})
    first = _started(d, pg_admin)
    start = _offset(d)
    pg_admin.execute("INSERT INTO t (id) VALUES (9)")
    pg_admin.execute("ALTER TABLE t ALTER COLUMN qty TYPE bigint")
    pg_admin.execute("INSERT INTO t (id, qty) VALUES (10, 1)")
    end = _offset(d)
    with pytest.raises(SchemaChanged, match=r"captured table public\.t changed: its first change under the new "
                       r"definition is at LSN [0-9A-F]+/[0-9A-F]+ \(commit [0-9A-F]+/[0-9A-F]+\); relation message "
                       r".*changed column qty integer to bigint\. source\.schema_change\.behavior is 'exception'.*"
                       r"set it to 'lenient'"):
        _read(d, tmp_path, start, end, decoder, first)


def test_every_type_reads_as_the_catalog_describes_it(
        postgres_server: PostgresSandbox, pg_database: str, pg_admin: Any, tmp_path: Path) -> None:
    """A Relation message of an unchanged table is version 0 for every type (domains, enums,
    arrays, numeric(p, s), timestamps with precision...): ``exception`` does not stop."""
    pg_admin.execute(TYPES_DDL)
    pg_admin.execute("CREATE DOMAIN short_text AS varchar(7)")
    pg_admin.execute("ALTER TABLE types ADD COLUMN dom short_text, ADD COLUMN moods mood[], ADD COLUMN ts3 timestamp(3)")
    d = pg_dialect(postgres_server, pg_database, schema_change={"behavior": "exception"})
    with contextlib.closing(d.connect()) as conn:
        d.check_source(conn)
        schema = d.table_schema(conn, TableId("public", "types"))
    start = _offset(d)
    pg_admin.execute("INSERT INTO types (id) VALUES " + ", ".join(f"({i})" for i in range(10, 13)))
    pg_admin.execute("ALTER TYPE mood ADD VALUE 'meh'")  # the type changes, not the table
    pg_admin.execute("INSERT INTO types VALUES " + TYPE_ROWS[0].replace("happy", "meh")[:-1] + ", 'abc', '{sad}', NULL)")
    end = _offset(d)
    d.use_schema_history(StateStore(str(tmp_path)), {schema.table_id: schema})
    for decoder in ("columnar", "rows"):
        with d.log_reader(0, [schema]) as reader:
            reader.decoder = decoder
            versions = [tagged_schema(b.rows)[1] for b in reader.change_rows(start, end)]  # type: ignore[index]
        assert versions == [0], decoder


# ---- the job, Postgres -> Delta -----------------------------------------------------------------

@pytest.fixture
def pipeline(spark: Any, postgres_server: PostgresSandbox, pg_database: str, tmp_path: Path) -> Iterator[PgPipeline]:
    p = PgPipeline(spark, postgres_server, pg_database, tmp_path)
    with contextlib.closing(p.admin()) as conn:
        conn.execute(CREATE.replace(", big text", ""))
        conn.execute("INSERT INTO t SELECT i, 'n' || i, i, 'o' || i FROM generate_series(0, 19) AS i")
    yield p
    p.cleanup()


def sql(p: PgPipeline, *statements: str) -> None:
    with contextlib.closing(p.admin()) as conn:
        for s in statements:
            conn.execute(s)


def rows_now(p: PgPipeline) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in p.source_rows("t")}


def changes(p: PgPipeline) -> list[dict[str, Any]]:
    return [r for r in p.changelog("t").to_pylist() if r["op"] != "r"]


@pytest.mark.slow  # three runs of the job
def test_lenient_ddl_flows_to_the_mirror_and_the_changelog(pipeline: PgPipeline) -> None:
    p = pipeline
    p.run()  # the snapshot
    sql(p, "INSERT INTO t VALUES (50, 'before', 50, 'o')")  # version 0, in the stream
    count = 1
    for statement, writes in DDL_STEPS:
        sql(p, statement, writes[0])
        count += 1 + len(rows_now(p))  # the insert, then every row updated
        sql(p, *writes[1:])
        count += sum(w.startswith("DELETE") for w in writes)
    p.run()

    mirror = p.mirror("t")
    assert mirror.schema.names == ["id", "name", "qty", "old", "note", "title"]
    assert mirror.schema.field("qty").type == pa.int64()
    expected = {i: {**r, "name": None, "old": None} for i, r in rows_now(p).items()}  # all updated since
    assert {r["id"]: r for r in mirror.to_pylist()} == expected
    log = changes(p)
    keys = [(r["source"]["commit_lsn"], r["source"]["lsn"], r["op"]) for r in log]
    assert len(keys) == len(set(keys)) == count
    inserts = {r["after"]["id"]: r for r in log if r["op"] == "c"}
    assert [inserts[k]["schema_version"] for k in (50, 100, 101, 102, 103)] == [0, 1, 2, 3, 4]
    assert inserts[101]["after"]["qty"] == 5_000_000_000 and inserts[102]["after"]["old"] is None
    assert inserts[103]["after"] == {"id": 103, "name": None, "qty": 3, "old": None, "note": "renamed",
                                     "title": "d"}
    assert {r["op"] for r in log} == {"c", "u", "d"}
    assert {r["schema_version"] for r in p.changelog("t").to_pylist() if r["op"] == "r"} == {0}

    # a restart: the catalog lacks `name` and `old`, the history and the sink keep them
    sql(p, "INSERT INTO t (id, title, qty, note) VALUES (104, 'e', 4, 'restart')")
    p.run()
    assert {r["id"]: r for r in p.mirror("t").to_pylist()}[104] == {
        "id": 104, "name": None, "qty": 4, "old": None, "note": "restart", "title": "e"}

    # a read from an older offset (the reference slot, from before the DDL) decodes each change
    # with the version in force there, from the job's history
    assert p.started_at is not None
    d = pg_dialect(p.box, p.database, slot_name=p.reference_slot, tables=[f"{p.schema}\\..*"])
    schema = p.schemas()[TableId(p.schema, "t")]
    d.use_schema_history(StateStore(str(p.state_dir)), {schema.table_id: schema})
    with contextlib.closing(d.connect()) as conn:
        end = d.current_offset(conn)
    with d.log_reader(0, [schema]) as reader:
        seen = [tagged_schema(b.rows)[1] for b in reader.change_rows(p.started_at, end)]  # type: ignore[index]
    assert seen == sorted(seen) and set(seen) == {0, 1, 2, 3, 4}
    assert len(SchemaHistory(StateStore(str(p.state_dir))).versions(schema.table_id)) == 5


def test_exception_stops_at_the_change_naming_it(pipeline: PgPipeline) -> None:
    p = pipeline
    p.source = {"schema_change": {"behavior": "exception"}}
    p.run()
    sql(p, "INSERT INTO t VALUES (50, 'x', 1, 'y')", "ALTER TABLE t ADD COLUMN note text",
        "INSERT INTO t VALUES (51, 'x', 1, 'y', 'z')")
    with pytest.raises(JobFailed, match=r"captured table .*\.t changed: its first change under the new definition "
                                        r"is at LSN .*added column note text\. source\.schema_change\.behavior is "
                                        r"'exception'"):
        p.run()
    assert 51 not in {r["id"] for r in p.mirror("t").to_pylist()}


@pytest.mark.slow  # two runs of the job
def test_ignore_keeps_the_first_schema(pipeline: PgPipeline) -> None:
    p = pipeline
    p.source = {"schema_change": {"behavior": "ignore"}}
    p.run()
    sql(p, "ALTER TABLE t ADD COLUMN note text", "INSERT INTO t VALUES (50, 'x', 1, 'y', 'z')",
        "ALTER TABLE t DROP COLUMN old", "INSERT INTO t (id, name, qty) VALUES (51, 'w', 2)")
    p.run()
    mirror = {r["id"]: r for r in p.mirror("t").to_pylist()}
    assert p.mirror("t").schema.names == ["id", "name", "qty", "old"]
    assert mirror[50] == {"id": 50, "name": "x", "qty": 1, "old": "y"}
    assert mirror[51] == {"id": 51, "name": "w", "qty": 2, "old": None}
    assert {r["after"]["id"]: r["schema_version"] for r in changes(p) if r["op"] == "c"} == {50: 1, 51: 2}


@pytest.mark.slow  # three runs of the job
def test_a_crash_after_a_ddl_replays_the_older_rows_with_the_old_version(pipeline: PgPipeline) -> None:
    """The batch holding a change before an ADD COLUMN and the first changes after it dies after
    the changelog committed; the restart (whose catalog has the new column) replays it from its
    older start offset, decoding the first change with version 0 from the state directory."""
    p = pipeline
    p.run()
    sql(p, "UPDATE t SET qty = -1 WHERE id = 3", "ALTER TABLE t ADD COLUMN note varchar(20)",
        "INSERT INTO t (id, name, qty, old, note) VALUES (100, 'a', 1, 'x', 'added')",
        "UPDATE t SET note = 'all', qty = qty + 1 WHERE id < 10")
    p.arm("after_sink_commit")
    with pytest.raises((JobFailed, InjectedFault), match="injected fault at after_sink_commit"):
        p.run()
    p.run()
    assert {r["id"]: r for r in p.mirror("t").to_pylist()} == rows_now(p)
    log = sorted(changes(p), key=lambda r: (r["source"]["commit_lsn"], r["source"]["row"]))
    keys = [(r["source"]["commit_lsn"], r["source"]["lsn"], r["op"]) for r in log]
    assert len(keys) == len(set(keys)) == 12
    assert [r["schema_version"] for r in log] == [0] + [1] * 11
    assert log[0]["after"] == {"id": 3, "name": "n3", "qty": -1, "old": "o3", "note": None}


# ---- DDL among random writers, a SIGKILL just after the last (issue #17, item 6) ----------------------

# The steps of the driver: each waits for its moment (tests/driver_process.py's MOMENTS), then
# runs its DDL on w (the writer paused); table j is created, with a writer of its own, right after
# the second DDL: it joins (a query restart, then a snapshot under writes) while the DDL goes on,
# and the SIGKILL after the last DDL lands between the stage and the emit of its chunks.
PG_DDL_MIX: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("batch", ("ALTER TABLE w ADD COLUMN note varchar(20)",), {"text": ("v", "note")}),
    ("batch", ("ALTER TABLE w ALTER COLUMN n TYPE bigint", "ALTER TABLE w ALTER COLUMN v TYPE varchar(80)"),
     {"wide": True}),
    ("joining", ("ALTER TABLE w RENAME COLUMN v TO title",), {"text": ("title", "note")}),
    ("emitting", ("ALTER TABLE w DROP COLUMN note",), {"text": ("title",)}),
]
JOINING_ROWS = 3000  # 30 chunks of 100, 4 per batch: j's snapshot outlasts the steps


@pytest.mark.slow  # a snapshot run, one driver process killed, a catch-up run
def test_ddl_among_random_writers_just_before_a_sigkill_is_exact(pipeline: PgPipeline) -> None:
    """ADD, ALTER TYPE (widen), RENAME and DROP COLUMN among random writers during the stream, the
    driver SIGKILLed right after the last, and a table created mid-run that joins under its own
    writer meanwhile (the SIGKILL lands between the stage and the emit of its chunks); then the
    mirror of w under ``lenient``, each change once in its changelog, and its replay rebuilding
    the table as it was before each DDL; j's mirror and changelog exact, each key read once."""
    from ddl_writers import PgDdlRandomWriter, assert_pg_exact_under_ddl, wait_for_statements
    from driver_process import Driver, table_state
    from pipeline import writing
    from pipeline_pg import assert_changelog_exact, assert_mirror_equals_source
    from test_new_tables import PausedPgWriter

    p = pipeline
    p.source = {"table_discovery_interval": "1s"}  # the driver looks for new tables every second
    sql(p, "CREATE TABLE w (id int PRIMARY KEY, v varchar(40), n int)",
        "INSERT INTO w SELECT i * 2, 'v' || i, i FROM generate_series(0, 299) AS i")
    initial = p.source_rows("w")
    p.run()  # the snapshot; the DDL comes during the stream
    j = f"{p.schema}.j"
    writer = PgDdlRandomWriter(p, "w", seed=29, key_space=500, pause_s=PACE_S)  # rows 506-598 stay as read
    j_writer = PausedPgWriter(p, "j", seed=30, key_space=JOINING_ROWS + 500)
    cuts = []
    # j's writer goes on through the restart: its changes then also follow chunks of j emitted
    # before them (when the SIGKILL left none emitted, a restart after the writer stopped merged
    # every change of j into its snapshot rows)
    with contextlib.ExitStack() as joining:
        with writing(writer):
            driver = Driver(p.raw_config(), p.workdir)
            try:
                for when, statements, columns in PG_DDL_MIX:
                    driver.reach(when, j)
                    cuts.append(writer.alter(*statements, **columns))
                    if len(cuts) == 2:  # j: created and written while the DDL goes on
                        sql(p, "CREATE TABLE j (id int PRIMARY KEY, v varchar(40), n int NOT NULL)",
                            f"INSERT INTO j SELECT i, 'j' || i, i FROM generate_series(0, {JOINING_ROWS - 1}) AS i")
                        joining.enter_context(writing(j_writer))
            finally:
                driver.kill()
            wait_for_statements(writer, 20)  # changes under the last DDL, for the catch-up run
            wait_for_statements(j_writer, 20)
        assert table_state(driver.planned(), j) == "snapshot", "the SIGKILL landed during j's join"
        assert writer.error is None and writer.statements > 100, writer.error
        p.run()  # restart from the checkpoint and catch up, j's writer still writing
    p.run()  # and the changes it made meanwhile
    schemas = p.schemas()
    schema = schemas[TableId(p.schema, "w")]
    assert schema.column_names == ["id", "title", "n"]
    assert p.mirror("w").schema.names == ["id", "v", "n", "note", "title"]
    assert p.mirror("w").schema.field("n").type == pa.int64()
    assert_pg_exact_under_ddl(p, "w", schema, initial, cuts)
    mirror = p.mirror("w").to_pylist()
    assert all(r["v"] is not None and r["title"] is None for r in mirror if r["id"] > 510), "untouched since the snapshot"
    assert any(r["v"] is None and r["title"] is not None for r in mirror), "changed after the rename"
    versions = {r["schema_version"] for r in p.changelog("w").to_pylist() if r["op"] != "r"}
    assert versions == {0, 1, 2, 3, 4}, "both widenings make one version: Postgres shows them at the next change"
    # j: the mirror is the source, each key its snapshot read once, each later change once
    j_schema = schemas[TableId(p.schema, "j")]
    assert_mirror_equals_source(p, "j", j_schema)
    assert_changelog_exact(p, "j", j_schema)
    ops = {r["op"] for r in p.changelog("j").to_pylist()}
    assert "r" in ops and ops - {"r"}, f"j's snapshot rows, then its changes from the log: {ops}"
