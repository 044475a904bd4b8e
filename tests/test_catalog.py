"""Tables by name, and the platform's errors: what a user sees through the CLI.

* ``python -m cdc run`` registers every mirror and changelog in the job's catalog (a Hive
  metastore on embedded Derby under ``<state_dir>/catalog``), which outlives the process;
  ``python -m cdc sql`` queries them by name as a table, JSON lines or CSV.
* A name that already belongs to another location is refused before anything is written.
* Missing jars, and jars built for another Spark, are one line that names the fix.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from cdc.app.sandbox.mysql import Sandbox
from cdc.model.schema import Column, TableId, TableSchema
from cdc.model.spark_conf import OWN_CATALOG
from cdc.spark.jars import VersionMismatch, check_versions
from sinks.delta import catalog as delta_catalog
from sinks.delta import sink as delta_sink
from sinks.delta.catalog import RECORD, TableNameTaken, forget_names, location, names_recorded
from sinks.delta.config import DeltaSinkConfig

pytestmark = pytest.mark.slow  # each CLI call starts a Spark driver

ROOT = Path(__file__).resolve().parents[1]
PASSWORD_ENV = "TEST_CATALOG_PASSWORD"


def job_file(path: Path, box: Sandbox, database: str, lake: Path, **sink: Any) -> Path:
    raw = {"source": {"hostname": box.cdc.host, "port": box.cdc.port, "username": box.cdc.user,
                      "password": "${" + PASSWORD_ENV + "}", "tables": [f"{database}\\..*"],
                      "server_id": "5420-5423"},
           "sink": {"type": "delta", "path": str(lake), **sink},
           "checkpoint": str(path.parent / "checkpoint")}
    path.write_text(yaml.safe_dump(raw))
    return path


def cdc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_CDC_SPARK_LOG_LEVEL": "ERROR", **(env or {})}
    return subprocess.run([sys.executable, "-m", "cdc", *args], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch, mysql_server: Sandbox) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mysql_server.cdc.password)


def test_tables_by_name_outlive_the_job_cdc_sql_prints_them_and_a_taken_name_is_refused(
    tmp_path: Path, mysql_server: Sandbox, database: str, admin: Any
) -> None:
    """One test, as each CLI call starts a Spark driver with the catalog (about 30 s of CPU here)."""
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(20)))
    first = job_file(tmp_path / "job.yaml", mysql_server, database, tmp_path / "lake")
    config = str(first)
    assert (run := cdc("run", "--config", config, "--once")).returncode == 0, run.stderr[-3000:]
    assert f"registered 2 tables by name: {database}.t, {database}.t_changelog" in run.stderr
    with admin.cursor() as cur:
        cur.execute("UPDATE t SET v = 'changed' WHERE id = 3")
        cur.execute("DELETE FROM t WHERE id >= 15")
    assert (run := cdc("run", "--config", config, "--once")).returncode == 0, run.stderr[-3000:]
    # the restart finds its names in the catalog's record and leaves the metastore alone
    assert "the mirrors and changelogs of 1 table(s) are registered by name already" in run.stderr
    assert "registered 2 tables by name" not in run.stderr

    # the same job's checkpoint (so its catalog) with another lake: the names are taken
    moved = job_file(tmp_path / "moved.yaml", mysql_server, database, tmp_path / "other-lake")
    refused = cdc("run", "--config", str(moved), "--once")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"error: the catalog name {database}.t already belongs to the table at" in refused.stderr
    assert "sink.catalog_prefix" in refused.stderr
    assert not (tmp_path / "other-lake").exists(), "nothing may be written"
    prefixed = job_file(tmp_path / "prefixed.yaml", mysql_server, database, tmp_path / "other-lake",
                        catalog_prefix="copy_")  # the fix the message names
    assert (run := cdc("run", "--config", str(prefixed), "--once")).returncode == 0, run.stderr[-3000:]
    assert f"registered 2 tables by name: copy_{database}.t, copy_{database}.t_changelog" in run.stderr

    # nothing to do, names recorded: the run decides and reports that without starting Spark
    assert (run := cdc("run", "--config", config, "--once")).returncode == 0, run.stderr[-3000:]
    assert "(Spark not started)" in run.stderr and "0 batch(es)" in run.stdout, run.stderr[-3000:]

    # the first names still read the first lake
    table = cdc("sql", "--config", config, f"SELECT count(*) AS n FROM {database}.t")
    assert table.returncode == 0, table.stderr[-3000:]
    assert table.stdout.splitlines()[1:4] == ["| n  |", "+----+", "| 15 |"], table.stdout
    assert table.stdout.endswith("(1 row)\n")

    as_json = cdc("sql", "--config", config, "--format", "json", f"SELECT id, v FROM {database}.t ORDER BY id")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert rows == [{"id": i, "v": "changed" if i == 3 else f"v{i}"} for i in range(15)]

    catalog = str(tmp_path / "checkpoint_state" / "catalog")  # --catalog needs no job file
    assert not (Path(catalog) / RECORD).exists(), "cdc sql may change the names: the next start asks again"
    as_csv = cdc("sql", "--catalog", catalog, "--format", "csv",
                 f"SELECT op, count(*) AS n FROM {database}.t_changelog GROUP BY op ORDER BY op")
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [["op", "n"], ["d", "5"], ["r", "20"], ["u", "1"]]

    bad = cdc("sql", "--config", config, f"SELECT nope FROM {database}.t")
    last = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode == 2 and last.startswith("error: the query failed: [UNRESOLVED_COLUMN"), bad.stderr
    assert "nope" in last and "Traceback" not in bad.stderr and '"level": "ERROR"' not in bad.stderr


def test_missing_jars_stop_the_job_with_one_line_that_names_make_setup(
    tmp_path: Path, mysql_server: Sandbox, database: str, admin: Any
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    config = job_file(tmp_path / "job.yaml", mysql_server, database, tmp_path / "lake")
    empty = tmp_path / "no-jars"
    empty.mkdir()
    run = cdc("run", "--config", str(config), "--once", env={"SPARK_CDC_JARS": str(empty)})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"error: no jars in {empty}/spark: run `make setup` (or scripts/jars.sh) once to resolve them from "
        "Maven Central, or point SPARK_CDC_JARS at a folder that has them"], run.stderr
    assert not (tmp_path / "lake").exists()


def test_delta_jars_built_for_another_spark_name_both_versions() -> None:
    jars = ["/x/delta-spark_2.13-4.4.0.jar", "/x/delta-storage-4.4.0.jar"]
    check_versions(jars, spark_version="4.2.0")  # the pinned pair
    with pytest.raises(VersionMismatch) as info:
        check_versions(jars, spark_version="4.1.1")
    message = str(info.value)
    assert "built for Spark 4.2.0" in message and "pyspark 4.1.1 is installed" in message
    assert "pip install pyspark==4.2.0" not in message and "install pyspark==4.2.0" in message


def test_a_relative_sink_path_is_registered_where_the_job_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sink.path: ./lake`` (as in configs/example.yaml and the quick start) names the folder the
    job wrote, not one under the catalog's warehouse, where Spark would resolve a relative location."""
    monkeypatch.chdir(tmp_path)
    names = delta_catalog._names(DeltaSinkConfig(path="./lake"), one_table("shop"))
    assert [uri for _, _, uri in names] == [str(tmp_path / "lake/shop/t"), str(tmp_path / "lake/shop/t_changelog")]
    s3 = delta_catalog._names(DeltaSinkConfig(path="s3://bucket/lake"), one_table("shop"))
    assert s3[0][2] == "s3://bucket/lake/shop/t"


def test_a_names_location_comes_from_the_metastore_without_loading_the_delta_table(
    spark: Any, tmp_path: Path
) -> None:
    """The job asks for each of its names at every start; loading the table behind each name cost
    2.8 s a name (its log and state). So the answer holds with the table's files gone."""
    path = tmp_path / "mirror"
    spark.range(3).write.format("delta").save(str(path))
    spark.sql("CREATE DATABASE IF NOT EXISTS cat_db")
    spark.sql(f"CREATE TABLE cat_db.t_x USING DELTA LOCATION '{path}'")
    spark.sql("CREATE OR REPLACE VIEW cat_db.v AS SELECT 1 AS one")
    shutil.rmtree(path)
    try:
        assert location(spark, "cat_db", "t_x") == path.as_uri().replace("file:///", "file:/")
        assert location(spark, "cat_db", "absent") is None
        assert location(spark, "no_such_db", "t_x") is None
        assert location(spark, "cat_db", "v") == ""  # a view: the name is taken, and has no files
    finally:
        spark.sql("DROP DATABASE cat_db CASCADE")


def _entry_fields(spark: Any, db: str, table: str) -> dict[str, str]:
    """What the catalog holds for ``db.table``, as Spark describes an entry, less what differs
    between two tables (their names, locations and times)."""
    entry = spark._jsparkSession.sharedState().externalCatalog().getTable(db, table)
    fields = dict(line.split(": ", 1) for line in str(entry.toString()).splitlines()[1:] if ": " in line)
    fields.update(tracks_partitions=str(entry.tracksPartitionsInCatalog()), schema=entry.schema().json(),
                  storage_properties=str(entry.storage().properties()), properties=str(entry.properties()))
    for key in ("Table", "Location", "Created Time", "Last Access"):
        fields.pop(key, None)
    return fields


def test_the_own_catalogs_entries_are_delta_sparks_own_written_without_loading_the_table(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a local job's own catalog the sink writes each name's entry itself: delta-spark's CREATE
    TABLE first loads the table (2.8 CPU s of the driver JVM for a job's first name). The entry is
    the one that statement writes, and a Spark whose catalog classes differ, or whose catalog
    refuses the entry, gets the statement."""
    from deltalake import write_deltalake

    lake = tmp_path / "lake"
    for name in ("by_sql", "direct", "fallback"):
        write_deltalake(str(lake / name), pa.table({"id": pa.array([1, 2, 3], pa.int32()), "v": ["a", "b", "c"]}))
    spark.sql("CREATE DATABASE IF NOT EXISTS own_db")
    spark.conf.set(OWN_CATALOG, str(tmp_path / "catalog"))
    try:
        spark.sql(f"CREATE TABLE own_db.by_sql USING DELTA LOCATION '{lake / 'by_sql'}'")
        (lake / "direct").rename(lake / "away")  # the entry is written without reading the table
        delta_catalog._create_table(spark, "own_db", "direct", (lake / "direct").as_uri())
        (lake / "away").rename(lake / "direct")
        assert _entry_fields(spark, "own_db", "direct") == _entry_fields(spark, "own_db", "by_sql")
        assert location(spark, "own_db", "direct") == (lake / "direct").as_uri().replace("file:///", "file:/")
        rows = spark.sql("SELECT id, v FROM own_db.direct ORDER BY id").collect()
        assert [tuple(r) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]
        assert [r.col_name for r in spark.sql("DESCRIBE TABLE own_db.direct").collect()][:2] == ["id", "v"]

        def other_spark(*args: Any, **kwargs: Any) -> Any:
            raise ValueError("org.apache.spark.sql.catalyst.catalog.CatalogTable has no parameter ['provider']")

        monkeypatch.setattr(delta_catalog, "_case_class", other_spark)
        assert delta_catalog.delta_entry(spark, "own_db", "fallback", (lake / "fallback").as_uri()) is None
        delta_catalog._create_table(spark, "own_db", "fallback", (lake / "fallback").as_uri())
        assert _entry_fields(spark, "own_db", "fallback") == _entry_fields(spark, "own_db", "by_sql")
        spark.sql("DROP TABLE own_db.fallback")  # an external table: its files stay

        monkeypatch.setattr(delta_catalog, "delta_entry", lambda *args: spark._jvm.java.lang.Object())
        delta_catalog._create_table(spark, "own_db", "fallback", (lake / "fallback").as_uri())  # refused: the statement
        assert _entry_fields(spark, "own_db", "fallback") == _entry_fields(spark, "own_db", "by_sql")
    finally:
        spark.conf.unset(OWN_CATALOG)
        spark.sql("DROP DATABASE IF EXISTS own_db CASCADE")


def one_table(db: str) -> dict[TableId, TableSchema]:
    return {TableId(db, "t"): TableSchema(
        TableId(db, "t"), (Column("id", "int", "int", False, arrow=pa.int32()),), ("id",), "mysql")}


def test_a_restart_whose_names_the_own_catalog_records_asks_the_metastore_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local job's catalog is its own: the sink records what it registered there, and a restart
    with the same names at the same locations skips the metastore (3 s of a 21 s restart here).
    A name at another location, or a record that `cdc sql` deleted, is checked again."""
    schemas = one_table("rec_db")
    config = DeltaSinkConfig(path=str(tmp_path / "lake"))
    catalog = tmp_path / "catalog"
    (catalog / "metastore_db").mkdir(parents=True)  # where catalog_conf keeps the metastore
    spark.conf.set(OWN_CATALOG, str(catalog))

    def opened(config: DeltaSinkConfig) -> None:
        sink = delta_sink.DeltaSink(config, "job", spark=spark)
        try:
            sink.open(schemas)
        finally:
            sink.close()

    try:
        opened(config)  # registers, and records
        assert spark.catalog.tableExists("rec_db.t") and spark.catalog.tableExists("rec_db.t_changelog")
        assert names_recorded(spark, config, schemas)

        def no_metastore(*args: Any) -> None:
            raise AssertionError("the metastore was asked for recorded names")

        monkeypatch.setattr(delta_sink, "check_names", no_metastore)
        opened(config)
        monkeypatch.undo()

        moved = DeltaSinkConfig(path=str(tmp_path / "other-lake"))
        assert not names_recorded(spark, moved, schemas)
        with pytest.raises(TableNameTaken):
            opened(moved)
        assert not (tmp_path / "other-lake").exists()

        forget_names(catalog)
        assert not names_recorded(spark, config, schemas)
        spark.conf.unset(OWN_CATALOG)  # a shared catalog (spark-submit's) is asked every time
        opened(config)
        assert not (catalog / RECORD).exists()
    finally:
        spark.conf.unset(OWN_CATALOG)
        spark.sql("DROP DATABASE IF EXISTS rec_db CASCADE")


class HeldRegistration:
    """The sink's background registration, held at its start until :attr:`release` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.register = delta_catalog.register_tables
        monkeypatch.setattr(delta_catalog, "register_tables", self.held)

    def held(self, *args: Any) -> list[str]:
        self.entered.set()
        self.release.wait(timeout=60)
        return self.register(*args)


def test_names_are_registered_while_the_job_goes_on_and_a_failure_stops_its_next_commit(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of the job reads the names, and each CREATE TABLE reads its table's log: the sink
    registers them in the background once the check has passed, and waits for them at close."""
    schemas, config = one_table("bg_db"), DeltaSinkConfig(path=str(tmp_path / "lake"))
    held = HeldRegistration(monkeypatch)
    sink = delta_sink.DeltaSink(config, "job", spark=spark)
    try:
        sink.open(schemas)  # returns while the names are still being registered
        assert held.entered.wait(timeout=60)
        assert not spark.catalog.tableExists("bg_db.t")
    finally:
        held.release.set()
        sink.close()  # waits for them
    try:
        assert spark.catalog.tableExists("bg_db.t") and spark.catalog.tableExists("bg_db.t_changelog")

        def broken(*args: Any) -> list[str]:
            raise RuntimeError("the metastore went away")

        monkeypatch.setattr(delta_catalog, "register_tables", broken)
        spark.sql("DROP DATABASE bg_db CASCADE")
        sink = delta_sink.DeltaSink(config, "job", spark=spark)
        sink.open(schemas)
        assert sink.registration is not None
        deadline = time.monotonic() + 60
        while sink.registration.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match="the metastore went away"):
            sink.commit(0, [])  # before it writes anything of the batch
        sink.close()  # raised once
    finally:
        spark.sql("DROP DATABASE IF EXISTS bg_db CASCADE")


def test_a_name_taken_while_the_sink_registers_in_the_background_is_refused(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sinks of a job with the same names at two lakes: the second is checked while the first
    still registers, so the check passes for both; whichever registers second is refused."""
    schemas = one_table("race_db")
    first, second = (DeltaSinkConfig(path=str(tmp_path / lake)) for lake in ("lake-a", "lake-b"))
    held = HeldRegistration(monkeypatch)
    held_sink = delta_sink.DeltaSink(first, "job", spark=spark)
    try:
        held_sink.open(schemas)  # checked; registers once released
        assert held.entered.wait(timeout=60)
        monkeypatch.setattr(delta_catalog, "register_tables", held.register)
        other = delta_sink.DeltaSink(second, "job", spark=spark)
        other.open(schemas)  # checked too: the first has registered nothing yet
        other.close()
        assert location(spark, "race_db", "t") == (tmp_path / "lake-b" / "race_db" / "t").as_uri().replace(
            "file:///", "file:/")
        held.release.set()
        with pytest.raises(TableNameTaken, match=r"the catalog name race_db\.t already belongs"):
            held_sink.close()
    finally:
        held.release.set()
        spark.sql("DROP DATABASE IF EXISTS race_db CASCADE")
