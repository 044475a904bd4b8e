"""Names of Spark settings that more than one layer reads or sets (constants only: no Spark here).

The Spark layer (``cdc.spark.session``) builds the sessions; the sinks below it read what the
session says about itself.
"""

from __future__ import annotations

# Delta rebuilds a table's state (its files, deletion vectors, protocol) in 50 tasks by default,
# the first time a session reads each table: `python -m cdc sql` counting a 15-row mirror ran 100
# such tasks and took 20.5 s here, against 4.0 s with one task per local thread. A local session
# has no more slots than its threads; a cluster's sessions (spark-submit) keep Delta's default.
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"

# The folder of a session's own catalog (an embedded Hive metastore that this project created:
# cdc.spark.session.catalog_conf), unset for a catalog the session shares (spark-submit's). The Delta
# sink keeps a record of the names it registered there (sinks.delta.catalog), so that a job's
# restart need not start the metastore to ask again.
OWN_CATALOG = "spark.cdc.catalog.dir"
