"""Build a class-data-sharing archive of the Spark driver JVM's classes, for the tests and for a
job's local session (``cdc.spark.session.light_jvm_options`` maps ``<sys.prefix>/spark-classes.jsa``).

Run: ``.venv/bin/python scripts/jvm_archive.py ARCHIVE`` (``make setup`` does, once per install).

The test suite starts well over a hundred short-lived Spark JVMs (drivers it SIGKILLs and restarts,
``python -m cdc`` commands, sessions), and on 2 cores most of each start is loading and verifying
Spark's classes. A dynamic CDS archive (JDK 13+, ``-XX:ArchiveClassesAtExit``) holds those classes
already parsed and verified; a JVM started with ``-XX:SharedArchiveFile=ARCHIVE`` maps it instead.
Measured here (load 8): a local session plus a tiny job took 23.5 and 24.1 s without it, 10.4 and
9.9 s with it.

This script starts one local session the way the tests do (``SPARK_SUBMIT_OPTS`` from the
environment, plus the dump flag), touches the classes the suite uses (a Delta table written,
merged and read by name in a Hive catalog, a streaming query with ``foreachBatch``, Arrow), and
exits; the JVM writes the archive as it exits. A JVM whose classpath or JDK differs from this one
ignores the archive (``-Xlog:cds=off`` keeps it quiet), so a stale archive costs nothing but the
speed-up. It never fails the build: without an archive the tests run as before.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def exercise(directory: Path) -> None:
    """Load the suite's classes in one session, then end its JVM and wait: it writes the archive
    as it exits (on EOF on its stdin, as when the Python process ends)."""
    from pyspark import SparkContext

    from cdc.spark.session import local_session

    spark = local_session("spark-cdc-cds", parallelism=2, catalog_dir=directory / "catalog")
    jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
    try:
        spark.sql("CREATE DATABASE IF NOT EXISTS cds")
        table = directory / "t"
        spark.range(1000).selectExpr("id", "cast(id AS string) AS v").write.format("delta").save(str(table))
        spark.sql(f"CREATE TABLE cds.t USING delta LOCATION '{table}'")
        spark.range(500, 1500).selectExpr("id", "'new' AS v").createOrReplaceTempView("changes")
        spark.sql("MERGE INTO cds.t AS t USING changes AS c ON t.id = c.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        spark.sql("SELECT v, count(*) FROM cds.t GROUP BY v ORDER BY v").toArrow()
        seen: list[int] = []
        query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
                 .writeStream.foreachBatch(lambda df, batch_id: seen.append(df.count()))
                 .option("checkpointLocation", str(directory / "checkpoint")).start())
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        query.stop()
    finally:
        spark.stop()
        jvm.stdin.close()
        jvm.wait(timeout=300)


def main() -> None:
    archive = Path(sys.argv[1]).resolve()
    archive.unlink(missing_ok=True)
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off,cds+dynamic=off"
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-cds-"))
    try:
        exercise(work)
    except Exception as exc:  # the archive is an optimization: never fail the build for it
        print(f"warning: no JVM class archive ({type(exc).__name__}: {exc}); the tests run without it",
              file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
