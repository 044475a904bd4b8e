"""Spark Declarative Pipelines fed by spark-cdc (cdc/app/pipelines.py, examples/sdp): the example
pipeline runs as written against a real MariaDB with random writes, primary-key updates and
deletes; every table it keeps equals the source table, after the first run and after a second run
that picks up more changes. A job's changelog feeds a pipeline the same way."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pipeline import Pipeline

from cdc.app.sandbox.mysql import Sandbox
from sinks.delta.tables import read_table

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"orders": "id INT PRIMARY KEY, customer INT, total DECIMAL(10,2), note VARCHAR(40)",
          "items": "order_id INT, line INT, sku VARCHAR(12), PRIMARY KEY (order_id, line)"}


def pipeline(spec: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYSPARK_PYTHON": sys.executable, **env}
    return subprocess.run([sys.executable, "-m", "cdc", "pipeline", "run", "--spec", str(spec)], cwd=ROOT,
                          env=full, capture_output=True, text=True, timeout=900)


def hold_default_connect_port() -> socket.socket | None:
    """A listener on Spark Connect's default port 15002 (None when something else holds it already):
    a pipeline run must not need that port, so that two runs on one host do not collide."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 15002))
    except OSError:
        sock.close()
        return None
    sock.listen()
    return sock


def source_rows(admin: Any, table: str) -> list[tuple[Any, ...]]:
    with admin.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
        return [tuple(r) for r in cur.fetchall()]


def kept_rows(path: Path) -> list[tuple[Any, ...]]:
    rows = read_table(str(path)).to_pylist()  # deletion vectors applied (the job's mirror has them)
    return sorted(tuple(r.values()) for r in rows)


def write_randomly(admin: Any, rng: random.Random, statements: int) -> None:
    """Inserts, updates, deletes and primary-key updates on both tables, a few per transaction."""
    with admin.cursor() as cur:
        for _ in range(statements):
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 4)):
                order, op = rng.randint(1, 60), rng.random()
                if op < 0.35:
                    cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE note = 'upsert'",
                                (order, rng.randint(1, 9), rng.randint(1, 99999) / 100, f"n{rng.random():.6f}"))
                    cur.execute("INSERT IGNORE INTO items VALUES (%s, %s, %s)", (order, rng.randint(1, 3), f"s{order}"))
                elif op < 0.6:
                    cur.execute("UPDATE orders SET total = total + 1, note = %s WHERE id = %s", (f"u{rng.random():.6f}", order))
                elif op < 0.75:
                    cur.execute("UPDATE IGNORE orders SET id = %s WHERE id = %s", (rng.randint(61, 200), order))
                    cur.execute("UPDATE IGNORE items SET line = line + 10 WHERE order_id = %s", (order,))
                else:
                    cur.execute("DELETE FROM orders WHERE id = %s", (order,))
                    cur.execute("DELETE FROM items WHERE order_id = %s AND line = %s", (order, rng.randint(1, 3)))
            cur.execute("COMMIT")


def create_and_fill(admin: Any, rng: random.Random, statements: int) -> None:
    with admin.cursor() as cur:
        for name, columns in TABLES.items():
            cur.execute(f"CREATE TABLE {name} ({columns})")
    write_randomly(admin, rng, statements)


@pytest.mark.slow
def test_the_example_pipeline_keeps_every_table_equal_to_the_source_across_runs(
    tmp_path: Path, mysql_server: Sandbox, database: str, admin: Any
) -> None:
    rng = random.Random(20)
    create_and_fill(admin, rng, 40)
    example = tmp_path / "sdp"
    shutil.copytree(ROOT / "examples" / "sdp", example)
    env = {"MYSQL_HOST": mysql_server.cdc.host, "MYSQL_PORT": str(mysql_server.cdc.port),
           "MYSQL_PASSWORD": mysql_server.cdc.password, "MYSQL_DATABASE": database}
    warehouse = example / "pipeline-storage" / "catalog" / "warehouse"

    for run in (1, 2):
        held = hold_default_connect_port() if run == 1 else None
        try:
            result = pipeline(example / "spark-pipeline.yml", env)
        finally:
            if held is not None:
                held.close()
        assert result.returncode == 0, result.stderr[-4000:]
        assert "Run is COMPLETED" in result.stdout + result.stderr
        for name in TABLES:
            assert kept_rows(warehouse / f"{database}_{name}") == source_rows(admin, name), f"run {run}: {name}"
        write_randomly(admin, rng, 40)  # the second run picks these up from the log

    changes = DeltaTable(str(warehouse / "changes")).to_pyarrow_table()
    ops = set(changes.column("op").to_pylist())
    assert {"r", "c", "u", "d"} <= ops, "the second run read log changes, not a new snapshot"


def test_a_missing_spec_is_one_clear_line(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "cdc", "pipeline", "run", "--spec", str(tmp_path / "nope.yml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: no pipeline spec at {tmp_path / 'nope.yml'}: pass the spark-pipeline.yml that spark-pipelines "
        "init wrote"], result.stderr


@pytest.mark.slow
def test_a_jobs_changelog_feeds_a_pipeline_that_rebuilds_the_table(
    spark: Any, tmp_path: Path, mysql_server: Sandbox, database: str, admin: Any
) -> None:
    rng = random.Random(21)
    create_and_fill(admin, rng, 15)
    # the job runs in this test's Spark session (tests/pipeline.py): its CLI is tested elsewhere,
    # and a driver process of its own costs a JVM start per round
    job = Pipeline(spark, mysql_server, database, tmp_path, source={"tables": [f"{database}\\.orders"]})
    for round in range(2):  # a snapshot, then log changes on top of it
        if round:
            write_randomly(admin, rng, 15)
        assert job.run(), "the job ran batches"
    example = tmp_path / "sdp_changelog"
    shutil.copytree(ROOT / "examples" / "sdp_changelog", example)
    changelog = tmp_path / "lake" / database / "orders_changelog"
    result = pipeline(example / "spark-pipeline.yml", {"CHANGELOG": str(changelog)})
    assert result.returncode == 0, result.stderr[-4000:]
    rebuilt = kept_rows(example / "pipeline-storage" / "catalog" / "warehouse" / "log_now")
    assert rebuilt == source_rows(admin, "orders") == kept_rows(tmp_path / "lake" / database / "orders")
    assert rebuilt, "the job captured rows"
