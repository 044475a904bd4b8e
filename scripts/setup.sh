#!/usr/bin/env bash
# Install what spark-cdc needs on a Debian/Ubuntu machine, skipping what is already there:
#   Debian packages: mariadb-server, mariadb-client (the test/demo server), a Java 17 JDK and
#                    Maven (Spark, the Kafka broker, resolving the jars), PostgreSQL, and
#                    libmariadb-dev, pkg-config and gcc to build the optional mysqlclient backend;
#   Python:          a virtualenv in $VENV (default .venv) with the project and its extras
#                    (dev: the tests; demo: `make demo`; docs: `make docs`);
#   JVM jars:        scripts/jars.sh resolves jvm/*/pom.xml from Maven Central into jars/, once;
#   start-up:        scripts/pyspark_bytecode.py compiles PySpark's zips and drops their tests;
#                    the numba kernels that decode binlog rows are compiled into their cache.
# Usage: scripts/setup.sh [--bench]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
EXTRAS=${EXTRAS:-dev,demo,docs}
want_bench=0
[[ "${1:-}" == "--bench" ]] && { want_bench=1; EXTRAS="$EXTRAS,bench"; }

have() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]; }

packages=()
have mariadbd || packages+=(mariadb-server)
have mariadb || packages+=(mariadb-client)
have java || packages+=(openjdk-17-jdk-headless)
have mvn || packages+=(maven)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || packages+=(postgresql)  # Postgres sandbox (tests)
# mysqlclient (the optional fetch backend the tests also cover) builds against MariaDB's C client
have mariadb_config || have mysql_config || packages+=(libmariadb-dev)
have pkg-config || packages+=(pkg-config)
have gcc || packages+=(gcc libc6-dev)
"$PYTHON" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || packages+=(python3-dev)

if (( ${#packages[@]} )); then
  echo "setup: installing Debian packages: ${packages[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to apt-get install ${packages[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  # The Debian package may start a system mariadb service; we never use it (tests start their own).
fi

# Maven's downloads (a few hundred MB of jars) go on while pip installs; the second jars.sh below
# finds them resolved, or resolves what the first could not, and reports it.
scripts/jars.sh --fetch > "${TMPDIR:-/tmp}/spark-cdc-jars-fetch.log" 2>&1 &
fetch_pid=$!

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "setup: creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# uv (from PyPI) installs the packages: it downloads them side by side, and builds PySpark's sdist
# (400 MB of jars) in place of pip's copy upon copy; pip does it when uv cannot be had.
install() {
  if "$VENV/bin/python" -m pip install -q uv 2>/dev/null; then
    "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "$@"
  else
    "$VENV/bin/python" -m pip install -q "$@"
  fi
}
echo "setup: installing spark-cdc[$EXTRAS] into $VENV"
install -e ".[$EXTRAS]"
# optional: a build failure leaves the pymysql and connectorx backends (tests/test_fetch.py skips it)
"$VENV/bin/python" -c 'import MySQLdb' 2>/dev/null || install -e ".[mysqlclient]" \
  || echo "setup: WARNING: mysqlclient did not build (see above); its tests will be skipped" >&2
# Spark's Python processes import PySpark from its zips, compiling it in each one: add bytecode
# (and leave out the test modules, whose entries each process's zip importers read again)
"$VENV/bin/python" scripts/pyspark_bytecode.py
# the kernels that decode binlog rows events, compiled into binlog/mysql/__pycache__ once here
# (10-16 s) rather than by the first MySQL job's worker daemon, which loads them before it forks
"$VENV/bin/python" -c 'from binlog.mysql import rows_kernels; rows_kernels.load()'
wait "$fetch_pid" || echo "setup: the jars' first resolution failed (${TMPDIR:-/tmp}/spark-cdc-jars-fetch.log); resolving again"
scripts/jars.sh "$VENV/bin/python"
if (( want_bench )); then  # the Flink CDC and Debezium harnesses of benchmarks/peers.py, MariaDB and PostgreSQL (Maven Central, once)
  "$VENV/bin/python" benchmarks/peers.py --build-only
fi
echo "setup: done ($("$VENV/bin/python" -c 'import pyspark; print("pyspark", pyspark.__version__)'), $(java -version 2>&1 | head -1))"
