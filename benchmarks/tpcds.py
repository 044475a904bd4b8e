"""TPC-DS data for benchmarks: a sandbox with TPC-DS ``customer`` loaded (see cdc/tpcds.py).

Scale factor 1 is 100,000 customers; scale factor 100 is 2,000,000.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from binlog.mysql.types import quote_ident
from cdc.app.sandbox.mysql import MariaDbSandbox, Sandbox
from cdc.app.tpcds import (  # noqa: F401  (re-exported for the benchmark scripts)
    CUSTOMER_COLUMNS,
    customer_ddl,
    customer_rows,
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


def buffer_pool_mib(scale: int) -> int:
    """A buffer pool that holds customer at ``scale`` (0.4 GiB per million rows, at least 1 GiB,
    at most half the machine's memory), so reads measure the CPU path, not the disk."""
    wanted = max(1024, int(customer_rows(scale) / 1e6 * 0.4 * 1024))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return min(wanted, memory // 2)


def start_benchmark_sandbox(scale: int = 100) -> Sandbox:
    """A local mariadbd whose buffer pool holds customer at ``scale``."""
    return MariaDbSandbox([f"--innodb-buffer-pool-size={buffer_pool_mib(scale)}M"]).start()


# Pages per second InnoDB may write back while settle() waits (a local disk takes far more than 200).
SETTLE_IO_CAPACITY = 20000


def settle(box: Sandbox, timeout_s: float = 120.0) -> float:
    """Wait until InnoDB has flushed the load's dirty pages (seconds waited).

    Right after a bulk load the server writes its dirty pages back for a minute or more, on the
    same two cores the measurements use: the first phases would then run on a busier machine
    than the last ones. The wait lifts InnoDB's flushing budget (``innodb_io_capacity``, 200
    pages/s by default): SF10's 5,154 dirty pages took 45.7 s at the default.
    """
    started = time.monotonic()
    with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.innodb_max_dirty_pages_pct, @@GLOBAL.innodb_io_capacity,"
                    " @@GLOBAL.innodb_io_capacity_max")
        (saved, capacity, capacity_max) = cur.fetchone() or (90, 200, 2000)
        cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = 0")
        cur.execute(f"SET GLOBAL innodb_io_capacity_max = {SETTLE_IO_CAPACITY}")
        cur.execute(f"SET GLOBAL innodb_io_capacity = {SETTLE_IO_CAPACITY}")
        try:
            while time.monotonic() - started < timeout_s:
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
                row = cur.fetchone()
                if row is None or int(row[1]) < 64:
                    break
                time.sleep(0.5)
        finally:
            cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = %s", (float(saved),))
            cur.execute("SET GLOBAL innodb_io_capacity = %s", (int(capacity),))
            cur.execute("SET GLOBAL innodb_io_capacity_max = %s", (int(capacity_max),))
    return time.monotonic() - started


@contextlib.contextmanager
def customer_sandbox(scale: int) -> Iterator[CustomerTable]:
    """Start a sandbox, generate and load customer at ``scale``; stop and clean up on exit."""
    box = start_benchmark_sandbox(scale)
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-tpcds-"))
    try:
        csv_file = generate_customer(scale, work)
        database = box.create_database("tpcds")
        rows = load_customer(box, database, csv_file)
        csv_file.unlink()
        settle(box)
        yield CustomerTable(box=box, database=database, table="customer", rows=rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        box.stop()


class Writer(threading.Thread):
    """Random single-row UPDATEs at about ``rate`` per second until stopped (or ``limit`` s).

    ``admin`` is any sandbox endpoint whose ``connect(database)`` gives a DB-API connection with
    ``%s`` parameters (MariaDB's, PostgreSQL's); a server's subclass gives its SQL (``_sql``)."""

    def __init__(self, admin: Any, table: Any, rate: float,
                 limit: float = 3600.0) -> None:
        super().__init__(name="writer", daemon=True)
        self.admin, self.table, self.rate, self.limit = admin, table, rate, limit
        self.stopping = threading.Event()
        self.updates = 0
        self.seconds = 0.0
        self.error: str | None = None

    def run(self) -> None:
        started = time.perf_counter()
        try:
            self._write(started)
        except Exception as exc:  # reported with the counts; the readers go on
            self.error = repr(exc)
        self.seconds = time.perf_counter() - started

    def _sql(self) -> str:
        """The UPDATE of one row (its key is the one ``%s``), in the server's SQL."""
        return (f"UPDATE {quote_ident(self.table.table)} SET `c_last_review_date_sk` = "
                "COALESCE(`c_last_review_date_sk`, 0) + 1 WHERE `c_customer_sk` = %s")

    def _write(self, started: float) -> None:
        sql = self._sql()
        rng = random.Random(42)
        with contextlib.closing(self.admin.connect(self.table.database)) as conn, \
                conn.cursor() as cur:  # pymysql's and psycopg's cursors alike
            while not self.stopping.is_set() and time.perf_counter() - started < self.limit:
                cur.execute(sql, (rng.randint(1, self.table.rows),))
                self.updates += 1
                pause = started + self.updates / self.rate - time.perf_counter()
                if pause > 0:
                    self.stopping.wait(pause)

    def stop(self) -> None:
        self.stopping.set()
        self.join()
