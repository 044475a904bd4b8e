"""`make demo`: TPC-DS customer in a throwaway MariaDB, captured into Delta by the real job.

Steps (each prints what it did):

1. start a throwaway MariaDB (cdc/sandbox.py) and load TPC-DS ``customer`` (cdc/tpcds.py);
2. run the job of ``configs/demo.yaml`` with ``--once`` (snapshot, then the binlog up to now);
3. update, delete and insert a few customers;
4. run the job with ``--once`` again (a restart: it resumes from the checkpoint);
5. query the Delta mirror and changelog by name with Spark SQL (the job registered them in its
   catalog, ``<state_dir>/catalog``) and check that the mirror equals the source; print the
   ``python -m cdc sql`` command that runs more queries on the same tables.

Runs on the driver. The work directory (default ``.demo``) is wiped first; the server is removed
at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cdc.app.config import load_config
from cdc.app.runner import JobRunner, catalog_dir
from cdc.app.sandbox.mysql import Sandbox, sandbox
from cdc.app.tpcds import generate_customer, load_customer
from cdc.model.config import JobConfig
from sinks.delta.config import DeltaSinkConfig

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
DATABASE = "tpcds"
UPDATED = (1, 2, 3, 4, 5)
DELETED = (10, 11, 12)
INSERTED = (10_000_001, 10_000_002)


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


@contextlib.contextmanager
def _demo_env(box: Sandbox, workdir: Path) -> Iterator[None]:
    """The variables configs/demo.yaml refers to, set for the duration of the demo."""
    values = {"MYSQL_HOST": box.cdc.host, "MYSQL_PORT": str(box.cdc.port), "MYSQL_PASSWORD": box.cdc.password,
              "CDC_DEMO_DIR": str(workdir)}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def load_tpcds(box: Sandbox, scale: float) -> int:
    """Generate TPC-DS customer at ``scale`` and load it into ``tpcds.customer``; the row count."""
    work = Path(tempfile.mkdtemp(prefix="spark-cdc-demo-"))
    try:
        box.create_database(DATABASE)
        return load_customer(box, DATABASE, generate_customer(scale, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def apply_changes(box: Sandbox) -> None:
    """A few updates, deletes and inserts: the changes the second run must bring over."""
    with contextlib.closing(box.admin.connect(DATABASE)) as conn, conn.cursor() as cur:
        for sk in UPDATED:
            cur.execute("UPDATE customer SET c_email_address = %s, c_preferred_cust_flag = 'Y' "
                        "WHERE c_customer_sk = %s", (f"changed-{sk}@example.com", sk))
        cur.execute("DELETE FROM customer WHERE c_customer_sk IN %s", (DELETED,))
        for sk in INSERTED:
            cur.execute("INSERT INTO customer (c_customer_sk, c_customer_id, c_first_name, c_last_name, "
                        "c_email_address) VALUES (%s, %s, 'New', 'Customer', %s)",
                        (sk, f"NEW{sk:013d}", f"new-{sk}@example.com"))


def source_count(box: Sandbox) -> int:
    with contextlib.closing(box.cdc.connect(DATABASE)) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM customer")
        (count,) = cur.fetchone() or (0,)
        return int(count)


def query_lake(spark: Any) -> tuple[int, list[Any]]:
    """Spark SQL over the mirror and changelog by name; prints the queries and their results."""
    keys = ", ".join(map(str, UPDATED + DELETED + INSERTED))
    queries = [
        f"SELECT op, COUNT(*) AS events FROM {DATABASE}.customer_changelog GROUP BY op ORDER BY op",
        "SELECT c_customer_sk, c_first_name, c_email_address, c_preferred_cust_flag "
        f"FROM {DATABASE}.customer WHERE c_customer_sk IN ({keys}) ORDER BY c_customer_sk",
    ]
    rows: list[Any] = []
    for sql in queries:
        print(f"    spark-sql> {sql}")
        result = spark.sql(sql)
        print("    " + result.toPandas().to_string(index=False).replace("\n", "\n    "))
        rows = result.collect()
    count_query = f"SELECT count(*) FROM {DATABASE}.customer"
    print(f"    spark-sql> {count_query}")
    count = int(spark.sql(count_query).collect()[0][0])
    print(f"    {count}")
    return count, rows


def check_changes(rows: list[Any]) -> list[str]:
    """What the mirror got wrong about the demo's changes (empty when everything arrived)."""
    by_key = {r["c_customer_sk"]: r for r in rows}
    problems = [f"update of {sk} missing" for sk in UPDATED
                if sk not in by_key or by_key[sk]["c_email_address"].strip() != f"changed-{sk}@example.com"]
    problems += [f"delete of {sk} missing" for sk in DELETED if sk in by_key]
    problems += [f"insert of {sk} missing" for sk in INSERTED if sk not in by_key]
    return problems


def run_demo(scale: float = 0.1, workdir: Path | None = None, spark: Any | None = None) -> int:
    """Run the demo end to end; returns an exit code (0 when the mirror equals the source).

    Args:
        scale: TPC-DS scale factor (1 = 100,000 customers; 0.01 = 1,000).
        workdir: where the lake and checkpoint go (wiped first; default ``.demo``).
        spark: a Spark session to use (default: a local one, stopped at the end).
    """
    started = time.monotonic()
    workdir = (workdir or Path(".demo")).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    _step("starting a throwaway MariaDB (temp datadir, free port)")
    with sandbox() as box, _demo_env(box, workdir):
        _step(f"server on {box.cdc.address}; loading TPC-DS customer at scale {scale} with tpcgen-cli")
        rows = load_tpcds(box, scale)
        _step(f"{DATABASE}.customer: {rows} rows")
        from cdc.spark.session import local_session

        config = load_config(DEMO_CONFIG)
        session = spark if spark is not None else local_session("spark-cdc-demo", parallelism=2,
                                                                catalog_dir=catalog_dir(config))
        try:
            return _capture(box, session, config, workdir, started)
        finally:
            if spark is None:
                session.stop()


def _capture(box: Sandbox, spark: Any, config: JobConfig, workdir: Path, started: float) -> int:
    _step(f"python -m cdc run --config {DEMO_CONFIG.relative_to(DEMO_CONFIG.parent.parent)} --once   "
          "(snapshot, then the binlog up to now)")
    print(JobRunner(config, spark).run(once=True).render(), flush=True)
    _step(f"changing the source: update {len(UPDATED)}, delete {len(DELETED)}, insert {len(INSERTED)} customers")
    apply_changes(box)
    _step("running --once again: it resumes from the checkpoint and brings the changes over")
    print(JobRunner(config, spark).run(once=True).render(), flush=True)
    lake = next(s.path for s in config.sink if isinstance(s, DeltaSinkConfig))
    _step(f"querying the tables by name with Spark SQL (files at {lake})")
    mirror_rows, changed = query_lake(spark)
    expected = source_count(box)
    problems = check_changes(changed)
    if mirror_rows != expected:
        problems.append(f"mirror has {mirror_rows} rows, the source {expected}")
    if problems:
        _step("FAILED: " + "; ".join(problems))
        return 1
    _step(f"mirror equals the source ({expected} rows) and holds every change; done in "
          f"{time.monotonic() - started:.1f}s. Lake and checkpoint: {workdir}")
    print(f"    more queries: python -m cdc sql --catalog {catalog_dir(config)} "
          f'"SELECT count(*) FROM {DATABASE}.customer"', flush=True)
    return 0
