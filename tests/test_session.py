"""The job's local session: a light driver JVM, unless a sink merges in the JVM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdc.app.config import parse_config
from cdc.app.runner import jvm_merges
from cdc.spark.session import (
    CHECKPOINT_MANAGER,
    FILE_SYSTEM_CHECKPOINTS,
    LIGHT_JVM_OPTIONS,
    fork_free_checkpoints,
    jvm_archive,
    jvm_options,
)

SOURCE = {"username": "cdc", "password": "pw", "tables": ["shop\\..*"]}


def _config(*sinks: dict[str, Any]) -> Any:
    return parse_config({"source": SOURCE, "sink": list(sinks), "checkpoint": "./cp"}, warn_plain_password=False)


def test_only_a_delta_spark_mirror_keeps_the_jvm_defaults() -> None:
    assert not jvm_merges(_config({"type": "delta", "path": "./lake"}))  # delta-rs, the default engine
    assert not jvm_merges(_config({"type": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topic_prefix": "t"}))
    assert jvm_merges(_config({"type": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topic_prefix": "t"},
                              {"type": "delta", "path": "./lake", "engine": "delta-spark"}))


CATALOG = "the job's catalog"


@pytest.mark.parametrize("light, catalog", [(True, True), (False, True), (True, False)])
def test_the_light_jvm_options_reach_the_driver_jvm(light: bool, catalog: bool, tmp_path: Any) -> None:
    """The options go through spark-submit's launch of the JVM, not only into the conf, and they
    share the setting with the catalog's Derby properties (a job's session has both); the light
    JVM's SQL runs interpreted (Janino compiles nothing for a query). The catalog's folder has a
    space and a quote in its name: each option stays one argument of the JVM."""
    where = repr(str(tmp_path / CATALOG)) if catalog else None
    code = ("from cdc.spark.session import local_session\n"
            f"s = local_session('t', parallelism=1, light_jvm={light}, catalog_dir={where})\n"
            "import json\n"
            "print(json.dumps(list(s._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())))\n"
            "codegen = s._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()\n"
            "before = codegen.getCount()\n"
            "s.range(3).selectExpr('id * 2 AS x').where('x > 1').collect()\n"
            "print(codegen.getCount() - before)\n"
            "s.stop()\n")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}  # the tests' own JVM flags
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    jvm, compiled = out.stdout.splitlines()[-2:]
    args = json.loads(jvm)
    assert all(flag in args for flag in LIGHT_JVM_OPTIONS.split()) == light, args
    assert (int(compiled) == 0) == light, compiled  # Janino compiles the query's code in the default JVM only
    if jvm_archive() is not None:  # `make setup` built it: every local session's JVM maps it
        assert f"-XX:SharedArchiveFile={jvm_archive()}" in args, args
    assert (f"-Dderby.system.home={tmp_path / CATALOG}" in args) == catalog, args


def test_a_catalog_session_leaves_nothing_in_the_jvms_temp_folder(tmp_path: Path) -> None:
    """Hive's per-session resources directory goes to the catalog's directory, not to a new
    ``<uuid>_resources`` in the temp folder that outlives the process."""
    temp, catalog = tmp_path / "tmp", tmp_path / "catalog"
    temp.mkdir()
    code = ("from cdc.spark.session import local_session\n"
            f"s = local_session('t', parallelism=1, light_jvm=True, catalog_dir={str(catalog)!r})\n"
            "s.sql('SHOW TABLES').collect()\n"
            "s.stop()\n")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-Djava.io.tmpdir={temp}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (catalog / "resources").is_dir()  # Hive did make its directory, and made it here
    assert not list(temp.glob("*_resources")), list(temp.iterdir())


def test_every_local_session_maps_the_environments_class_archive_when_there_is_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    assert jvm_options(True, tmp_path) == LIGHT_JVM_OPTIONS
    assert jvm_options(False, tmp_path) == ""
    (tmp_path / "spark-classes.jsa").write_bytes(b"")
    mapped = [f"-XX:SharedArchiveFile={tmp_path / 'spark-classes.jsa'}", "-Xlog:cds=off,cds+dynamic=off"]
    assert jvm_options(True, tmp_path).split() == [*LIGHT_JVM_OPTIONS.split(), *mapped]
    assert jvm_options(False, tmp_path).split() == mapped
    blank = tmp_path / "a b"
    blank.mkdir()
    (blank / "spark-classes.jsa").write_bytes(b"")
    assert jvm_options(True, blank) == LIGHT_JVM_OPTIONS  # Spark would cut the path at the blank
    # scripts/jvm_archive.py's JVM dumps an archive: the JDK would refuse to on top of another
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", f"-XX:ArchiveClassesAtExit={tmp_path / 'new.jsa'}")
    assert jvm_options(False, tmp_path) == ""
    assert jvm_options(True, tmp_path) == LIGHT_JVM_OPTIONS


def test_an_own_spark_conf_dir_is_named_as_voiding_the_class_archive(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Spark puts SPARK_CONF_DIR first on the JVM's class path, which then no longer matches the
    archive's: the JVM drops the archive quietly (README), so the session says it."""
    import pyspark

    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    (tmp_path / "spark-classes.jsa").write_bytes(b"")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    with caplog.at_level("WARNING", logger="cdc.spark.session"):
        jvm_options(True, tmp_path)
    assert [r.getMessage() for r in caplog.records if "SPARK_CONF_DIR" in r.getMessage()
            and "SPARK_SUBMIT_OPTS" in r.getMessage()], caplog.text
    caplog.clear()
    for quiet in (str(Path(pyspark.__file__).parent / "conf"), ""):  # PySpark's default folder, or none
        monkeypatch.setenv("SPARK_CONF_DIR", quiet)
        with caplog.at_level("WARNING", logger="cdc.spark.session"):
            jvm_options(True, tmp_path)
            jvm_options(True, tmp_path / "no-archive")  # nothing to void
        assert not caplog.records, caplog.text
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    with caplog.at_level("WARNING", logger="cdc.spark.session"):
        jvm_options(True, tmp_path / "no-archive")
    assert not caplog.records, caplog.text


# Three micro-batches of a file stream, available-now, into a no-op foreachBatch, on a fresh
# session; prints the readlink calls logged while the query ran, and the batches.
THREE_BATCHES = """
import os, sys
from cdc.spark.session import fork_free_checkpoints, local_session
work, log, fork_free = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
spark = local_session("t", parallelism=1, light_jvm=True)
os.makedirs(f"{work}/in")
for i in range(3):
    with open(f"{work}/in/{i}.json", "w") as f:
        f.write('{"a": 1}\\n')
if fork_free:
    fork_free_checkpoints(spark, f"{work}/cp")
before = sum(1 for _ in open(log)) if os.path.exists(log) else 0
df = spark.readStream.schema("a INT").option("maxFilesPerTrigger", 1).json(f"{work}/in")
query = df.writeStream.foreachBatch(lambda batch, batch_id: None).option("checkpointLocation", f"{work}/cp")
query = query.trigger(availableNow=True).start()
query.awaitTermination()
after = sum(1 for _ in open(log)) if os.path.exists(log) else 0
print(after - before, sum(name.isdigit() for name in os.listdir(f"{work}/cp/commits")))
spark.stop()
"""


def _readlinks_of_three_batches(tmp_path: Path, fork_free: bool) -> tuple[int, int]:
    """Run :data:`THREE_BATCHES` with a ``readlink`` first on PATH that logs each call."""
    spy, log, work = tmp_path / "bin", tmp_path / "readlink.log", tmp_path / ("ff" if fork_free else "default")
    spy.mkdir(exist_ok=True)
    (spy / "readlink").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("readlink")} "$@"\n')
    (spy / "readlink").chmod(0o755)
    env = {**os.environ, "PATH": f"{spy}:{os.environ['PATH']}"}
    out = subprocess.run([sys.executable, "-c", THREE_BATCHES, str(work), str(log), str(int(fork_free))], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    calls, batches = out.stdout.split()[-2:]
    return int(calls), int(batches)


@pytest.mark.slow
def test_a_local_checkpoint_is_kept_without_forking_a_process_per_file(tmp_path: Path) -> None:
    """Spark's default checkpoint manager forks ``readlink`` from the driver JVM for each file it
    renames (Hadoop's RawLocalFs); the job's (:func:`fork_free_checkpoints`) forks none."""
    calls, batches = _readlinks_of_three_batches(tmp_path, fork_free=False)
    assert batches == 3 and calls >= 3 * 2, "the default manager's forks (the spy sees them)"
    calls, batches = _readlinks_of_three_batches(tmp_path, fork_free=True)
    assert (calls, batches) == (0, 3)


def test_only_a_local_checkpoint_without_a_chosen_manager_gets_the_file_system_one(spark: Any) -> None:
    before = spark.conf.get(CHECKPOINT_MANAGER, None)
    try:
        spark.conf.unset(CHECKPOINT_MANAGER)
        fork_free_checkpoints(spark, "s3a://bucket/checkpoints/shop")
        fork_free_checkpoints(spark, "hdfs://nn:8020/checkpoints/shop")
        assert spark.conf.get(CHECKPOINT_MANAGER, None) is None
        fork_free_checkpoints(spark, "file:///var/cdc/checkpoints/shop")
        assert spark.conf.get(CHECKPOINT_MANAGER) == FILE_SYSTEM_CHECKPOINTS
        spark.conf.set(CHECKPOINT_MANAGER, "com.example.TheirManager")
        fork_free_checkpoints(spark, "/var/cdc/checkpoints/shop")
        assert spark.conf.get(CHECKPOINT_MANAGER) == "com.example.TheirManager"
    finally:
        if before is None:
            spark.conf.unset(CHECKPOINT_MANAGER)
        else:
            spark.conf.set(CHECKPOINT_MANAGER, before)


def test_a_local_session_rebuilds_a_delta_tables_state_in_one_task_per_thread(spark: Any, tmp_path: Path) -> None:
    """Delta's default is 50 tasks per state rebuild, which cost a first query 16 s here."""
    path = str(tmp_path / "t")
    for start in range(0, 30, 10):  # a few commits, as a mirror has
        spark.range(start, start + 10).write.format("delta").mode("append").save(path)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("first-read", "a session's first read of the table")
    try:
        fresh = spark.newSession()  # no cached state: the read rebuilds it
        assert fresh.read.format("delta").load(path).count() == 30
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup("first-read")
              for s in tracker.getJobInfo(j).stageIds]
    assert stages and max(s.numTasks for s in stages if s is not None) <= 2  # the fixture's local[2]
