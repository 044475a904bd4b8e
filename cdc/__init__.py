"""spark-cdc: change data capture from MySQL, MariaDB and PostgreSQL into Delta Lake and Kafka on
Apache Spark.

Package layout (each layer imports only the layers below it: docs/contributing/architecture.md):

* ``cdc.model``: schema, positions, change events, typed config, errors, the Debezium JSON format.
* ``chunking``: chunk splitter and the watermark merge of a chunk with the log.
* ``binlog``: the dialects, one sub-package per database (``mysql``: MySQL and MariaDB; ``postgres``).
* ``sinks``: one sub-package per sink (``delta``, ``kafka``).
* ``cdc.spark``: the Spark source, executor tasks and the batch committer; ``cdc.app``: the job and CLI.
"""

__version__ = "0.1.0.dev0"
