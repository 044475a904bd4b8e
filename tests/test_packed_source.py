"""The data source a job registers (cdc/spark/packed.py): Spark's planner processes that ask for the
stream's schema and pickle its reader for the executors do so without importing the project, the
reader's driver calls go to the spec's own reader, and a task's read function leaves the schema
history to the driver.

Spark pickles the registered class to each planner process; these tests pickle it the same way
(PySpark's cloudpickle) and load it in a fresh interpreter, as ``create_data_source`` does.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import ReadMaxBytes

from binlog.mysql.positions import BinlogOffset
from binlog.registry import config_class, create_dialect
from cdc.model.config import parse_section
from cdc.model.schema import Column, TableId, TableSchema
from cdc.spark.layout import StreamLayout
from cdc.spark.packed import PackedStreamReader
from cdc.spark.source import CdcStreamReader, SourceSpec, packed_job_source, task_reader
from cdc.spark.tasks import CdcPartition

SCHEMA = TableSchema(TableId("shop", "t"), (Column("id", "int", "int", False, arrow=pa.int32()),
                                            Column("v", "varchar(40)", "varchar", True, arrow=pa.string())),
                     ("id",), "mysql")

# In a fresh interpreter: load the class as Spark's create_data_source does, ask for the schema,
# and print its format name, the schema and the project's modules that got imported.
CREATE_DATA_SOURCE = """
import json, pickle, sys
cls = pickle.loads(sys.stdin.buffer.read())
schema = cls({}).schema()
project = sorted(m for m in sys.modules if m.split(".")[0] in ("cdc", "binlog", "sinks", "chunking"))
print(json.dumps({"name": cls.name(), "schema": schema.json(), "project": project}))
"""


def spec(tmp_path: Path) -> SourceSpec:
    config = parse_section(config_class("mysql"), {
        "type": "mysql", "hostname": "127.0.0.1", "port": 3306, "username": "cdc", "password": "not-used",
        "tables": ["shop\\.t"]}, "source")
    return SourceSpec(create_dialect(config), str(tmp_path / "state"), 2, schemas={SCHEMA.table_id: SCHEMA})


def test_the_schema_is_answered_without_importing_the_project(tmp_path: Path) -> None:
    shipped = cloudpickle.dumps(packed_job_source(spec(tmp_path)))
    out = subprocess.run([sys.executable, "-c", CREATE_DATA_SOURCE], input=shipped, capture_output=True,
                         check=True).stdout
    got = json.loads(out)
    assert got["name"] == "mysql-cdc"
    assert got["schema"] == StreamLayout([SCHEMA]).spark_schema().json()
    assert got["project"] == ["cdc", "cdc.spark", "cdc.spark.packed"]


# In a fresh interpreter, as Spark's plan_data_source_read does: build the stream reader and pickle
# it (with the class) for the executors; print the project's modules that got imported.
PLAN_DATA_SOURCE_READ = """
import json, pickle, sys
from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import ReadMaxBytes
cls = pickle.loads(sys.stdin.buffer.read())
reader = cls({}).streamReader(cls({}).schema())
sys.stdout.buffer.write(cloudpickle.dumps((cls, reader)))
sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("cdc", "binlog", "sinks", "chunking"))))
"""


def test_the_reader_for_the_executors_is_pickled_without_importing_the_project(tmp_path: Path) -> None:
    shipped = cloudpickle.dumps(packed_job_source(spec(tmp_path)))
    done = subprocess.run([sys.executable, "-c", PLAN_DATA_SOURCE_READ], input=shipped, capture_output=True,
                          check=True)
    assert json.loads(done.stderr) == ["cdc", "cdc.spark", "cdc.spark.packed"]
    _, reader = pickle.loads(done.stdout)
    assert isinstance(reader, PackedStreamReader) and reader.packed == pickle.loads(shipped).packed


def test_the_driver_calls_go_to_the_specs_own_reader(tmp_path: Path) -> None:
    given = spec(tmp_path)
    shipped = pickle.loads(cloudpickle.dumps(packed_job_source(given)))
    reader = shipped({}).streamReader(shipped({}).schema())
    own = CdcStreamReader(given, {SCHEMA.table_id: SCHEMA}, StreamLayout([SCHEMA]))
    assert reader.getDefaultReadLimit() == own.getDefaultReadLimit() == ReadMaxBytes(128 * 1024 * 1024)
    built = reader._driver()
    assert isinstance(built, CdcStreamReader) and reader._driver() is built  # built once, at the first call
    assert built.spec.state_dir == given.state_dir and built.spec.parallelism == 2
    assert built.spec.dialect.config == given.dialect.config
    assert built.context.schemas == {SCHEMA.table_id: SCHEMA}
    assert built.context.layout.arrow_schema == StreamLayout([SCHEMA]).arrow_schema
    assert pickle.loads(cloudpickle.dumps(reader))._reader is None  # the driver's reader stays there


def test_a_task_binds_the_schema_history_the_driver_started_and_writes_none(tmp_path: Path) -> None:
    """The driver's reader starts each table's history (version 0); a task's read function only
    binds the state directory, so a task never writes a history the driver did not start."""
    tasks = spec(tmp_path)
    state = Path(tasks.state_dir)
    task_reader(tasks)
    assert tasks.dialect.history_store is not None and tasks.dialect.history_store.root == str(state)
    shipped = pickle.loads(cloudpickle.dumps(packed_job_source(spec(tmp_path))))
    reader = pickle.loads(cloudpickle.dumps(shipped({}).streamReader(shipped({}).schema())))
    assert list(reader.read(CdcPartition(0, 1, [], BinlogOffset("mysql-bin.000001", 4), 0))) == []
    assert not state.exists() or not any(state.rglob("*"))
    driver = spec(tmp_path)
    CdcStreamReader(driver, {SCHEMA.table_id: SCHEMA}, StreamLayout([SCHEMA]))
    assert driver.dialect.history_store is not None and any(p.is_file() for p in state.rglob("*"))
