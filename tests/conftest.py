"""Shared fixtures: one real CDC-configured server per test session, one database per test.

No mocks: every integration test talks to a real MariaDB (or MySQL 8 through testcontainers when
a Docker engine answers; see cdc/app/sandbox/mysql.py).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.dialect import MySqlDialect
from binlog.mysql.reader import BinlogReaderOptions, MySqlBinlogReader
from cdc.app.sandbox.mysql import Endpoint, MariaDbSandbox, Sandbox, start_sandbox
from cdc.model.schema import TableId

# Spark's Python workers and the drivers tests start must import test helpers that travel to
# them pickled (tests/faults.py): put this folder on their PYTHONPATH before any of them starts.
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Spark's scratch folders (each context's ``spark-<uuid>``, block managers, executors' work)
    and the JVMs' temp files (native libraries unpacked, artifacts) of every JVM the tests start
    go to this test run's temp folder, which pytest prunes (it keeps the last 3 runs), instead of
    /tmp: a JVM the tests SIGKILL never removes its own (after a day of test runs this machine's
    /tmp held 314 ``spark-<uuid>`` folders, 4.5 GB, 147 block managers and 287 unpacked lz4 libraries).
    """
    scratch = tmp_path_factory.mktemp("spark-scratch")
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Djava.io.tmpdir={scratch}".strip()
    return scratch


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[Sandbox]:
    """A server with binlog ROW/FULL/FULL metadata, GTIDs, server_id and a least-privilege CDC user."""
    box = start_sandbox()
    try:
        yield box
    finally:
        box.stop()


@pytest.fixture(scope="session")
def india_server() -> Iterator[Sandbox]:
    """A second server whose default time zone is +05:30 (time-zone tests)."""
    box = MariaDbSandbox(extra_args=["--default-time-zone=+05:30"]).start()
    try:
        yield box
    finally:
        box.stop()


@pytest.fixture
def database(mysql_server: Sandbox) -> Iterator[str]:
    """A fresh, empty database for one test; dropped afterwards."""
    name = mysql_server.create_database()
    try:
        yield name
    finally:
        mysql_server.drop_database(name)


@pytest.fixture
def admin(mysql_server: Sandbox, database: str) -> Iterator[pymysql.connections.Connection]:
    """An autocommit admin connection using the test's database (for DDL and test DML)."""
    with contextlib.closing(mysql_server.admin.connect(database)) as conn:
        yield conn


@pytest.fixture
def cdc_endpoint(mysql_server: Sandbox) -> Endpoint:
    """Credentials of the least-privilege CDC user (SELECT, REPLICATION SLAVE/CLIENT only)."""
    return mysql_server.cdc


@pytest.fixture
def cdc_conn(cdc_endpoint: Endpoint) -> Iterator[pymysql.connections.Connection]:
    """A connection as the CDC user."""
    with contextlib.closing(cdc_endpoint.connect()) as conn:
        yield conn


@pytest.fixture
def mysql_dialect(cdc_endpoint: Endpoint, database: str) -> MySqlDialect:
    """The MySQL dialect as the job builds it: the CDC user, the test database's tables."""
    config = MySqlSourceConfig(hostname=cdc_endpoint.host, port=cdc_endpoint.port, username=cdc_endpoint.user,
                               password=cdc_endpoint.password, tables=[f"{database}\\..*"],
                               server_id="6100-6109")
    return MySqlDialect(config)


_server_ids = itertools.count(5400)


@pytest.fixture
def reader(cdc_endpoint: Endpoint, database: str) -> Iterator[Callable[..., MySqlBinlogReader]]:
    """Build binlog readers for tables of the test database, each with a fresh server id; closes
    them. ``make(*tables, endpoint=..., db=..., server_id=..., **BinlogReaderOptions options)``."""
    made: list[MySqlBinlogReader] = []

    def make(*tables: str, endpoint: Endpoint = cdc_endpoint, db: str = database,
             server_id: int | None = None, **options: Any) -> MySqlBinlogReader:
        config = BinlogReaderOptions(endpoint, server_id or next(_server_ids),
                                    tuple(TableId(db, t) for t in tables), **options)
        made.append(MySqlBinlogReader(config))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session (2 threads) for the whole test run, with `mysql-cdc` registered."""
    from spark_session import run_session

    from cdc.spark.source import MySqlCdcDataSource

    session = run_session()
    session.dataSource.register(MySqlCdcDataSource)
    try:
        yield session
    finally:
        session.stop()

# The servers of the other seams' implementations: tests/postgres_server.py, tests/kafka_broker.py,
# tests/pulsar_broker.py, tests/pravega_server.py.
pytest_plugins = ["postgres_server", "kafka_broker", "pulsar_broker", "pravega_server"]


# Tests whose delta-spark variant is ``slow``: each delta-spark MERGE is several Spark jobs, and
# these variants took 40-170 s each in a CI rehearsal of 2026-12-02 (about 7 minutes of `make
# test` on 2 cores, 839 CPU-bound seconds of its workers). `make test-fast` keeps the delta-spark
# cases of the sink contract that commit a batch or two; CI runs all of them.
SLOW_ON_DELTA_SPARK = frozenset({
    "test_crash_and_restart_is_exact", "test_keys_of_every_kind_through_one_stream",  # test_pipeline.py
    "test_random_batches_match_the_model_exactly_once",  # test_sink_contract.py
    "test_evolve_applies_each_ddl_exactly",  # test_schema_evolve.py
    "test_primary_key_update_and_delete_reinsert_in_one_batch",  # test_delta_tables.py
    "test_merge_applies_snapshot_rows_over_existing_keys",
    "test_tables_read_the_same_with_delta_rs_duckdb_polars_and_spark",
})


# How long each test took in a CI rehearsal (node id -> seconds; scripts/slow_durations.py
# writes it from a run's JUnit XML). Only the order the workers start the slow tests in follows it:
# a stale or missing entry changes no test and no result.
SLOW_SECONDS = Path(TESTS_DIR) / "slow_durations.json"


def deal_slow_first(slow: list[str], fast: list[str], workers: int, seconds: dict[str, float]) -> list[str]:
    """The collection order that starts each of ``workers`` workers on its share of the slow tests,
    longest first (by ``seconds``; one it lacks counts as the median of the others).

    pytest-xdist's work-stealing scheduler hands each worker a contiguous 1/W of the collection
    (len // W each, the last takes the rest) and lets an idle worker steal from the tail of a busy
    one's queue. The slow tests go to the heads of the shares, longest first and dealt in a snake
    (0, 1, 1, 0, ...: the shares' sums stay close), so each queue ends in its shortest tests and
    the run does not end with one worker idle while the other is minutes into a SIGKILL suite.
    The fast tests fill the shares in collection order (a module's tests stay together).
    """
    known = sorted(seconds[n] for n in slow if n in seconds)
    default = known[len(known) // 2] if known else 0.0
    by_length = sorted(slow, key=lambda n: -seconds.get(n, default))  # stable: ties keep their order
    heads: list[list[str]] = [[] for _ in range(workers)]
    for i, node in enumerate(by_length):
        lap, at = divmod(i, workers)
        heads[at if lap % 2 == 0 else workers - 1 - at].append(node)
    share = (len(slow) + len(fast)) // workers
    ordered: list[str] = []
    for w, head in enumerate(heads):
        size = share if w < workers - 1 else len(slow) + len(fast) - len(ordered)
        fill = max(0, size - len(head))
        ordered += head + fast[:fill]
        fast = fast[fill:]
    return ordered + fast


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the delta-spark variants of :data:`SLOW_ON_DELTA_SPARK` ``slow`` (pytest's ``-m``
    deselects after this hook), then, under pytest-xdist, order the collection with
    :func:`deal_slow_first`. Every worker computes the same order (xdist checks), and a run
    without workers keeps the collection order.
    """
    for item in items:
        if getattr(item, "originalname", None) in SLOW_ON_DELTA_SPARK and "delta-spark" in item.nodeid:
            item.add_marker(pytest.mark.slow)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    seconds = json.loads(SLOW_SECONDS.read_text()) if SLOW_SECONDS.exists() else {}
    by_id = {i.nodeid: i for i in items}
    slow = [i.nodeid for i in items if i.get_closest_marker("slow")]
    fast = [i.nodeid for i in items if not i.get_closest_marker("slow")]
    items[:] = [by_id[n] for n in deal_slow_first(slow, fast, workers, seconds)]
