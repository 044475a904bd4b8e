"""Spark session helpers: a local session for `python -m cdc`, the demo and the tests.

Runs on the driver only.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def ensure_worker_python() -> None:
    """Point Spark's Python workers at this interpreter unless the user chose one.

    The workers must import this package, so they must run an interpreter that has it
    installed; ``sys.executable`` does when ``python -m cdc`` or the tests run.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(app_name: str = "spark-cdc", parallelism: int = 2, **conf: str) -> Any:
    """Create (or get) a local SparkSession sized for this machine.

    Args:
        app_name: the Spark application name.
        parallelism: local[N] worker threads, also used for shuffle partitions.
        **conf: extra Spark settings (dots as in Spark: pass a dict with ``**{"a.b": "c"}``).

    Returns:
        pyspark.sql.SparkSession
    """
    ensure_worker_python()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(f"local[{parallelism}]")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", conf.pop("spark.driver.memory", "2g"))
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_CDC_SPARK_LOG_LEVEL", "WARN"))
    return spark
