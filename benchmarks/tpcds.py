"""TPC-DS data for benchmarks: a sandbox with TPC-DS ``customer`` loaded (see cdc/tpcds.py).

Scale factor 1 is 100,000 customers; scale factor 100 is 2,000,000.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cdc.sandbox import MariaDbSandbox, Sandbox
from cdc.tpcds import (  # noqa: F401  (re-exported for the benchmark scripts)
    CUSTOMER_COLUMNS,
    CUSTOMER_ROWS_PER_SCALE,
    customer_ddl,
    generate_customer,
    load_customer,
    tpcgen_cli,
)


@dataclass(frozen=True)
class CustomerTable:
    """A loaded TPC-DS customer table in a running sandbox."""

    box: Sandbox
    database: str
    table: str
    rows: int


def start_benchmark_sandbox() -> Sandbox:
    """A local mariadbd whose buffer pool holds SF100 customer, so reads measure the CPU path."""
    return MariaDbSandbox(["--innodb-buffer-pool-size=1G"]).start()


@contextlib.contextmanager
def customer_sandbox(scale: int) -> Iterator[CustomerTable]:
    """Start a sandbox, generate and load customer at ``scale``; stop and clean up on exit."""
    box = start_benchmark_sandbox()
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-tpcds-"))
    try:
        csv_file = generate_customer(scale, work)
        database = box.create_database("tpcds")
        rows = load_customer(box, database, csv_file)
        csv_file.unlink()
        yield CustomerTable(box=box, database=database, table="customer", rows=rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        box.stop()
