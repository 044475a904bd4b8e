"""Spark sessions of the project: the jars and Delta's SQL support every session gets, a local
session for `python -m cdc`, the demo and the tests, and the catalog that keeps tables by name.

Runs on the driver only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cdc.model.spark_conf import OWN_CATALOG, SNAPSHOT_PARTITIONS
from cdc.spark.daemon import MODULES_ENV
from cdc.spark.jars import spark_jars

log = logging.getLogger(__name__)

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

JAVA_OPTIONS = "spark.driver.extraJavaOptions"

# The executors' Python daemon imports the tasks' modules once, before it forks the workers
# (cdc.spark.daemon): a worker then starts without 1-2 s of imports. Local sessions only: their
# workers run this interpreter (ensure_worker_python), which has the project installed.
DAEMON_CONF = {"spark.python.daemon.module": "cdc.spark.daemon"}


# Spark's default checkpoint file manager renames through Hadoop's FileContext, whose local file
# system looks each path up with RawLocalFs.getFileLinkStatus, and Hadoop 3.4 answers that by
# forking `readlink` (FileUtil.readLink): about two dozen processes per micro-batch from the driver
# JVM (walCommit and commitOffsets took 32-39 ms each per batch here, against 10 ms with the
# FileSystem manager). On a local file system both managers check that the target is absent, then
# rename(2): the FileSystem one gives up nothing there.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
FILE_CONTEXT_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"  # Spark's default


def fork_free_checkpoints(spark: Any, checkpoint: str) -> None:
    """Have the session's streaming queries keep their checkpoints through Hadoop's FileSystem
    API (:data:`FILE_SYSTEM_CHECKPOINTS`) when ``checkpoint`` is a local path and the session has
    no checkpoint manager of its own choosing (driver, before the query starts).

    Other file systems (HDFS, object stores) keep Spark's default, whose rename Spark relies on
    for atomic checkpoint files there.
    """
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return
    if spark.conf.get(CHECKPOINT_MANAGER, None) is None:
        spark.conf.set(CHECKPOINT_MANAGER, FILE_SYSTEM_CHECKPOINTS)


def ensure_worker_python() -> None:
    """Point Spark's Python workers at this interpreter unless the user chose one.

    The workers must import this package, so they must run an interpreter that has it
    installed; ``sys.executable`` does when ``python -m cdc`` or the tests run.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def project_conf() -> dict[str, str]:
    """What every session of the project needs: the jars (``make setup`` resolved them) and
    Delta's SQL extension and catalog.

    Raises:
        JarsMissing, VersionMismatch: the jars are missing or built for another Spark.
    """
    return {"spark.jars": ",".join(spark_jars()), **DELTA_CONF}


def submit_conf() -> dict[str, str]:
    """Delta's SQL settings for a session that spark-submit starts with delta-spark's jar
    (``--jars`` or ``--packages``) but without them; nothing the user set is replaced.

    The workers' daemon (:data:`DAEMON_CONF`) is not set here: with ``--py-files`` the executors'
    Python cannot import it (docs/operating/deployment.md)."""
    from pyspark import SparkConf

    conf = SparkConf()  # what spark-submit passed
    jars = f"{conf.get('spark.jars', '')},{conf.get('spark.jars.packages', '')}"
    if "delta-spark" not in jars:
        return {}
    return {k: v for k, v in DELTA_CONF.items() if not conf.contains(k)}


def catalog_conf(directory: str | Path) -> dict[str, str]:
    """A Hive metastore on an embedded Derby database in ``directory`` (Spark ships both): tables
    registered there stay known by name after the process ends, for Spark SQL and `python -m cdc sql`.

    Derby serves one process at a time: a second session on the same directory waits, then fails.
    Hive's session directory for downloaded resources is kept there too: by default each session
    makes a ``<uuid>_resources`` directory in the JVM's temp folder, and Spark never removes it.
    """
    path = Path(directory).resolve()
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.downloaded.resources.dir": str(path / "resources"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={path / 'metastore_db'};create=true",
        "spark.sql.warehouse.dir": str(path / "warehouse"),
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        OWN_CATALOG: str(path),
        JAVA_OPTIONS: " ".join(java_option(f"-D{key}={value}") for key, value in
                               (("derby.system.home", path), ("derby.stream.error.file", path / "derby.log"))),
    }


def java_option(option: str) -> str:
    """``option`` as one word of ``spark.driver.extraJavaOptions``, which Spark's launcher splits at
    spaces outside quotes: a checkpoint folder with a space in its name stays one option."""
    if not any(c.isspace() or c in "\"'\\" for c in option):
        return option
    return '"' + option.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The job's driver JVM only orchestrates: the tasks' Python processes read the source and write
# the files, delta-rs merges the mirror in the driver's Python process, and the JVM moves small
# file manifests. C2's compiler threads and the parallel collector then only take CPU from them:
# on 2 cores (TPC-DS SF100, benchmarks/tpcds_customer.py) the JVM used 31.8 CPU s of a 19.1 s
# snapshot with the defaults and 14.8 of 16.3 s with these, the snapshot ran 1.17x as fast and a
# 2M-update catch-up 1.11x. A mirror merged by delta-spark runs in the JVM, and keeps the defaults.
LIGHT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# The same JVM's SQL runs interpreted, with no Java code generated and compiled: its queries move a
# few manifest rows per batch, and Janino's compile of a query's first batch (whole-stage code,
# then each projection and predicate; most of its time looking up classes over Spark's jars) took
# more than the rows' evaluation ever saves. `NO_CODEGEN` is Spark's own interpreted path, the one it
# falls back to when a compile fails (an internal setting, so set here only, with the reason).
# TPC-DS SF10, a 30k-update catch-up from the query's start (benchmarks/tpcds_customer.py --scale 10
# --burst 30000 --catch-up-only, four rounds alternating, 2026-12-02): 1.21-1.62 s against
# 1.51-2.06 s with code generation, its batch 0.87-1.10 s against 1.09-1.50 s; without whole-stage
# code alone it did not move (1.63-1.98 s). At SF100, 300k updates, from a worktree of the code
# before against after, alternating: 5.09, 3.86, 3.88 s against 3.79, 3.32, 3.35 s (docs/performance/history.md).
INTERPRETED_SQL = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

# Spark loads every `SparkSessionExtensionsProvider` on its class path into each new session. The
# only one on ours is Spark ML's (spark-mllib's `InternalFunctionRegistration`): it registers three
# vector functions for Spark Connect clients, and to type them starts Scala's runtime reflection,
# which took a fifth of the driver JVM's sampled CPU in a small catch-up (JFR). A local session
# here runs the job's query, `cdc sql` and pipelines, none of which calls them (classic PySpark's
# `pyspark.ml.functions` call the JVM's functions directly); the extensions this project wants
# (Delta's) are named in `spark.sql.extensions` and still load. The switch is Spark's own (an internal
# setting named for tests), so set for the local sessions this project starts only. A 2-change
# catch-up (`python -m cdc run --once`, 20 rows, alternating runs on 2026-12-07): driver JVM
# 4.42-5.29 CPU s against 5.11-5.81.
NO_CLASSPATH_EXTENSIONS = {"spark.sql.extensions.test.loadFromCp": "false"}

# A local session's driver binds to the loopback address. Left to itself, Spark looks up this
# host's name and, where it resolves to a loopback address, walks the network interfaces for
# another (warning "Your hostname ... resolves to a loopback address") on each start, for
# addresses that no executor of a local session ever uses. A SPARK_LOCAL_IP the user set wins.
LOCAL_ADDRESS = {"SPARK_LOCAL_IP": "127.0.0.1"}

# `make setup` dumps Spark's driver classes, parsed and verified, into a class-data-sharing archive
# of this environment (scripts/jvm_archive.py, with LIGHT_JVM_OPTIONS); a JVM that maps it skips
# that work at start, whatever its compiler and collector: every local session maps it (a session
# with a Hive catalog, its first SQL statement and a small aggregation, in a JVM with the default
# options: 8.7-10.5 s with the archive against 15.0-16.4 s without, three runs each, 2026-12-01).
# A JVM with another classpath or JDK ignores it quietly.
JVM_ARCHIVE = "spark-classes.jsa"


def jvm_archive(prefix: str | Path = sys.prefix) -> Path | None:
    """This environment's class-data-sharing archive of Spark's classes, if `make setup` built it
    (and its path has no blank, which Spark's option splitting would cut)."""
    path = Path(prefix) / JVM_ARCHIVE
    return path if path.is_file() and not any(c.isspace() for c in str(path)) else None


def jvm_options(light: bool, prefix: str | Path = sys.prefix) -> str:
    """A local session's driver JVM options: :data:`LIGHT_JVM_OPTIONS` when ``light``, and the
    environment's class archive when there is one, unless the JVM is to dump an archive itself
    (``-XX:ArchiveClassesAtExit`` in ``SPARK_SUBMIT_OPTS``, as scripts/jvm_archive.py starts it):
    the JDK writes no dynamic archive on top of another."""
    dumping = "-XX:ArchiveClassesAtExit" in os.environ.get("SPARK_SUBMIT_OPTS", "")
    archive = None if dumping else jvm_archive(prefix)
    if archive is not None and _own_conf_dir():
        log.warning("SPARK_CONF_DIR=%s goes first on the driver JVM's class path, which then no longer matches "
                    "the class archive's (%s): the JVM ignores the archive and starts slower (docs/operating/deployment.md: a session "
                    "with a catalog took 15-16 s instead of 9-10 s). For a local run, pass Spark settings as "
                    "-Dspark.<name>=<value> in SPARK_SUBMIT_OPTS and unset SPARK_CONF_DIR",
                    os.environ["SPARK_CONF_DIR"], archive)
    mapped = f"{java_option(f'-XX:SharedArchiveFile={archive}')} -Xlog:cds=off,cds+dynamic=off" if archive is not None else ""
    return " ".join(o for o in (LIGHT_JVM_OPTIONS if light else "", mapped) if o)


def _own_conf_dir() -> bool:
    """Whether ``SPARK_CONF_DIR`` names a folder other than PySpark's default (``$SPARK_HOME/conf``),
    the one on the class path the archive was dumped with."""
    conf = os.environ.get("SPARK_CONF_DIR")
    if not conf:
        return False
    import pyspark

    home = os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent
    return Path(conf).resolve() != (Path(home) / "conf").resolve()


def local_session(app_name: str = "spark-cdc", parallelism: int = 2, catalog_dir: str | Path | None = None,
                  light_jvm: bool = False, preload: Sequence[str] = (), **conf: str) -> Any:
    """Create (or get) a local SparkSession sized for this machine, with the project's jars and
    the preloading worker daemon (:data:`DAEMON_CONF`).

    Args:
        app_name: the Spark application name.
        parallelism: local[N] worker threads, also used for shuffle partitions.
        catalog_dir: keep the catalog (tables by name) in this directory (see :func:`catalog_conf`);
            None: Spark's in-memory catalog.
        light_jvm: start the driver JVM with :data:`LIGHT_JVM_OPTIONS` (C1 only, the serial
            collector), and run its SQL interpreted (:data:`INTERPRETED_SQL`), for a JVM that does
            no heavy work. Either way it maps the class archive
            when there is one (:func:`jvm_options`); ``spark.driver.extraJavaOptions`` in
            ``conf`` wins. Ignored when this process's JVM is already running.
        preload: the modules of the job's dialect and sinks, which the workers' daemon then
            imports instead of every registered one (:data:`cdc.spark.daemon.MODULES_ENV`). A
            session given them is a job's: a zygote process does that preload while the JVM
            starts (:mod:`cdc.spark.zygote`), and the daemon starts at once (:func:`start_workers`).
        **conf: extra Spark settings (dots as in Spark: pass a dict with ``**{"a.b": "c"}``).

    Returns:
        pyspark.sql.SparkSession

    Raises:
        JarsMissing, VersionMismatch: the jars are missing or built for another Spark.
    """
    ensure_worker_python()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    started = None
    if preload and SparkContext._active_spark_context is None:  # a new JVM: its daemon's preload starts now
        from cdc.spark import zygote

        started = zygote.start(preload)
    catalog = catalog_conf(catalog_dir) if catalog_dir is not None else {}
    # the light JVM's options and the catalog's Derby properties share the one setting
    java = " ".join(o for o in (jvm_options(light_jvm), catalog.pop(JAVA_OPTIONS, "")) if o)
    settings = {
        "spark.sql.shuffle.partitions": str(parallelism),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.memory": "2g",
        SNAPSHOT_PARTITIONS: str(parallelism),
        **DAEMON_CONF,
        **({f"spark.executorEnv.{MODULES_ENV}": ",".join(preload)} if preload else {}),
        **project_conf(),
        **catalog,
        **({JAVA_OPTIONS: java} if java else {}),
        **(INTERPRETED_SQL if light_jvm else {}),
        **NO_CLASSPATH_EXTENSIONS,
        **conf,
    }
    if catalog_dir is not None:
        Path(catalog_dir).mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(app_name).master(f"local[{parallelism}]")
    for key, value in settings.items():
        builder = builder.config(key, value)
    address = {k: v for k, v in LOCAL_ADDRESS.items() if k not in os.environ}
    with _python_for_spark(started.python if started is not None else None), environment(address):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_CDC_SPARK_LOG_LEVEL", "WARN"))
    if preload:
        start_workers(spark, parallelism)
    return spark


@contextlib.contextmanager
def _python_for_spark(script: Path | None) -> Iterator[None]:
    """While a new SparkContext and its JVM start: the zygote's ``script`` as the Python of both,
    unless the user chose another interpreter than this one. The context's (``sc.pythonExec``:
    the workers' daemon, the query's planners and runner) reads ``PYSPARK_PYTHON``; the JVM's own
    (``PythonUtils.defaultPythonExec``: its lookup of Python data sources, once per JVM, at a
    job's first ``spark.dataSource.register``) reads ``PYSPARK_DRIVER_PYTHON`` from the
    environment it starts with. That lookup was a fresh interpreter importing PySpark on each
    start's critical path; as a fork of the zygote, the registration took 0.24-0.29 s instead of
    0.48-0.56 s (TPC-DS SF100, alternating runs)."""
    names = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    mine = os.path.realpath(sys.executable)
    if script is None or any(os.path.realpath(os.environ.get(n, sys.executable)) != mine for n in names):
        yield
        return
    with environment(dict.fromkeys(names, str(script))):
        yield


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """This process's environment with ``values`` set, until the block ends (then as before)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def start_workers(spark: Any, parallelism: int) -> None:
    """Start the executors' Python daemon now, in the background, rather than at the query's
    first task.

    Spark starts the daemon (:mod:`cdc.spark.daemon`: an interpreter and its preload, about 1.1 s
    here, or a fork of the session's zygote that has done the preload: :mod:`cdc.spark.zygote`)
    when the first Python task needs a worker. That was the stream's first batch, whose
    tasks waited for it, while one core sat idle as the driver opened the sinks and started the
    query (about 4 s). A trivial SQL job at session start moves it there: the first batch of a
    300k-update catch-up took 2.5-2.8 s instead of 3.3-3.7 s. It must be a SQL job: Spark keeps
    one daemon per set of worker environment variables, and SQL's Python tasks (the source's
    among them) have ``SPARK_SIMPLIFIED_TRACEBACK``, which an RDD job's lack. A failure here is
    only logged: the query's own tasks then start the daemon, and report what fails.

    Spark creates every Python process of the driver's JVM under one lock, held while a daemon
    starts (until its first worker is forked, so through the preload), and the planner processes
    of the job's query wait behind it. Tried and dropped on 2026-11-29: an RDD job first, given the
    SQL tasks' environment (``spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK``), started the same
    daemon about 2 s sooner, but then the job's own start waited on the lock: a Postgres 300k-update
    catch-up's query took 3.95-4.31 s against 4.14-4.30 s, and the whole process 9.9-11.0 s against
    9.1-9.5 s. A Python data source of no rows instead of ``mapInArrow`` (to start the read planner's
    daemon too) made the query slower (4.14-4.31 s against 3.75-4.10 s).
    """
    def run() -> None:
        try:
            spark.range(0, parallelism, 1, parallelism).mapInArrow(no_rows, "id long").collect()
        except Exception as exc:
            log.debug("starting the Python workers ahead of the query failed: %s", exc)

    threading.Thread(target=run, name="start-python-workers", daemon=True).start()


def no_rows(batches: Iterator[Any]) -> Iterator[Any]:
    """A Python task that does nothing (:func:`start_workers`)."""
    return iter(())
