"""The job's metrics in Spark's own streaming progress: ``StreamingQueryProgress.observedMetrics``.

A Python data source cannot report source metrics to Spark (pyspark 4.2's
``DataSourceStreamReader`` has no metrics hook), so the job observes its manifest stream instead:
every batch, Spark computes the aggregates below over the manifest rows (one per staged set, so
no extra pass over the changes) and publishes them under the name :data:`OBSERVATION` in the
query's progress: ``query.lastProgress["observedMetrics"]["cdc"]``, every
``StreamingQueryListener``, and the progress events of Spark's event log. Runs on the driver
(planning); the aggregates run in the batch's own job.
"""

from __future__ import annotations

from typing import Any

from cdc.spark.layout import MANIFEST_COLUMN

OBSERVATION = "cdc"

METRICS = {
    "changes": "change rows the batch staged (snapshot rows and log changes)",
    "snapshot_rows": "snapshot rows (op `r`)",
    "log_changes": "log changes (op `c`, `u`, `d`)",
    "staged_sets": "staged sets (about one per task and table)",
    "newest_event_ts_ms": "the source's time of the batch's newest log change (null: none)",
    "lag_ms": "how old that change was when the batch started (null: no log change)",
}


def observed(df: Any) -> Any:
    """``df`` (the job's manifest stream) with the :data:`METRICS` observed per batch."""
    from pyspark.sql import functions as F

    staged = F.col(MANIFEST_COLUMN)
    rows = F.get_json_object(staged, "$[0].rows").cast("long")
    kind = F.get_json_object(staged, "$[0].stream")
    event = F.when(F.col("op") != "r", F.col("source.ts_ms"))
    return df.observe(
        OBSERVATION,
        F.coalesce(F.sum(rows), F.lit(0)).alias("changes"),
        F.coalesce(F.sum(F.when(kind == "snapshot", rows)), F.lit(0)).alias("snapshot_rows"),
        F.coalesce(F.sum(F.when(kind == "changes", rows)), F.lit(0)).alias("log_changes"),
        F.count(staged).alias("staged_sets"),
        F.max(event).alias("newest_event_ts_ms"),
        F.min(F.unix_millis(F.current_timestamp()) - event).alias("lag_ms"),  # the batch's start
    )
