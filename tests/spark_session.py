"""The test run's local Spark session, one per pytest process.

Its warehouse, where registering a table by name creates the table's database folder
(``<db>.db``), is a temp folder: Spark's default is ``spark-warehouse`` in the working directory,
which left a folder per test database in the checkout.
"""
from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any


@functools.cache
def _temp_warehouse() -> Path:
    path = Path(tempfile.mkdtemp(prefix="spark-cdc-tests-warehouse-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# The tests give every JVM they start C1 only (SPARK_SUBMIT_OPTS, the Makefile's TEST_JVM_OPTS):
# most are drivers that live for seconds. This process's own session is the exception. It lives as
# long as the pytest worker (most of a CI run) and does the in-process tests' Spark work (delta-spark's
# merges, the checks' reads), so C2's compiles pay for themselves there. The delta-spark cases of
# tests/test_sink_contract.py and tests/test_delta_tables.py, one pytest process, 2026-12-07: 85 s
# of test time with C1, 49 s with C2 in that JVM (its warm-up included); drivers that a test starts
# and kills were slower with C2 (the SIGKILL case 91 s against 112 s), so they keep C1.
_C1_ONLY = re.compile(r"\s*-XX:TieredStopAtLevel=\d+")


def run_session(app_name: str = "spark-cdc-tests", warehouse: str | Path | None = None,
                long_lived: bool = True) -> Any:
    """This process's local session (made on first use, 2 threads); its warehouse in
    ``warehouse``, or in a temp folder removed when the process exits. ``long_lived``: its JVM
    gets both compilers (see :data:`_C1_ONLY`); a driver process a test kills passes False."""
    from cdc.spark.session import environment, local_session

    where = warehouse if warehouse is not None else _temp_warehouse()
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if long_lived:
        options = _C1_ONLY.sub("", options).strip()
    with environment({"SPARK_SUBMIT_OPTS": options}):
        return local_session(app_name, parallelism=2, **{"spark.sql.warehouse.dir": str(where)})
