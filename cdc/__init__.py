"""spark-cdc: change data capture from MySQL/MariaDB into Delta Lake on Apache Spark.

Package layout (import direction: ``cdc`` core modules <- ``chunking``/``binlog`` <- ``cdc``
source and job wiring; sinks import no database driver):

* ``cdc``: config, Debezium JSON format, offsets, schema/type mapping, Spark source, job, CLI.
* ``chunking``: chunk splitter and lock-free snapshot chunk reading.
* ``binlog``: change-log readers, one module per database.
* ``sinks``: one module per sink.
"""

__version__ = "0.1.0.dev0"
