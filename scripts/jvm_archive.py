"""Build a class-data-sharing archive of the Spark driver JVM's classes, for the tests and for a
local session (``cdc.spark.session.jvm_options`` maps ``<sys.prefix>/spark-classes.jsa``).

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

Before the dump it removes the signatures from the signed jars among Spark's own (janino and
commons-compiler, Spark's code generator: :func:`unsign`). The JDK never archives a class from a
signed jar (``-Xlog:cds``: "Skipping ...: Signed JAR", 377 classes), so every JVM loaded, verified
and checked the signature digests of janino's classes again at its first SQL statement. Without
the signatures (alternating runs, a local session with a Hive catalog, then ``SHOW DATABASES`` and
a small aggregation, four each): 5.8-6.7 s instead of 6.2-7.2 s, and 6.7-7.6 CPU s of the JVM
instead of 7.2-8.2. The signatures protect nothing here: pip checked the wheel's hashes when it
installed PySpark, and the jar's classes stay byte for byte as they were.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import zipfile
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


SIGNATURE_SUFFIXES = (".SF", ".RSA", ".DSA", ".EC")


def is_signature(name: str) -> bool:
    """Whether the jar entry ``name`` is a signature file (``META-INF/X.SF``) or block (``.RSA`` ...)."""
    folder, _, base = name.rpartition("/")
    return folder.upper() == "META-INF" and base.upper().endswith(SIGNATURE_SUFFIXES)


def main_section(manifest: bytes) -> bytes:
    """A manifest's main attributes without the per-entry sections (a signed jar's digests)."""
    text = manifest.replace(b"\r\n", b"\n")
    main, _, _ = text.partition(b"\n\n")
    return main.rstrip(b"\n") + b"\n"


def unsign(jar: Path) -> bool:
    """Remove ``jar``'s signatures (rewritten next to it, then moved into place); every other
    entry stays as it was. A jar without signatures is left alone, its modification time too (an
    archive holds the times of the jars it was dumped from). Whether it was rewritten."""
    with zipfile.ZipFile(jar) as z:
        infos = z.infolist()
        if not any(is_signature(i.filename) for i in infos):
            return False
        partial = jar.with_name(jar.name + ".unsigning")  # not a *.jar: never on a classpath
        try:
            with zipfile.ZipFile(partial, "w") as out:
                for info in infos:
                    if is_signature(info.filename):
                        continue
                    data = z.read(info)
                    if info.filename.upper() == "META-INF/MANIFEST.MF":
                        data = main_section(data)
                    out.writestr(info, data)
            os.replace(partial, jar)
        finally:
            partial.unlink(missing_ok=True)
    return True


def unsign_spark_jars() -> list[str]:
    """:func:`unsign` every jar in PySpark's ``jars`` folder; the names of those rewritten."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return [j.name for j in sorted(jars.glob("*.jar")) if unsign(j)]


def main() -> None:
    archive = Path(sys.argv[1]).resolve()
    archive.unlink(missing_ok=True)
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off,cds+dynamic=off"
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-cds-"))
    try:
        unsigned = unsign_spark_jars()
    except OSError as exc:  # a read-only install: the archive then holds the rest
        print(f"warning: Spark's signed jars stay signed, and out of the archive ({exc})", file=sys.stderr)
    else:
        if unsigned:
            print(f"jvm-archive: signatures removed from {', '.join(unsigned)}, whose classes can now be archived")
    try:
        exercise(work)
    except Exception as exc:  # the archive is an optimization: never fail the build for it
        print(f"warning: no JVM class archive ({type(exc).__name__}: {exc}); the tests run without it",
              file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
