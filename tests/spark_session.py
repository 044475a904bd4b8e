"""The test run's local Spark session, one per pytest process.

Its warehouse, where registering a table by name creates the table's database folder
(``<db>.db``), is a temp folder: Spark's default is ``spark-warehouse`` in the working directory,
which left a folder per test database in the checkout.
"""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any


@functools.cache
def _temp_warehouse() -> Path:
    path = Path(tempfile.mkdtemp(prefix="spark-cdc-tests-warehouse-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def run_session(app_name: str = "spark-cdc-tests", warehouse: str | Path | None = None) -> Any:
    """This process's local session (made on first use, 2 threads); its warehouse in
    ``warehouse``, or in a temp folder removed when the process exits."""
    from cdc.spark.session import local_session

    where = warehouse if warehouse is not None else _temp_warehouse()
    return local_session(app_name, parallelism=2, **{"spark.sql.warehouse.dir": str(where)})
