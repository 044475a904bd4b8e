"""``schema_change.behavior: evolve`` and ``try_evolve`` (docs/concepts/schema-evolution.md): each DDL applied
exactly to the sinks.

Unit tests (no server): the sink schema's lineage, renames from MySQL DDL and from Postgres
Relation messages, the Delta tables' rewrite for drops and renames (and its crash safety), and
staged files of an older version rewritten into the batch's schema. Then the real job against
MariaDB (add, widen, drop, rename among writes; a narrowing; a crash between the Delta schema
change and the data commit; a driver process SIGKILLed in a DROP's evolution among random writers),
Kafka, and Postgres.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from change_batches import read_with_every_reader
from deltalake import DeltaTable, write_deltalake
from faults import InjectedFault
from pipeline import PACE_S, Pipeline
from test_schema_evolution import BASE, DDL_MIX, T, ddl, pipeline, source_rows, sql
from test_schema_evolution_postgres import pipeline as pg_pipeline

from binlog.postgres.relations import describe, infer_renames
from cdc.app.config import parse_config
from cdc.app.runner import JobFailed
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.errors import SchemaChanged
from cdc.model.history import SchemaHistory, project_rows, with_schema
from cdc.model.schema import Column, TableId, TableSchema, schema_to_dict
from sinks.base import TableBatch
from sinks.changes import changelog_schema, mirror_schema
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.evolve import (
    APP_SCHEMA,
    current_schema,
    ensure_table,
    recorded_schema,
    schema_token,
)
from sinks.delta.files import DeltaFileWriter
from sinks.delta.restage import restage
from sinks.delta.tables import read_table

__all__ = ["pg_pipeline", "pipeline"]  # the fixtures of tests/test_schema_evolution.py and _postgres.py

STEPS = ["ALTER TABLE t ADD note TEXT", "ALTER TABLE t MODIFY qty BIGINT", "ALTER TABLE t DROP COLUMN name",
         "ALTER TABLE t RENAME COLUMN note TO remark"]


def evolve_history(behavior: str = "evolve", steps: list[str] = STEPS) -> SchemaHistory:
    """BASE (id, name, qty) and a version per step, recorded as the MySQL reader records them."""
    from binlog.mysql.ddl import parse_ddl

    history = SchemaHistory(behavior=behavior)  # type: ignore[arg-type]
    history.start(BASE)
    schema = BASE
    for i, statement in enumerate(steps):
        [change] = parse_ddl("shop", statement, lambda t: t == T, lambda t, s=schema: s)  # type: ignore[misc]
        assert change.schema is not None
        schema = change.schema
        history.record(T, (1, 100 * (i + 1)), f"mysql-bin.000001:{100 * (i + 1)}", statement, schema, change.renames)
    return history


# ---- the sink schema under evolve (no server) ------------------------------------------------------

def test_evolve_sink_schema_is_each_version_with_column_identities() -> None:
    history = evolve_history()
    sinks = [history.sink_schema(T, v) for v in range(5)]
    assert [s.column_names for s in sinks] == [
        ["id", "name", "qty"], ["id", "name", "qty", "note"], ["id", "name", "qty", "note"], ["id", "qty", "note"],
        ["id", "qty", "remark"]]
    assert [c.origin for c in sinks[4].columns] == ["id@0", "qty@0", "note@1"], "the renamed column keeps its identity"
    assert sinks[2].column("qty").arrow == pa.int64()
    assert history.versions(T)[4].renames == (("note", "remark"),)
    # a column added again under a name that was renamed away is a new column
    again = evolve_history(steps=[*STEPS, "ALTER TABLE t ADD note INT"])
    assert again.sink_schema(T, 5).column("note").origin == "note@5"


def test_the_ddl_parser_reports_renames() -> None:
    from binlog.mysql.ddl import parse_ddl

    def renames(statement: str) -> tuple[tuple[str, str], ...]:
        [change] = parse_ddl("shop", statement, lambda t: t == T, lambda t: BASE)
        return change.renames

    assert renames("ALTER TABLE t RENAME COLUMN name TO title") == (("name", "title"),)
    assert renames("ALTER TABLE t CHANGE name title VARCHAR(20)") == (("name", "title"),)
    assert renames("ALTER TABLE t CHANGE COLUMN qty qty BIGINT") == ()
    assert renames("ALTER TABLE t DROP COLUMN name, ADD COLUMN title TEXT") == ()
    assert ddl("ALTER TABLE t CHANGE name title VARCHAR(20)").column_names == ["id", "title", "qty"]  # type: ignore[union-attr]


def test_a_narrowing_stops_evolve_and_try_evolve_keeps_the_type() -> None:
    steps = ["ALTER TABLE t MODIFY qty BIGINT", "ALTER TABLE t MODIFY qty INT", "ALTER TABLE t MODIFY qty TEXT"]
    with pytest.raises(SchemaChanged, match=r"'ALTER TABLE t MODIFY qty INT' at mysql-bin.000001:200 changes column "
                                            r"qty from bigint \(int64\) to int \(int32\).*'try_evolve'"):
        evolve_history(steps=steps).sink_schema(T, 2)
    tolerant = evolve_history("try_evolve", steps)
    assert tolerant.sink_schema(T, 2).column("qty").arrow == pa.int64()
    assert tolerant.sink_schema(T, 3).column("qty").arrow == pa.int64()
    # rows of the TEXT version: values that cast are kept, the others null (no row-by-row Python)
    text = tolerant.versions(T)[3].schema
    image = pa.array([{"id": i, "name": "n", "qty": q} for i, q in enumerate(["7", "x", None, "-3"])],
                     pa.struct(list(text.arrow_schema())))
    rows = pa.table({"before": pa.nulls(4, image.type), "after": image})
    out = project_rows(rows, tolerant.sink_schema(T, 3))
    assert [r["qty"] for r in out["after"].to_pylist()] == [7, None, None, -3]


def test_postgres_renames_are_inferred_from_the_column_order() -> None:
    def table(*names: str) -> TableSchema:
        return TableSchema(TableId("s", "t"), tuple(Column(n, "int4", "integer", True, arrow=pa.int32())
                                                    for n in names), ("id",), "postgresql")

    assert infer_renames(table("id", "name", "qty"), table("id", "title", "qty")) == (("name", "title"),)
    assert describe(table("id", "name", "qty"), table("id", "title", "qty"), (("name", "title"),)).endswith(
        "renamed column name to title")
    assert infer_renames(table("id", "name", "qty"), table("id", "qty", "note")) == ()  # a drop and an add
    assert infer_renames(table("id", "name"), table("id", "title")) == (), "the last column: cannot be told"


def test_the_behaviours_are_accepted_by_the_config() -> None:
    for behavior in ("evolve", "try_evolve"):
        raw = {"source": {"type": "mysql", "port": 3306, "username": "u", "tables": ["a\\.b"],
                          "schema_change": {"behavior": behavior}},
               "sink": {"path": "/tmp/x"}, "checkpoint": "/tmp/c"}
        assert parse_config(raw, warn_plain_password=False).source.schema_change.behavior == behavior  # type: ignore[attr-defined]


# ---- the Delta tables follow (delta-rs, no server) ---------------------------------------------------

def _rows(schema: TableSchema, images: list[dict[str, Any]], version: int) -> pa.Table:
    struct = pa.struct(list(schema.arrow_schema()))
    n = len(images)
    source = changelog_schema(schema).field("source").type
    return with_schema(pa.table({
        "op": ["c"] * n, "before": pa.nulls(n, struct), "after": pa.array(images, struct),
        "source": pa.nulls(n, source), "ts_ms": pa.array(range(n), pa.int64())}), schema, version)


def _lake(tmp_path: Path) -> tuple[DeltaSinkConfig, SchemaHistory]:
    return DeltaSinkConfig(type="delta", path=str(tmp_path / "lake")), evolve_history()


def test_drops_and_renames_rewrite_the_tables_once(tmp_path: Path) -> None:
    config, history = _lake(tmp_path)
    v0, v4 = history.sink_schema(T, 0), history.sink_schema(T, 4)
    v1 = history.sink_schema(T, 1)
    uris = {kind: config.uri(T, kind) for kind in ("mirror", "changelog")}
    mirror = ensure_table(uris["mirror"], {}, v1, "mirror", mirror_schema(v1))
    write_deltalake(mirror, pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"],
                                      "qty": pa.array([5, 6], pa.int32()), "note": ["x", "y"]}), mode="append")
    log = ensure_table(uris["changelog"], {}, v1, "changelog", changelog_schema(v1))
    changes = _rows(v1, [{"id": 1, "name": "a", "qty": 5, "note": "x"}], 1)
    write_deltalake(log, changes.select(["op", "before", "after", "source", "ts_ms"]).append_column(
        "schema_version", pa.array([1], pa.int32())).cast(changelog_schema(v1)), mode="append")

    for kind, storage in (("mirror", mirror_schema(v4)), ("changelog", changelog_schema(v4))):
        table = ensure_table(uris[kind], {}, v4, kind, storage)  # type: ignore[arg-type]
        version = table.version()
        assert table.transaction_version(APP_SCHEMA) == schema_token(v4)
        assert recorded_schema(table) == v4
        # a replay (or a restart) does nothing again
        assert ensure_table(uris[kind], {}, v4, kind, storage).version() == version  # type: ignore[arg-type]
    assert read_table(uris["mirror"]).to_pylist() == [{"id": 1, "qty": 5, "remark": "x"}, {"id": 2, "qty": 6, "remark": "y"}]
    [row] = read_table(uris["changelog"]).to_pylist()
    assert row["after"] == {"id": 1, "qty": 5, "remark": "x"} and row["schema_version"] == 1
    for kind in ("mirror", "changelog"):
        seen = read_with_every_reader(uris[kind])
        assert {len(rows) for rows in seen.values()} == {2 if kind == "mirror" else 1}, kind
    assert v0.column_names == ["id", "name", "qty"]


def test_a_crash_after_the_rewrite_does_not_move_data_twice(tmp_path: Path) -> None:
    """RENAME a TO b then ADD a: after a crash between the rewrite and the recorded schema, the
    replay must not take the new (null) ``a`` for the renamed column again."""
    config, _ = _lake(tmp_path)
    history = evolve_history(steps=["ALTER TABLE t RENAME COLUMN name TO title, ADD COLUMN name TEXT"])
    v0, v1 = history.sink_schema(T, 0), history.sink_schema(T, 1)
    uri = config.uri(T, "mirror")
    table = ensure_table(uri, {}, v0, "mirror", mirror_schema(v0))
    write_deltalake(table, pa.table({"id": pa.array([1], pa.int32()), "name": ["a"], "qty": pa.array([5], pa.int32())}),
                    mode="append")
    ensure_table(uri, {}, v1, "mirror", mirror_schema(v1))
    table = DeltaTable(uri)
    table.alter.set_table_properties({"spark_cdc.schema": json.dumps(schema_to_dict(v0))},  # a crash before it
                                     raise_if_not_exists=False)
    ensure_table(uri, {}, v1, "mirror", mirror_schema(v1))
    assert read_table(uri).to_pylist() == [{"id": 1, "title": "a", "qty": 5, "name": None}]


def test_a_column_added_first_is_placed_first(tmp_path: Path) -> None:
    config, _ = _lake(tmp_path)
    history = evolve_history(steps=["ALTER TABLE t ADD COLUMN tag TEXT FIRST"])
    v0, v1 = history.sink_schema(T, 0), history.sink_schema(T, 1)
    uri = config.uri(T, "changelog")
    ensure_table(uri, {}, v0, "changelog", changelog_schema(v0))
    table = ensure_table(uri, {}, v1, "changelog", changelog_schema(v1))
    assert [f.name for f in pa.schema(table.schema().to_arrow()).field("after").type] == ["tag", "id", "name", "qty"]


class _DiesAfterRewrites:
    """Hooks of a driver that dies right after a rewrite's commit, before its schema is recorded."""

    def reached(self, point: str) -> None:
        if point == "sink_rewritten":
            raise InjectedFault(point)


@pytest.mark.parametrize("crash", [False, True], ids=["", "crash-after-the-rewrite"])
def test_a_renamed_key_column_stays_the_key(crash: bool, tmp_path: Path) -> None:
    config, _ = _lake(tmp_path)
    history = evolve_history(steps=["ALTER TABLE t RENAME COLUMN id TO key_id", "ALTER TABLE t ADD COLUMN extra INT"])
    v0, v1, v2 = (history.sink_schema(T, v) for v in range(3))
    uri = config.uri(T, "changelog")
    ensure_table(uri, {}, v0, "changelog", changelog_schema(v0))
    if crash:
        with pytest.raises(InjectedFault):
            ensure_table(uri, {}, v1, "changelog", changelog_schema(v1), _DiesAfterRewrites())
        table = DeltaTable(uri)
        assert (recorded_schema(table), current_schema(table)) == (v0, v1), "rewritten, not recorded"
    table = ensure_table(uri, {}, v1, "changelog", changelog_schema(v1))  # with a crash: the restart
    assert json.loads(table.metadata().configuration["spark_cdc.primaryKey"]) == ["key_id"]
    assert recorded_schema(table) == current_schema(table) == v1
    assert _schema_rewrites(Path(uri)) == [schema_token(v1)]
    table = ensure_table(uri, {}, v2, "changelog", changelog_schema(v2))  # an ADD: no rewrite
    assert current_schema(table) == v2, "the rewrite's schema, once recorded, is not read back again"


def test_older_staged_files_of_a_batch_are_rewritten_into_its_schema(tmp_path: Path) -> None:
    config, history = _lake(tmp_path)
    writer = DeltaFileWriter(config)
    v2, v4 = history.sink_schema(T, 2), history.sink_schema(T, 4)
    old = writer.write(v2, _rows(v2, [{"id": 1, "name": "a", "qty": 5, "note": "x"}], 2), "changes")
    new = writer.write(v4, _rows(v4, [{"id": 2, "qty": 6, "remark": "y"}], 4), "changes")
    batch = restage(config, TableBatch(v4, changes=old + new), v4)
    assert batch.changes[1] == new[0], "a file of the batch's schema stays as it is"
    from sinks.delta.files import StagedFile, read_change_files

    rows = read_change_files(config, v4, [StagedFile.from_dict(d) for d in batch.changes])
    assert rows["after"].to_pylist() == [{"id": 1, "qty": 5, "remark": "x"}, {"id": 2, "qty": 6, "remark": "y"}]
    assert rows["schema_version"].to_pylist() == [2, 4]


# ---- against MariaDB, through the job ---------------------------------------------------------------

EVOLVE_STEPS = [  # (DDL, writes after it), interleaved: every row is updated between two DDLs
    ("ALTER TABLE t ADD COLUMN note VARCHAR(20)",
     ["INSERT INTO t (id, name, qty, old, note) VALUES (100, 'a', 1, 'x', 'added')",
      "UPDATE t SET note = CONCAT('n-', id) WHERE id % 2 = 0"]),
    ("ALTER TABLE t MODIFY qty BIGINT",
     ["INSERT INTO t (id, name, qty, old, note) VALUES (101, 'b', 5000000000, 'y', 'wide')",
      "UPDATE t SET qty = qty + 4000000000 WHERE id % 3 = 0"]),
    ("ALTER TABLE t DROP COLUMN old",
     ["INSERT INTO t (id, name, qty, note) VALUES (102, 'c', 2, 'dropped')", "UPDATE t SET qty = qty + 1 WHERE id < 5"]),
    ("ALTER TABLE t RENAME COLUMN name TO title",
     ["INSERT INTO t (id, title, qty, note) VALUES (103, 'd', 3, 'renamed')", "DELETE FROM t WHERE id = 7"]),
]


def _changes(p: Pipeline) -> list[dict[str, Any]]:
    return [r for r in p.changelog("t").to_pylist() if r["op"] != "r"]


def _assert_exact(p: Pipeline, box: Sandbox, database: str, columns: list[str]) -> None:
    """The mirror equals the source with exactly its columns; each change once in the changelog."""
    assert p.mirror("t").schema.names == columns
    assert {r["id"]: r for r in p.mirror("t").to_pylist()} == source_rows(box, database)
    keys = [(r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["op"]) for r in _changes(p)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_evolve_applies_each_ddl_exactly(engine: str, pipeline: Pipeline, mysql_server: Sandbox, database: str,
                                         spark: Any) -> None:
    p = pipeline
    p.source = {"schema_change": {"behavior": "evolve"}}
    p.engine = engine  # delta-spark writes (its mirror has deletion vectors); delta-rs evolves both
    p.run()  # the snapshot
    for i, (statement, writes) in enumerate(EVOLVE_STEPS):
        sql(mysql_server, database, statement, *writes)
        if i % 2:
            p.run()  # two DDLs per run: one batch holds rows on both sides of a DDL
    _assert_exact(p, mysql_server, database, ["id", "title", "qty", "note"])
    assert p.mirror("t").schema.field("qty").type == pa.int64()
    mirror = {r["id"]: r for r in p.mirror("t").to_pylist()}
    assert mirror[1]["title"] == "n1", "the renamed column keeps the values written before the rename"
    # the changelog follows exactly too: old images are rewritten into the current columns
    log = _changes(p)
    assert p.changelog("t").schema.field("after").type.names == ["id", "title", "qty", "note"]
    inserts = {r["after"]["id"]: r for r in log if r["op"] == "c"}
    assert [inserts[100 + k]["schema_version"] for k in range(4)] == [1, 2, 3, 4]
    assert inserts[100]["after"] == {"id": 100, "title": "a", "qty": 1, "note": "added"}
    assert inserts[101]["after"]["qty"] == 5_000_000_000
    assert {r["schema_version"] for r in p.changelog("t").to_pylist() if r["op"] == "r"} == {0}
    for kind in ("t", "t_changelog"):
        seen = read_with_every_reader(str(p.lake / database / kind), spark)
        assert {len(rows) for rows in seen.values()} == {len(seen["delta-rs"])}, kind
        if kind == "t":
            assert {tuple(sorted(rows[0])) for rows in seen.values()} == {("id", "note", "qty", "title")}
    # a restart: the tables' recorded schema (with the column identities) is read back
    sql(mysql_server, database, "INSERT INTO t (id, title, qty, note) VALUES (104, 'e', 4, 'restart')",
        "UPDATE t SET title = 'again' WHERE id = 1")
    p.run()
    _assert_exact(p, mysql_server, database, ["id", "title", "qty", "note"])


def test_a_narrowing_stops_evolve_and_passes_try_evolve(pipeline: Pipeline, mysql_server: Sandbox,
                                                        database: str) -> None:
    p = pipeline
    p.source = {"schema_change": {"behavior": "evolve"}}
    p.run()
    sql(mysql_server, database, "ALTER TABLE t MODIFY name VARCHAR(40)", "ALTER TABLE t MODIFY qty BIGINT",
        "UPDATE t SET qty = 1 WHERE id = 1")
    p.run()
    sql(mysql_server, database, "ALTER TABLE t MODIFY qty INT", "INSERT INTO t VALUES (50, 'x', 7, 'y')")
    with pytest.raises(JobFailed, match=r"'ALTER TABLE t MODIFY qty INT' at mysql-bin\.\d+:\d+ changes column qty "
                                        r"from bigint.*not a widening.*'try_evolve'"):
        p.run()
    assert 50 not in {r["id"] for r in p.mirror("t").to_pylist()}, "nothing after the DDL was written"
    p.source = {"schema_change": {"behavior": "try_evolve"}}
    p.run()
    assert p.mirror("t").schema.field("qty").type == pa.int64(), "try_evolve keeps the wider type"
    _assert_exact(p, mysql_server, database, ["id", "name", "qty", "old"])


@pytest.mark.parametrize("point", ["sink_evolve", "sink_commit"])
def test_a_crash_between_the_schema_change_and_the_data_commit_is_exact(
        point: str, pipeline: Pipeline, mysql_server: Sandbox, database: str) -> None:
    """``sink_evolve``: the changelog was rewritten, the mirror not yet; ``sink_commit``: both
    evolved and the changelog committed, the mirror's rows not yet. The replay finishes the work
    without moving a column twice."""
    _crash_in_the_rename_batch(pipeline, mysql_server, database, point)
    pipeline.run()
    _assert_renamed_exactly(pipeline, mysql_server, database)


def _crash_in_the_rename_batch(p: Pipeline, box: Sandbox, database: str, point: str, after: int = 0) -> None:
    """Under ``evolve``, one batch with RENAME name TO title plus ADD name (the old name re-used),
    then DROP old, and writes around them; the job fails at ``point``."""
    p.source = {"schema_change": {"behavior": "evolve"}}
    p.run()
    sql(box, database, "UPDATE t SET qty = 100 WHERE id = 3",
        "ALTER TABLE t RENAME COLUMN name TO title, ADD COLUMN name INT",
        "INSERT INTO t (id, title, qty, old, name) VALUES (60, 'r', 1, 'o', 9)", "ALTER TABLE t DROP COLUMN old",
        "UPDATE t SET title = 'u' WHERE id = 4")
    p.arm(point, after=after)
    with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
        p.run()


def _assert_renamed_exactly(p: Pipeline, box: Sandbox, database: str) -> None:
    """After :func:`_crash_in_the_rename_batch` and a restart: exact, ``title`` kept its values."""
    _assert_exact(p, box, database, ["id", "title", "qty", "name"])
    assert {r["id"]: r for r in p.mirror("t").to_pylist()}[5] == {"id": 5, "title": "n5", "qty": 5, "name": None}
    assert len([r for r in _changes(p) if r["op"] != "r"]) == 3


def _schema_rewrites(path: Path) -> list[int]:
    """The app-transaction versions of the schema rewrites in the Delta log at ``path``, one per commit."""
    return [a["txn"]["version"] for commit in sorted((path / "_delta_log").glob("*.json"))
            for a in map(json.loads, commit.read_text().splitlines())
            if "txn" in a and a["txn"]["appId"] == APP_SCHEMA]


@pytest.mark.parametrize(("table", "after"), [("t_changelog", 0), ("t", 1)], ids=["changelog", "mirror"])
def test_a_crash_right_after_a_rewrite_commit_rewrites_nothing_again(table: str, after: int, pipeline: Pipeline,
                                                                     mysql_server: Sandbox, database: str) -> None:
    """RENAME name TO title with ADD name (the old name re-used), then DROP old: the job fails at
    ``sink_rewritten`` of the changelog (rewritten first) or of the mirror, after the rewrite's
    commit and before its schema is recorded. The restart takes the changelog's schema as the
    rewritten one (not back to the recorded one), finds each rewrite's app transaction, rewrites
    nothing again (``title`` keeps its values, not the new null ``name``'s) and records the schema."""
    p = pipeline
    _crash_in_the_rename_batch(p, mysql_server, database, "sink_rewritten", after)
    path = p.lake / database / table
    [token] = _schema_rewrites(path)
    before = recorded_schema(DeltaTable(str(path)))
    assert before is not None and before.column_names == ["id", "name", "qty", "old"], "failed before the record"
    p.run()
    _assert_renamed_exactly(p, mysql_server, database)
    images = [r["before"] for r in p.changelog("t").to_pylist() if r["op"] == "u"]
    assert images and all(i["title"] == f"n{i['id']}" for i in images), "old images keep the renamed values"
    for name in ("t", "t_changelog"):
        rewritten = p.lake / database / name
        recorded = recorded_schema(DeltaTable(str(rewritten)))
        assert recorded is not None and recorded.column_names == ["id", "title", "qty", "name"]
        assert _schema_rewrites(rewritten) == [token] == [schema_token(recorded)], \
            f"{name}: one rewrite commit, its schema recorded"


def test_kafka_messages_under_evolve_have_each_versions_exact_schema(
        pipeline: Pipeline, mysql_server: Sandbox, database: str, kafka_broker: Any) -> None:
    from kafka_broker import read_topic
    from pipeline import kafka_sink

    p = pipeline
    prefix = f"evo{database}"
    p.source = {"schema_change": {"behavior": "evolve"}}
    p.sinks = [kafka_sink(p, kafka_broker.bootstrap_servers, prefix)]
    p.run()
    for statement, writes in EVOLVE_STEPS:
        sql(mysql_server, database, statement, *writes)
    p.run()
    fields: dict[int, list[str]] = {}
    for record in read_topic(kafka_broker.bootstrap_servers, f"{prefix}.{database}.t"):
        message = json.loads(record.value) if record.value is not None else {"payload": {"op": None}}
        if message["payload"]["op"] == "c":
            image = next(f for f in message["schema"]["fields"] if f["field"] == "after")
            fields[message["payload"]["after"]["id"]] = [f["field"] for f in image["fields"]]
    assert fields[100] == ["id", "name", "qty", "old", "note"]
    assert fields[102] == ["id", "name", "qty", "note"], "evolve: the dropped column leaves the messages"
    assert fields[103] == ["id", "title", "qty", "note"]


# ---- Postgres: Relation messages, no DDL text --------------------------------------------------------

def test_postgres_evolve_adds_drops_renames_and_widens(pg_pipeline: Any) -> None:
    """Add, widen, drop, and a rename of a column in the middle (told from the column order), each
    followed by writes; then the mirror equals the source with exactly its columns."""
    from test_schema_evolution_postgres import changes, rows_now
    from test_schema_evolution_postgres import sql as pg_sql

    p = pg_pipeline
    p.source = {"schema_change": {"behavior": "evolve"}}
    p.run()
    pg_sql(p, "ALTER TABLE t ADD COLUMN note varchar(20)", "UPDATE t SET note = 'n-' || id WHERE id < 10",
           "ALTER TABLE t ALTER COLUMN qty TYPE bigint", "UPDATE t SET qty = qty + 5000000000 WHERE id = 2",
           "ALTER TABLE t DROP COLUMN old", "INSERT INTO t (id, name, qty, note) VALUES (102, 'c', 2, 'dropped')")
    p.run()
    pg_sql(p, "ALTER TABLE t RENAME COLUMN name TO title",
           "INSERT INTO t (id, title, qty, note) VALUES (103, 'd', 3, 'renamed')", "DELETE FROM t WHERE id = 7")
    p.run()
    mirror = p.mirror("t")
    assert mirror.schema.names == ["id", "title", "qty", "note"] and mirror.schema.field("qty").type == pa.int64()
    assert {r["id"]: r for r in mirror.to_pylist()} == rows_now(p)
    assert {r["id"]: r for r in mirror.to_pylist()}[1]["title"] == "n1", "renamed with its values"
    log = changes(p)
    keys = [(r["source"]["commit_lsn"], r["source"]["lsn"], r["op"]) for r in log]
    assert len(keys) == len(set(keys)) == 10 + 1 + 1 + 1 + 1
    assert {r["after"]["id"]: r["schema_version"] for r in log if r["op"] == "c"} == {102: 3, 103: 4}


@pytest.mark.slow  # five runs of the job under a random writer
def test_evolve_among_random_writers_is_exact(pipeline: Pipeline, mysql_server: Sandbox, database: str,
                                              spark: Any) -> None:
    """A random writer (inserts, updates, deletes, key updates) on ``w`` while the job runs and
    ADD, widen, RENAME and DROP COLUMN come between its statements (the writer paused for each);
    the snapshot runs under writes. Then the mirror equals the source with exactly its columns,
    every change is in the changelog once (present iff after its chunk's HW), and every reader
    reads both tables."""
    from ddl_writers import DdlRandomWriter, wait_for_statements
    from pipeline import assert_changelog_exact, writing

    p = pipeline
    p.source = {"schema_change": {"behavior": "evolve"}}
    sql(mysql_server, database, "CREATE TABLE w (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        "INSERT INTO w VALUES " + ",".join(f"({i}, 'v{i}', {i})" for i in range(0, 600, 2)))
    writer = DdlRandomWriter(mysql_server, database, "w", seed=23, key_space=600, pause_s=PACE_S)
    with writing(writer):
        wait_for_statements(writer, 30)
        p.run()  # the snapshot, under writes
        writer.alter("ALTER TABLE w ADD COLUMN note VARCHAR(20) AFTER id", text=("v", "note"))
        wait_for_statements(writer, 40)
        writer.alter("ALTER TABLE w MODIFY n BIGINT", "ALTER TABLE w MODIFY v VARCHAR(80)", wide=True)
        wait_for_statements(writer, 40)
        p.run()
        writer.alter("ALTER TABLE w RENAME COLUMN v TO title", text=("title", "note"))
        wait_for_statements(writer, 40)
        writer.alter("ALTER TABLE w DROP COLUMN note", text=("title",))
        wait_for_statements(writer, 40)
        p.run()
        wait_for_statements(writer, 40)
    assert writer.error is None, writer.error
    p.run()
    mirror = p.mirror("w")
    assert mirror.schema.names == ["id", "title", "n"] and mirror.schema.field("n").type == pa.int64()
    source = {r["id"]: r for r in p.source_rows("w")}
    assert {r["id"]: r for r in mirror.to_pylist()} == source
    assert_changelog_exact(p, "w", p.schemas()[TableId(database, "w")])
    assert p.changelog("w").schema.field("after").type.names == ["id", "title", "n"]
    for kind in ("w", "w_changelog"):
        seen = read_with_every_reader(str(p.lake / database / kind), spark)
        assert {len(rows) for rows in seen.values()} == {len(seen["delta-rs"])}, kind


# ---- a SIGKILL right after the last DDL (a driver process) ------------------------------------------

MIX = [(statements, columns) for steps in DDL_MIX for _, statements, columns in steps]  # ADD, widen, RENAME, DROP
APPLIED = [  # the mirror of w once the driver applied each DDL of MIX but the last: its columns, n a bigint
    (["id", "v", "n", "note"], False), (["id", "v", "n", "note"], True), (["id", "title", "n", "note"], True)]


def _delta_schema(p: Pipeline, table: str) -> pa.Schema:
    """The schema of the lake's Delta table ``<database>/<table>`` as it stands."""
    return pa.schema(DeltaTable(str(p.lake / p.database / table)).schema().to_arrow())


def _mirror_shows(p: Pipeline, columns: list[str], wide: bool) -> bool:
    """The mirror of ``w`` has ``columns`` in this order, with ``n`` a bigint iff ``wide``."""
    schema = _delta_schema(p, "w")
    return schema.names == columns and (schema.field("n").type == pa.int64()) == wide


@pytest.mark.slow  # a snapshot run, one driver process killed, a catch-up run
def test_evolve_among_random_writers_just_before_a_sigkill_is_exact(pipeline: Pipeline, mysql_server: Sandbox,
                                                                     database: str) -> None:
    """DDL_MIX's ADD, widen, RENAME and DROP COLUMN among a random writer on ``w`` under ``evolve``,
    streamed by a driver process that is SIGKILLed in the DROP's evolution: the changelog already
    rewritten without ``note``, the mirror not yet (held by a pause at ``sink_evolve``). The
    catch-up run brings the mirror to the schema the changelog recorded and replays the batch. Then
    the mirror is the source with exactly its columns (the renamed column with its values); the
    changelog holds each change once, in the current columns, each row with the schema version in
    force at its position; replayed up to each DDL it is the source then."""
    from ddl_writers import DdlRandomWriter, change_versions, replay_changelog, wait_for_statements
    from driver_process import Driver
    from pipeline import assert_changelog_exact, writing

    p = pipeline
    p.source = {"schema_change": {"behavior": "evolve"}}
    sql(mysql_server, database, "CREATE TABLE w (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        "INSERT INTO w VALUES " + ",".join(f"({i}, 'v{i}', {i})" for i in range(0, 300, 2)))
    p.run()  # the snapshot, before any write: every change after it must flow
    writer = DdlRandomWriter(mysql_server, database, "w", seed=29, key_space=250, pause_s=PACE_S)  # rows 256-298 stay as read
    *steps, (last, last_columns) = MIX
    cuts = []
    with writing(writer):
        driver = Driver(p.raw_config(), p.workdir)
        try:
            driver.wait_for_batches(1)
            for (statements, columns), (names, wide) in zip(steps, APPLIED, strict=True):
                cuts.append(writer.alter(*statements, **columns))
                driver.wait_until(functools.partial(_mirror_shows, p, names, wide), f"the mirror after {statements[0]!r}")
            driver.pause_at("sink_evolve")
            cuts.append(writer.alter(*last, **last_columns))
            driver.wait_until(lambda: driver.paused("sink_evolve"), f"the sinks' evolution for {last[0]!r}")
        finally:
            driver.kill()
        wait_for_statements(writer, 20)  # changes under the last DDL, for the catch-up run
    assert writer.error is None, writer.error
    at_kill = _delta_schema(p, "w").names, _delta_schema(p, "w_changelog").field("after").type.names
    assert at_kill == (["id", "title", "n", "note"], ["id", "title", "n"]), "killed between the two tables' evolution"
    p.run()  # restart from the checkpoint and catch up

    table_id = TableId(database, "w")
    schema = p.schemas()[table_id]
    assert schema.column_names == ["id", "title", "n"]
    mirror = p.mirror("w")
    assert mirror.schema.names == ["id", "title", "n"] and mirror.schema.field("n").type == pa.int64()
    rows = {r["id"]: r for r in mirror.to_pylist()}
    assert rows == {r["id"]: r for r in p.source_rows("w")}
    assert [rows[i]["title"] for i in range(256, 300, 2)] == [f"v{i}" for i in range(256, 300, 2)], \
        "the rename moved the values the snapshot read"
    assert_changelog_exact(p, "w", schema)
    log = p.changelog("w").to_pylist()
    assert p.changelog("w").schema.field("after").type.names == ["id", "title", "n"]
    change_versions(p, table_id, log)  # every row carries its version: the snapshot's 0, a change's the one then
    assert {r["schema_version"] for r in log} == {0, 1, 3, 4, 5}, "version 2 (n BIGINT) has none: v widened right after"
    assert replay_changelog(log, "id") == rows, "the changelog replayed is not the mirror"
    for cut in cuts:  # the table before each DDL, in the current columns (v renamed to title, note dropped)
        then = {r["id"]: {"id": r["id"], "title": r["title"] if "title" in r else r["v"], "n": r["n"]} for r in cut.rows}
        assert replay_changelog(log, "id", upto=cut.offset) == then, f"the changelog replayed up to {cut.ddl[0]!r}"
