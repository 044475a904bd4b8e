"""spark-cdc inside Spark Declarative Pipelines (``pyspark.pipelines``): the job's source as a
pipeline's streaming table, and each captured table's current state downstream of it.

A pipeline file (the Python that ``spark-pipelines init`` lays out) does::

    from pyspark import pipelines as dp
    from cdc.app.pipelines import CdcSource

    cdc = CdcSource(spark, "source.yaml", state_dir="cdc-state")   # connects once, checks the source

    @dp.table(name="shop_changes")                   # every change of every table, appended
    def shop_changes():
        return cdc.read_stream()

    for table in cdc.tables:                         # one table per captured table: its rows now
        dp.materialized_view(name=cdc.target_name(table))(
            lambda table=table: cdc.current(spark.read.table("shop_changes"), table))

One streaming flow reads the database (a second flow on the same source would read the log twice
and share the source's state directory); everything else reads the changes table.

``create_auto_cdc_flow`` is the natural target of :meth:`CdcSource.flat` (keys, ``sequence_by``
``_seq``, deletes ``_op = 'd'``), but open-source Spark 4.2 refuses a Delta or Parquet target
(``AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE``: it needs a DSv2 table with row-level operations, which
delta-spark 4.4 does not implement): see docs/sinks/spark-pipelines.md.

Runs in the pipeline's Python process (the Spark Connect client); the source itself runs in the
Connect server's Python workers, which must import this package (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import yaml

from binlog.registry import DIALECT_NAMES, config_class, create_dialect
from cdc.app.config import DEFAULT_SOURCE
from cdc.model.config import SourceConfig, expand_env, parse_section
from cdc.model.errors import CdcError, ConfigError
from cdc.model.schema import TableId, TableSchema
from cdc.model.spark_conf import SNAPSHOT_PARTITIONS
from cdc.spark.jars import spark_jars
from cdc.spark.layout import StreamLayout
from cdc.spark.session import DELTA_CONF, catalog_conf
from cdc.spark.source import SourceSpec, bound_source, table_schemas
from sinks.delta.tables import PROP_KEY, PROP_KIND, PROP_SOURCE

OP, SEQ, TS = "_op", "_seq", "_ts_ms"


class CdcSource:
    """The job file's source, registered as a streaming data source of ``spark``.

    Args:
        spark: the pipeline's session (Spark Connect or classic).
        config: a YAML file with a ``source:`` section as in a job file (a job file will do; its
            other sections are not used: the pipeline's tables are the sinks).
        state_dir: where the source keeps its state (chunk plans, slices): a folder of its own that
            lives as long as the pipeline's checkpoints, e.g. next to the spec's ``storage``.
        parallelism: tasks per batch.

    Raises:
        ConfigError, CdcError: the job file is invalid, or a start-up check failed (no server, no
            binlog, a table without a key), with the message naming the fix.
    """

    def __init__(self, spark: Any, config: str | Path, state_dir: str | Path, parallelism: int = 2) -> None:
        self.spark = spark
        self.dialect = create_dialect(load_source(config))
        self.schemas: dict[TableId, TableSchema] = table_schemas(self.dialect)
        self.layout = StreamLayout(list(self.schemas.values()))
        spec = SourceSpec(self.dialect, str(Path(state_dir).resolve()), parallelism)
        source = bound_source(spec)
        self.format = source.name()
        spark.dataSource.register(source)

    @property
    def tables(self) -> list[TableId]:
        """The captured tables, sorted."""
        return sorted(self.schemas)

    def read_stream(self) -> Any:
        """The change stream: Debezium's ``op``, ``before``, ``after``, ``source``, ``ts_ms`` for
        every captured table (cdc/spark/layout.py), snapshot rows first."""
        return self.spark.readStream.format(self.format).load()

    def target_name(self, table: TableId) -> str:
        """A pipeline dataset name for ``table``: ``<db>_<table>``."""
        return f"{table.db}_{table.table}"

    def flat(self, changes: Any, table: TableId) -> Any:
        """One table's changes as its own columns plus ``_op``, ``_seq`` and ``_ts_ms`` (see
        :func:`flat_changes`), from a batch or streaming DataFrame of :meth:`read_stream`'s rows."""
        from pyspark.sql import functions as F

        schema = self._schema(table)
        rows = changes.where((F.col("source.db") == table.db) & (F.col("source.table") == table.table))
        return flat_changes(rows, schema.column_names, schema.connector, str(table) if self.layout.multi else None)

    def current(self, changes: Any, table: TableId) -> Any:
        """``table`` as it stands after ``changes`` (a batch DataFrame of :meth:`read_stream`'s
        rows): see :func:`current_state`."""
        schema = self._schema(table)
        return current_state(self.flat(changes, table), schema.column_names, schema.primary_key)

    def auto_cdc_args(self, table: TableId) -> dict[str, Any]:
        """``create_auto_cdc_flow`` arguments for :meth:`flat` rows of ``table``."""
        return auto_cdc_args(self._schema(table).primary_key)

    def _schema(self, table: TableId) -> TableSchema:
        try:
            return self.schemas[table]
        except KeyError:
            raise ConfigError(f"table {table} is not captured by this source; captured: "
                              f"{', '.join(map(str, self.tables))}", key="source.tables") from None


class DeltaChangelog:
    """A changelog table that a spark-cdc job wrote (``<sink.path>/<db>/<t>_changelog``) as a
    pipeline's source: its key and columns come from the table's own properties.

    Args:
        path: the changelog table's path or URI.
        storage_options: delta-rs storage options for an object store.

    Raises:
        ConfigError: ``path`` is not a spark-cdc changelog.
    """

    def __init__(self, path: str | Path, storage_options: dict[str, str] | None = None) -> None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        self.path = str(path)
        try:
            table = DeltaTable(self.path, storage_options=storage_options)
        except TableNotFoundError:
            raise ConfigError(f"no Delta table at {self.path}: give a changelog a job wrote "
                              "(<sink.path>/<db>/<table>_changelog)") from None
        config = table.metadata().configuration
        if config.get(PROP_KIND) != "changelog":
            raise ConfigError(f"{self.path} is not a spark-cdc changelog (its {PROP_KIND} property is "
                              f"{config.get(PROP_KIND)!r})")
        self.table = config[PROP_SOURCE]
        self.keys: tuple[str, ...] = tuple(json.loads(config[PROP_KEY]))
        arrow = pa.schema(table.schema().to_arrow())
        after: pa.StructType = arrow.field("after").type
        self.columns = [after.field(i).name for i in range(after.num_fields)]
        source: pa.StructType = arrow.field("source").type
        self.connector = "postgresql" if source.get_field_index("lsn") >= 0 else "mysql"

    def flat(self, changes: Any) -> Any:
        """The changelog's rows (batch or streaming) flat: see :func:`flat_changes`."""
        return flat_changes(changes, self.columns, self.connector)

    def current(self, changes: Any) -> Any:
        """The source table as it stands after ``changes`` (a batch read of the changelog)."""
        return current_state(self.flat(changes), self.columns, self.keys)

    def auto_cdc_args(self) -> dict[str, Any]:
        """``create_auto_cdc_flow`` arguments for :meth:`flat` rows."""
        return auto_cdc_args(self.keys)


def flat_changes(changes: Any, columns: Sequence[str], connector: str, image: str | None = None) -> Any:
    """Debezium change rows (``op``, ``before``, ``after``, ``source``, ``ts_ms``) as the table's
    own ``columns`` plus ``_op`` (c/r/u/d), ``_seq`` (see :func:`sequence`) and ``_ts_ms``; a delete
    carries the deleted row. ``image``: the field of ``before``/``after`` that holds the table's row
    when one stream carries several tables (cdc/spark/layout.py)."""
    from pyspark.sql import functions as F

    before, after = F.col("before"), F.col("after")
    if image is not None:
        before, after = before[image], after[image]
    row = F.when(F.col("op") == "d", before).otherwise(after)
    return changes.select(*[row[c].alias(c) for c in columns], F.col("op").alias(OP),
                          sequence(connector).alias(SEQ), F.col("ts_ms").alias(TS))


def auto_cdc_args(keys: Sequence[str]) -> dict[str, Any]:
    """``create_auto_cdc_flow`` arguments for :func:`flat_changes` rows: the key, ``_seq`` as the
    order, ``_op = 'd'`` as deletes, and the three added columns left out of the target."""
    return {"keys": list(keys), "sequence_by": SEQ, "apply_as_deletes": f"{OP} = 'd'",
            "except_column_list": [OP, SEQ, TS]}


def current_state(flat: Any, columns: Sequence[str], keys: Sequence[str]) -> Any:
    """The table as it stands after the :func:`flat_changes` rows ``flat`` (batch): the last change
    of each key by ``_seq``, deletes dropped; SCD type 1, as ``create_auto_cdc_flow`` keeps it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(SEQ).desc())
    return (flat.withColumn("_n", F.row_number().over(latest))
            .where((F.col("_n") == 1) & (F.col(OP) != "d"))
            .select(*columns))


def load_source(path: str | Path) -> SourceConfig:
    """The ``source:`` section of a YAML file, validated as in a job file (``${VAR}`` expanded).

    Raises:
        ConfigError: the file is missing or the section is invalid; the message names the key.
    """
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("source"), dict):
        raise ConfigError(f"{path}: no source: section (the keys are a job file's)", key="source")
    source = expand_env(raw["source"], "source")
    kind = source.get("type", DEFAULT_SOURCE)
    if kind not in DIALECT_NAMES:
        raise ConfigError(f"{path}: source.type: {kind!r} is not one of {', '.join(DIALECT_NAMES)}",
                          key="source.type")
    return parse_section(config_class(kind), {**source, "type": kind}, "source")


def sequence(connector: str) -> Any:
    """The ``_seq`` column for ``connector``'s source block: changes of one key sort in log
    order; a snapshot row (tagged with its chunk's high watermark) sorts before a change at the same
    position, because the chunk's rows hold only the changes below the watermark."""
    from pyspark.sql import functions as F

    change = (F.col("source.snapshot") != "true").cast("int")
    if connector == "mysql":
        file_number = F.substring_index(F.col("source.file"), ".", -1).cast("long")
        return F.struct(file_number.alias("file"), F.col("source.pos").alias("pos"), change.alias("change"),
                        F.col("source.row").alias("row"))
    if connector == "postgresql":
        lsn = F.coalesce(F.col("source.commit_lsn"), F.col("source.lsn"))
        return F.struct(lsn.alias("lsn"), change.alias("change"), F.col("source.row").alias("row"))
    raise ConfigError(f"no change order for connector {connector!r}")


def pipeline_conf(storage: str | Path, jars: Sequence[str]) -> dict[str, str]:
    """What a pipeline's Spark Connect server needs: the project's jars, Delta, and a catalog kept in
    ``<storage>/catalog`` so that the pipeline's tables are known again on the next run."""
    return {"spark.jars": ",".join(jars), **DELTA_CONF, **catalog_conf(Path(storage) / "catalog"),
            "spark.sql.sources.default": "delta",  # not format="delta": its second run would ALTER the provider
            "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "2",
            SNAPSHOT_PARTITIONS: "2", "spark.ui.showConsoleProgress": "false"}


@contextlib.contextmanager
def submit_args(conf: dict[str, str]) -> Iterator[None]:
    """Start the local Spark Connect server with ``conf``: pyspark starts it through spark-submit,
    which reads ``PYSPARK_SUBMIT_ARGS``; jars given any later miss the driver's class path."""
    saved = os.environ.get("PYSPARK_SUBMIT_ARGS")
    args = [f"--conf {shlex.quote(f'{k}={v}')}" for k, v in conf.items()]
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join([*args, "pyspark-shell"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = saved


def resolve_storage(storage: str, root: Path) -> str:
    """A spec's ``storage`` as an absolute URI: a relative path is taken from the spec's folder."""
    if urlparse(storage).scheme or Path(storage).is_absolute():
        return storage
    return (root / storage).resolve().as_uri()


def storage_dir(storage: str) -> Path:
    """The local folder of a pipeline spec's ``storage`` (``file:///...`` or a path).

    Raises:
        ConfigError: the storage is not on the local file system.
    """
    parsed = urlparse(storage)
    if parsed.scheme not in ("", "file"):
        raise ConfigError(f"storage {storage!r}: python -m cdc pipeline run keeps the pipeline's catalog "
                          "next to its storage and needs a local folder (file:///...)", key="storage")
    return Path(unquote(parsed.path)).resolve()


def run_pipeline(spec_path: str | Path, *, full_refresh_all: bool = False, dry: bool = False,
                 master: str = "local[2]") -> None:
    """Run a Spark Declarative Pipeline once, as ``spark-pipelines run`` does, in a local Spark
    Connect server that has the project's jars, Delta and a catalog kept in ``<storage>/catalog``.

    ``spark-pipelines run`` itself ends with ``UNKNOWN_RESPONSE`` and exit code 1 after a run that
    read a Python data source (pyspark 4.2's client rejects the Python accumulator's observed
    metrics that the server sends when the run ends); here those responses are skipped.

    Raises:
        ConfigError: the spec is missing or invalid.
        PipelineFailed: a flow failed (the message is Spark's).
    """
    from pyspark.errors import PySparkException
    from pyspark.pipelines import cli
    from pyspark.pipelines.spark_connect_pipeline import (
        create_dataflow_graph,
        handle_pipeline_events,
    )


    path = Path(spec_path).resolve()
    if not path.is_file():
        raise ConfigError(f"no pipeline spec at {path}: pass the spark-pipeline.yml that spark-pipelines "
                          "init wrote", key="--spec")
    try:
        spec = cli.load_pipeline_spec(path)
    except PySparkException as exc:
        raise ConfigError(f"{path}: {exc}", key="--spec") from None
    location = resolve_storage(spec.storage, path.parent)
    storage = storage_dir(location)
    (storage / "catalog").mkdir(parents=True, exist_ok=True)
    with submit_args(pipeline_conf(storage, spark_jars())):
        spark = local_connect_session(master, {"spark.sql.connect.serverStacktrace.enabled": "false",
                                               **spec.configuration})
    try:
        phases: list[list[str] | None] | None = None
        while phases is None or phases:
            # a graph runs once: each phase registers the definitions again
            graph = create_dataflow_graph(spark, default_catalog=spec.catalog, default_database=spec.database,
                                          sql_conf=spec.configuration)
            registry = _registry(spark, graph)
            cli.register_definitions(path, registry, spec, spark, graph)
            phases = registry.phases() if phases is None else phases
            handle_pipeline_events(_run_events(spark, graph, location, phases.pop(0), full_refresh_all, dry))
    except PySparkException as exc:
        raise PipelineFailed(" ".join(str(exc).split("JVM stacktrace:")[0].split())) from None
    finally:
        spark.stop()


def local_connect_session(master: str, conf: dict[str, str]) -> Any:
    """A Spark Connect session on a local Spark Connect server that listens on a free port.

    pyspark's ``SparkSession.builder.remote("local[2]")`` binds the server to port 15002 and
    connects to ``sc://localhost``, so two pipeline runs on one host (two users, or two tests)
    collide. Here the server binds an ephemeral port (``spark.connect.grpc.binding.port=0``, as
    pyspark's own tests do) and the client connects to the port the server reports. Stopping the
    session stops the server, as pyspark's local mode does (``SPARK_LOCAL_REMOTE``).
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    opts: dict[str, Any] = {**conf, "spark.connect.grpc.binding.port": "0"}
    with SparkContext._lock:
        if SparkSession._instantiatedSession is not None:
            raise ConfigError("a Spark session is already running in this process: a pipeline run starts "
                              "its own Spark Connect server; run it in a process of its own")
        os.environ["SPARK_LOCAL_REMOTE"] = "1"
        RemoteSparkSession._start_connect_server(master, opts)  # leaves the runtime SQL confs in opts
        classic = SparkSession._instantiatedSession
        assert classic is not None
        service = getattr(classic._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
        port = int(getattr(service, "MODULE$").localPort())
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        return RemoteSparkSession.builder.remote(f"sc://localhost:{port}").config(map=opts).getOrCreate()


class PipelineFailed(CdcError):
    """A pipeline's flow failed."""


def _registry(spark: Any, graph: str) -> Any:
    """A graph element registry for ``graph`` that also records the datasets' kinds."""
    from pyspark.pipelines.output import MaterializedView, Output
    from pyspark.pipelines.spark_connect_graph_element_registry import (
        SparkConnectGraphElementRegistry,
    )

    class RecordingRegistry(SparkConnectGraphElementRegistry):
        """Records which datasets are materialized views, to run them after the tables they read."""

        def __init__(self, spark: Any, graph: str) -> None:
            super().__init__(spark, graph)
            self.views: list[str] = []
            self.others: list[str] = []
            self.sql = False

        def register_output(self, output: Output) -> None:
            (self.views if isinstance(output, MaterializedView) else self.others).append(output.name)
            super().register_output(output)

        def register_sql(self, sql_text: str, file_path: Path) -> None:
            self.sql = True
            super().register_sql(sql_text, file_path)

        def phases(self) -> list[list[str] | None]:
            """The refresh selections to run in turn: the tables first, then the materialized views
            (None: everything at once). A materialized view that reads a streaming table fed by a
            Python data source is not held back until that table's flow finishes on a pipeline's
            second and later runs (pyspark 4.2.0): it would read the previous run's rows."""
            if self.sql or not self.views or not self.others:
                return [None]
            return [self.others, self.views]

    return RecordingRegistry(spark, graph)


def _run_events(spark: Any, graph: str, storage: str, selection: list[str] | None, full_refresh_all: bool,
                dry: bool) -> Iterator[dict[str, Any]]:
    """The StartRun command's responses, as ``spark_connect_pipeline.start_run`` yields them, without
    the observed-metrics responses that its client cannot handle. ``selection``: the datasets to
    run (None: all); with ``full_refresh_all`` they are reset first."""
    import pyspark.sql.connect.proto as pb2

    command = pb2.Command()
    if selection is None:
        start = pb2.PipelineCommand.StartRun(dataflow_graph_id=graph, full_refresh_all=full_refresh_all, dry=dry,
                                             storage=storage)
    elif full_refresh_all:
        start = pb2.PipelineCommand.StartRun(dataflow_graph_id=graph, full_refresh_selection=selection, dry=dry,
                                             storage=storage)
    else:
        start = pb2.PipelineCommand.StartRun(dataflow_graph_id=graph, refresh_selection=selection, dry=dry,
                                             storage=storage)
    command.pipeline_command.start_run.CopyFrom(start)
    client = spark.client
    request = client._execute_plan_request_with_metadata()
    if client._user_id:
        request.user_context.user_id = client._user_id
    client._set_command_in_plan(request.plan, command)
    for response in client._execute_and_fetch_as_iterator(request, {}):
        if isinstance(response, dict):
            yield response
