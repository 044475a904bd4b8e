"""`make demo`: a throwaway MariaDB, a local Spark session, and a run over them.

Runs on the driver. Each step prints what it did, so a newcomer sees where a set-up problem is.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from cdc.sandbox import Sandbox, sandbox

CDC_SETTINGS = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id")


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


def _server_settings(box: Sandbox) -> dict[str, str]:
    with contextlib.closing(box.cdc.connect()) as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), " + ", ".join(f"@@GLOBAL.{n}" for n in CDC_SETTINGS))
        row = cur.fetchall()[0]
        found = {"version": str(row[0])}
        found.update((name, str(value)) for name, value in zip(CDC_SETTINGS, row[1:], strict=True))
        cur.execute("SHOW GRANTS")
        found["grants"] = "; ".join(str(r[0]).split(" IDENTIFIED")[0] for r in cur.fetchall())
    return found


def _spark_check(spark: Any) -> int:
    """A tiny job whose Python UDF runs on a worker: proves workers import this package."""
    from pyspark.sql.functions import udf

    @udf("string")
    def package_version(_: int) -> str:
        import cdc

        return cdc.__version__

    rows = spark.range(4).select(package_version("id").alias("v")).distinct().collect()
    return len(rows)


def run_demo(scale: int = 1) -> int:
    """Start a sandbox server and Spark, check both, and tear down. Returns an exit code."""
    started = time.monotonic()
    _step("starting a throwaway MariaDB (temp datadir, free port)")
    with sandbox() as box:
        settings = _server_settings(box)
        _step(f"server {settings.pop('version')} on {box.cdc.address}")
        for key, value in settings.items():
            print(f"    {key:20} {value}")
        _step("starting a local Spark session")
        from cdc.spark import local_session

        spark = local_session("spark-cdc-demo")
        try:
            import pyspark

            workers = _spark_check(spark)
            _step(f"Spark {pyspark.__version__} up; Python workers import spark-cdc ({workers} distinct answer)")
        finally:
            spark.stop()
    _step(f"set-up OK in {time.monotonic() - started:.1f}s (scale {scale}); server stopped and removed")
    return 0
