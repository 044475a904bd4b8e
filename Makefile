# The two commands a newcomer needs: `make demo` and `make test`. Both install what is missing.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# Spark workers must run the interpreter that has the project installed.
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup demo test test-fast test-slow lint typecheck docs bench bench-quick clean

# A class-data-sharing archive of the Spark driver's classes, built once per install
# (scripts/jvm_archive.py): a JVM start then skips loading and verifying Spark's classes (a session
# start here: 24 s without, 10 s with). The tests map it, and so does every local session
# (cdc.spark.session.jvm_options). A JVM with another classpath or JDK ignores it, quietly. Its dump
# first removes the signatures of Spark's signed jars (janino), whose classes it could not hold.
JVM_ARCHIVE := $(VENV)/spark-classes.jsa

setup: $(STAMP) $(JVM_ARCHIVE)

$(STAMP): pyproject.toml scripts/setup.sh
	scripts/setup.sh
	touch $@

demo: setup
	$(PY) -m cdc demo

# Two pytest workers (each with its own MariaDB, Postgres, Kafka and Spark) keep a 2-core
# machine busy; TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
# The tests start many short-lived Spark JVMs (spark-submit reads SPARK_SUBMIT_OPTS): C1 only and
# the serial collector spend less CPU starting them on 2 cores (a job's local session uses the same:
# cdc.spark.session.LIGHT_JVM_OPTIONS). Each pytest worker's own session, which lives for the whole
# run, gets C2 back (tests/spark_session.py).
TEST_JVM_OPTS ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
# They also map the class archive (JVM_ARCHIVE above), which is dumped with these options.
$(JVM_ARCHIVE): $(STAMP) scripts/jvm_archive.py
	SPARK_SUBMIT_OPTS="$(TEST_JVM_OPTS)" $(PY) scripts/jvm_archive.py $@

PYTEST = SPARK_SUBMIT_OPTS="$(TEST_JVM_OPTS) -XX:SharedArchiveFile=$(abspath $(JVM_ARCHIVE)) -Xlog:cds=off,cds+dynamic=off" \
	  $(PY) -m pytest -v --durations=40 \
	  $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)

# `make test` runs the whole suite in one pytest session, as CI (.ci/run) does: one set of servers
# per worker, and the slow cases (SIGKILL rounds, clusters, multi-run jobs: most of the time) dealt
# first, the rest filling in behind them (tests/conftest.py). `make test-fast` leaves the slow ones
# out, for a quick loop; `make test-slow` runs only them.
test: setup lint typecheck
	$(PYTEST)

test-fast: setup lint typecheck
	$(PYTEST) -m "not slow"

test-slow: setup
	$(PYTEST) -m slow

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

typecheck: setup
	$(VENV)/bin/mypy

# The docs site (mkdocs.yml, sources in docs/) into build/site. --strict fails on any warning: a broken
# link or anchor, a page left out of the nav. CI (.ci/run) runs it. Its generated pages are checked by
# tests (scripts/docs_pages.py, benchmarks/readme_tables.py --check).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: setup
	scripts/setup.sh --bench
	$(PY) benchmarks/tpcds_customer.py --scale 100
	$(PY) benchmarks/postgres_bench.py --scale 100
	$(PY) benchmarks/peers.py --scale 100
	$(PY) benchmarks/peers.py --source postgres --scale 100
	$(PY) benchmarks/kafka_bench.py --scale 1
	$(PY) benchmarks/pulsar_bench.py --scale 1
	$(PY) benchmarks/pravega_bench.py --scale 1

# Every benchmark in its quick form (fewer phases, smaller tables): under 10 minutes on 2 cores. Results
# land in benchmarks/results/*-quick.json; benchmarks/readme_tables.py renders the tables of README and docs/performance/history.md from them.
bench-quick: setup
	scripts/setup.sh --bench
	$(PY) benchmarks/tpcds_customer.py --scale 10 --quick
	$(PY) benchmarks/postgres_bench.py --scale 1 --quick
	$(PY) benchmarks/peers.py --scale 10 --quick
	$(PY) benchmarks/peers.py --source postgres --scale 1 --quick
	$(PY) benchmarks/kafka_bench.py --scale 1 --quick
	$(PY) benchmarks/pulsar_bench.py --scale 1 --quick
	$(PY) benchmarks/pravega_bench.py --scale 1 --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo .bench *.egg-info build/site
