"""A job's changelog (append-only Delta, Debezium rows) -> ``log_changes`` (streamed) -> ``log_now``."""

import os

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

from cdc.app.pipelines import DeltaChangelog

spark = SparkSession.active()
log = DeltaChangelog(os.path.abspath(os.environ["CHANGELOG"]))  # key and columns from its properties


@dp.table(name="log_changes", comment=f"the changelog of {log.table}, read as a stream")
def log_changes():
    return spark.readStream.format("delta").load(log.path)


@dp.materialized_view(name="log_now", comment=f"{log.table} as it stands")
def log_now():
    return log.current(spark.read.table("log_changes"))
