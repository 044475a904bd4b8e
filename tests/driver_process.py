"""A driver process for the crash tests: runs the pipeline continuously until it is killed.

Usage: python tests/driver_process.py '<json: options, checkpoint, lake, query_id>'
It prints "batch N" after each committed foreachBatch call, so a test can kill it mid-flight.
"""

from __future__ import annotations

import json
import sys

from cdc.spark.batch import BatchWriter
from cdc.spark.session import local_session
from cdc.spark.source import MySqlCdcDataSource
from cdc.spark.state import StateStore
from sinks.delta.sink import DeltaSink, DeltaSinkConfig


def main(arg: str) -> None:
    spec = json.loads(arg)
    spark = local_session("spark-cdc-crash-driver", parallelism=2)
    spark.dataSource.register(MySqlCdcDataSource)
    options = spec["options"]
    source = MySqlCdcDataSource(options)
    sink = DeltaSink(DeltaSinkConfig(path=spec["lake"]), query_id=spec["query_id"])
    writer = BatchWriter(source.table_schemas(), sink, StateStore(options["state_dir"]))

    def write(df: object, batch_id: int) -> None:
        writer(df, batch_id)
        print(f"batch {batch_id}", flush=True)

    df = spark.readStream.format("mysql-cdc").options(**options, **writer.source_options()).load()
    query = (df.writeStream.foreachBatch(write).option("checkpointLocation", spec["checkpoint"])
             .trigger(processingTime="200 milliseconds").start())
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1])
