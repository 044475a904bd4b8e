"""The data source a job registers (cdc/spark/packed.py): Spark's planner process that asks for the
stream's schema gets it without importing the project, and the stream reader it builds is the
spec's own.

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

from binlog.registry import config_class, create_dialect
from cdc.model.config import parse_section
from cdc.model.schema import Column, TableId, TableSchema
from cdc.spark.layout import StreamLayout
from cdc.spark.source import CdcStreamReader, SourceSpec, packed_job_source

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


def test_the_stream_reader_is_the_one_of_the_spec(tmp_path: Path) -> None:
    given = spec(tmp_path)
    shipped = pickle.loads(cloudpickle.dumps(packed_job_source(given)))
    reader = shipped({}).streamReader(shipped({}).schema())
    assert isinstance(reader, CdcStreamReader)
    assert reader.spec.state_dir == given.state_dir and reader.spec.parallelism == 2
    assert reader.spec.dialect.config == given.dialect.config
    assert reader.context.schemas == {SCHEMA.table_id: SCHEMA}
    assert reader.context.layout.arrow_schema == StreamLayout([SCHEMA]).arrow_schema
