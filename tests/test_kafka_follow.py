"""Topic -> Delta follower (sinks/follow.py with sinks/kafka/follow.py, ``python -m cdc follow-topic``) against real servers.

The real job captures a MariaDB table into the real broker (``type: kafka``); the follower reads
the topic with Spark's Kafka source (read_committed) and MERGEs it into Delta. After the snapshot,
and again after inserts, updates, deletes and primary-key updates, the Delta table equals the
source, with and without ``schemas_enable``. A replayed micro-batch changes nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlog.mysql.types import mysql_column, mysql_table
from cdc.app.cli import main
from cdc.app.config import parse_config
from cdc.app.follow import follow_topics, stream_sink
from cdc.app.runner import JobRunner
from cdc.app.sandbox.kafka import KafkaSandbox
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from cdc.model.schema import TableId
from sinks.delta.tables import read_table
from sinks.follow import followed_tables

COLUMNS = ("id", "name", "amount", "created", "t")


def job(box: Sandbox, database: str, broker: KafkaSandbox, workdir: Path, schemas_enable: bool,
        **sink: Any) -> JobConfig:
    raw = {
        "source": {"hostname": box.cdc.host, "port": box.cdc.port, "username": box.cdc.user,
                   "password": box.cdc.password, "tables": [f"{database}\\..*"], "chunk_size": 50,
                   "server_id": "5420-5423"},
        "sink": {"type": "kafka", "bootstrap_servers": broker.bootstrap_servers,
                 "topic_prefix": f"f{database}", "partitions": 2, "schemas_enable": schemas_enable,
                 "staging_path": str(workdir / "staging")},
        "checkpoint": str(workdir / "checkpoint"), "parallelism": 2}
    if sink:
        raw["sink"] = sink
    return parse_config(raw, warn_plain_password=False)


def source_rows(box: Sandbox, database: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(box.cdc.connect(database)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM items ORDER BY id")
        return [(i, n, a, c, int(t.total_seconds() * 1_000_000) if t is not None else None)
                for i, n, a, c, t in cur.fetchall()]


def delta_rows(target: Path, database: str) -> list[tuple[Any, ...]]:
    table = read_table(str(target / database / "items"))
    rows = sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))
    return [tuple(r) for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("schemas_enable", [True, False])
def test_follower_keeps_delta_equal_to_the_source(schemas_enable: bool, spark: Any, mysql_server: Sandbox,
                                                  database: str, admin: Any, kafka_broker: KafkaSandbox,
                                                  tmp_path: Path) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2), "
                    "created DATETIME(3), t TIME)")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
                        [(i, f"n{i}", Decimal(i) / 4, dt.datetime(2024, 1, 1, 0, 0, i % 60, 1000 * i),
                          f"-0{i % 9}:00:0{i % 10}") for i in range(1, 121)])
    config = job(mysql_server, database, kafka_broker, tmp_path, schemas_enable)
    target = tmp_path / "delta"
    JobRunner(config, spark).run(once=True)
    follower = follow_topics(config, str(target), once=True, spark=spark)
    assert delta_rows(target, database) == source_rows(mysql_server, database)

    with admin.cursor() as cur:
        cur.execute("UPDATE items SET name = CONCAT(name, '-u'), amount = amount + 1 WHERE id % 7 = 0")
        cur.execute("UPDATE items SET name = 'twice' WHERE id = 14")  # two changes of one key
        cur.execute("DELETE FROM items WHERE id % 11 = 0")
        cur.execute("UPDATE items SET id = id + 1000 WHERE id IN (5, 6)")  # primary-key updates
        cur.execute("INSERT INTO items VALUES (500, 'new', NULL, NULL, NULL), (501, 'gone', 1, NULL, NULL)")
        cur.execute("DELETE FROM items WHERE id = 501")  # inserted and deleted in one batch
        cur.execute("UPDATE items SET id = 5 WHERE id = 1006")  # a key back to a deleted key
    JobRunner(config, spark).run(once=True)
    follow_topics(config, str(target), once=True, spark=spark)
    expected = source_rows(mysql_server, database)
    assert delta_rows(target, database) == expected
    assert {5, 1005, 500} <= {r[0] for r in expected} and 6 not in {r[0] for r in expected}

    # Spark replays a batch that Delta holds but Spark's commit log lacks: nothing changes.
    before = read_table(str(target / database / "items")).num_rows
    again = follower.spark.read.format("kafka").option(
        "kafka.bootstrap.servers", kafka_broker.bootstrap_servers).option(
        "subscribe", follower.tables[0].topic).option("kafka.isolation.level", "read_committed").load()
    follower.apply_batch(again.select("topic", "offset", "value"), 0)  # batch 0 is recorded
    assert read_table(str(target / database / "items")).num_rows == before


def test_follower_refuses_a_job_without_kafka_and_a_keyless_table(mysql_server: Sandbox, database: str,
                                                                  kafka_broker: KafkaSandbox,
                                                                  tmp_path: Path) -> None:
    config = job(mysql_server, database, kafka_broker, tmp_path, True)
    delta_only = job(mysql_server, database, kafka_broker, tmp_path, True, type="delta",
                     path=str(tmp_path / "lake"))
    with pytest.raises(ConfigError, match="no `type: kafka` sink"):
        stream_sink(delta_only)
    assert stream_sink(config, "kafka") is config.sink[0]
    logs = mysql_table(TableId(database, "logs"), (mysql_column("msg", "varchar", "varchar(10)", True),), ())
    with pytest.raises(ConfigError, match=f"table {database}.logs has no primary key"):
        followed_tables(stream_sink(config), {logs.table_id: logs}, str(tmp_path / "delta"))


def test_follow_topic_command_names_the_fix(tmp_path: Path, mysql_server: Sandbox, database: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TEST_FOLLOW_PASSWORD", mysql_server.cdc.password)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"hostname": mysql_server.cdc.host, "port": mysql_server.cdc.port, "username": "cdc",
                   "password": "${TEST_FOLLOW_PASSWORD}", "tables": [f"{database}\\..*"]},
        "sink": {"path": str(tmp_path / "lake")}, "checkpoint": str(tmp_path / "checkpoint")}))
    assert main(["follow-topic", "--config", str(path), "--target", str(tmp_path / "delta")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: sink: the job has no `type: kafka` sink: follow-topic reads the topics a "
                   "stream-store sink writes; add one to `sink:`"]
    assert mysql_server.cdc.password not in "\n".join(err)
