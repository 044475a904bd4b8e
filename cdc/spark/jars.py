"""The project's JVM jars: where ``scripts/jars.sh`` (``make setup``) put them, and checks.

``jars/spark`` holds what every Spark session of the project loads through ``spark.jars``
(delta-spark, spark-sql-kafka, JDBC drivers); ``jars/kafka`` the Kafka broker's classpath;
``jars/pulsar`` the Pulsar standalone broker's; ``jars/pravega`` Pravega's standalone server. The
folder is ``$SPARK_CDC_JARS`` or ``jars/`` at the project root. Nothing is downloaded at run time:
a missing folder is an error that names the fix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cdc.model.errors import CdcError, Terminal

ROOT = Path(__file__).resolve().parents[2]
_DELTA_JAR = re.compile(r"^delta-spark_2\.13-(\d+\.\d+\.\d+)\.jar$")
# delta-spark release -> the Spark release it is built for (its pom's spark.version)
DELTA_BUILT_FOR_SPARK = {"4.4.0": "4.2.0"}


class JarsMissing(CdcError, Terminal):
    """The project's jars are not where Spark needs them."""


class VersionMismatch(CdcError, Terminal):
    """The jars were built for another Spark version than the one installed."""


def jars_dir() -> Path:
    return Path(os.environ.get("SPARK_CDC_JARS") or ROOT / "jars")


def _jars(kind: str) -> list[str]:
    folder = jars_dir() / kind
    found = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not found:
        raise JarsMissing(f"no jars in {folder}: run `make setup` (or scripts/jars.sh) once to resolve "
                          f"them from Maven Central, or point SPARK_CDC_JARS at a folder that has them",
                          folder=str(folder))
    return found


def spark_jars() -> list[str]:
    """Absolute paths of the jars every Spark session loads (``spark.jars``).

    Raises:
        JarsMissing: ``make setup`` has not resolved them.
        VersionMismatch: delta-spark's jar is built for another Spark than pyspark's.
    """
    jars = _jars("spark")
    check_versions(jars)
    return jars


def kafka_classpath() -> str:
    """The Kafka broker's classpath (``jars/kafka/*``).

    Raises:
        JarsMissing: ``make setup`` has not resolved them.
    """
    return os.pathsep.join(_jars("kafka"))


def pulsar_classpath() -> str:
    """The Pulsar standalone broker's classpath (``jars/pulsar/*``).

    Raises:
        JarsMissing: ``make setup`` has not resolved them.
    """
    return os.pathsep.join(_jars("pulsar"))


def pravega_classpath() -> str:
    """Pravega's standalone server's classpath (``jars/pravega/*``).

    Raises:
        JarsMissing: ``make setup`` has not resolved them.
    """
    return os.pathsep.join(_jars("pravega"))


def jar(prefix: str) -> str:
    """The one jar of ``jars/spark`` whose name starts with ``prefix`` (e.g. a JDBC driver).

    Raises:
        JarsMissing: there is none.
    """
    matches = [j for j in _jars("spark") if Path(j).name.startswith(prefix)]
    if not matches:
        raise JarsMissing(f"no {prefix}*.jar in {jars_dir() / 'spark'}: run `make setup`", prefix=prefix)
    return matches[0]


def check_versions(jars: list[str], spark_version: str | None = None) -> None:
    """Refuse a delta-spark jar built for another Spark than the installed pyspark.

    Raises:
        VersionMismatch: the message names both versions and the fix.
    """
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    for path in jars:
        m = _DELTA_JAR.match(Path(path).name)
        if not m:
            continue
        wanted = DELTA_BUILT_FOR_SPARK.get(m.group(1))
        if wanted is not None and wanted != spark_version:
            raise VersionMismatch(
                f"{Path(path).name} is built for Spark {wanted}, but pyspark {spark_version} is installed: "
                f"install pyspark=={wanted} (pip install -e . does), or resolve the jars of a delta-spark "
                f"release built for {spark_version} (jvm/spark/pom.xml, then scripts/jars.sh)",
                delta=m.group(1), spark=spark_version)
