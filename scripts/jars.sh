#!/usr/bin/env bash
# Resolve the project's JVM jars from Maven Central once, into jars/ (nothing downloads at run time):
#   jars/spark/  delta-spark, spark-sql-kafka, JDBC drivers: every Spark session's spark.jars
#                (jars pyspark already ships are dropped: pyspark's copies win);
#   jars/kafka/  Apache Kafka's broker (KRaft), for `python -m cdc sandbox kafka` and the tests;
#   jars/pulsar/ Apache Pulsar's standalone broker, for `python -m cdc sandbox pulsar` and the tests;
#   jars/pravega/ Pravega's standalone server, for `python -m cdc sandbox pravega` and the tests;
#   jars/debezium/  Debezium 3.5's embedded engine and connectors, and the harnesses compiled from
#                jvm/debezium/src (tests/test_debezium_differential.py, benchmarks/kafka_bench.py).
# Skips a folder whose pom (and sources) have not changed since it was resolved (a stamp holds
# their hash).
# The folders resolve side by side (Maven's downloads are mostly waiting on the network); one that
# fails is resolved again alone, after the others, before the script gives up.
# Usage: scripts/jars.sh [python]   (the interpreter that has pyspark; default .venv/bin/python)
#        scripts/jars.sh --fetch    (only resolve the folders, no Python needed: scripts/setup.sh runs it
#                                    while pip installs, then runs the script again to finish)
set -euo pipefail
cd "$(dirname "$0")/.."
fetch_only=0
[[ "${1:-}" == "--fetch" ]] && { fetch_only=1; shift; }
PY=${1:-.venv/bin/python}
OUT=${SPARK_CDC_JARS:-jars}
[[ "$OUT" == /* ]] || OUT="$PWD/$OUT"

for tool in java javac jar mvn; do
  command -v "$tool" >/dev/null || { echo "jars: $tool is missing: install a Java 17 JDK and Maven (apt-get install openjdk-17-jdk-headless maven)" >&2; exit 1; }
done

resolve() {  # resolve <name>: jvm/<name>/pom.xml -> $OUT/<name>/, and jvm/<name>/src compiled into a jar there
  local name=$1 pom="jvm/$1/pom.xml" dir="$OUT/$1" src="jvm/$1/src/main/java" stamp
  stamp=$(cat "$pom" $( [[ -d "$src" ]] && find "$src" -name '*.java' | sort) | sha256sum | cut -c1-16)
  if [[ -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$stamp" ]]; then
    return
  fi
  echo "jars: resolving $pom into $dir (Maven Central, once)"
  rm -rf "$dir" "$dir.tmp"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dir.tmp"
  if [[ -d "$src" ]]; then
    javac -nowarn --release 17 -cp "$dir.tmp/*" -d "$dir.tmp/classes" $(find "$src" -name '*.java')
    jar cf "$dir.tmp/spark-cdc-$name.jar" -C "$dir.tmp/classes" .
    rm -rf "$dir.tmp/classes"
  fi
  mv "$dir.tmp" "$dir"
  echo "$stamp" > "$dir/.stamp"
}

NAMES=(kafka pulsar pravega spark debezium)
mkdir -p "$OUT"
pids=()
for name in "${NAMES[@]}"; do
  resolve "$name" > "$OUT/.$name.log" 2>&1 &
  pids+=($!)
done
failed=()
for i in "${!NAMES[@]}"; do
  wait "${pids[$i]}" || failed+=("${NAMES[$i]}")
  cat "$OUT/.${NAMES[$i]}.log"; rm -f "$OUT/.${NAMES[$i]}.log"
done
for name in "${failed[@]}"; do  # a race in the shared local repository, or the network: once more, alone
  echo "jars: resolving jvm/$name/pom.xml again, alone"
  resolve "$name"
done
(( fetch_only )) && exit 0
# Drop the jars pyspark ships itself (same artifact, any version), so no class is loaded twice.
"$PY" - "$OUT/spark" <<'PYEOF'
import os, re, sys
import pyspark
def artifact(name):
    return re.sub(r"-\d[\w.\-]*\.jar$", "", name)
ours, theirs = sys.argv[1], os.path.join(os.path.dirname(pyspark.__file__), "jars")
shipped = {artifact(n) for n in os.listdir(theirs) if n.endswith(".jar")}
# RoaringBitmap's shims and commons-logging come with artifacts pyspark ships in other versions.
extra = {"shims", "commons-logging"}
for name in sorted(os.listdir(ours)):
    if name.endswith(".jar") and (artifact(name) in shipped or artifact(name) in extra):
        os.remove(os.path.join(ours, name))
kept = sorted(n for n in os.listdir(ours) if n.endswith(".jar"))
print(f"jars: {len(kept)} jars in {ours} for Spark (pyspark {pyspark.__version__} ships the rest)")
PYEOF
echo "jars: $(ls "$OUT/kafka" | grep -c '\.jar$') jars in $OUT/kafka for the Kafka broker"
echo "jars: $(ls "$OUT/pulsar" | grep -c '\.jar$') jars in $OUT/pulsar for the Pulsar broker"
echo "jars: $(ls "$OUT/pravega" | grep -c '\.jar$') jars in $OUT/pravega for the Pravega server"
echo "jars: $(ls "$OUT/debezium" | grep -c '\.jar$') jars in $OUT/debezium for Debezium (the differential tests, benchmarks/kafka_bench.py)"
