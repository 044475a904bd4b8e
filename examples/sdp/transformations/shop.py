"""MySQL -> spark-cdc -> ``changes`` (every change, appended) -> ``<db>_<table>`` (each table now).

One streaming flow reads the database; the per-table materialized views read ``changes``.
"""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

from cdc.app.pipelines import CdcSource

spark = SparkSession.active()
cdc = CdcSource(spark, "source.yaml", state_dir="pipeline-storage/cdc-state")


@dp.table(name="changes", comment="every change of every captured table (Debezium rows)")
def changes():
    return cdc.read_stream()


def current_state(table):
    @dp.materialized_view(name=cdc.target_name(table), comment=f"{table} as it stands")
    def current():
        return cdc.current(spark.read.table("changes"), table)


for captured in cdc.tables:
    current_state(captured)
