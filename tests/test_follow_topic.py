"""Topic -> Delta follower (sinks/follow.py, ``python -m cdc follow-topic``) against real servers,
for each stream store: Kafka (sinks/kafka/follow.py, Spark's Kafka source, read_committed),
Pulsar (sinks/pulsar/follow.py, the project's Python data source over Pulsar Readers) and Pravega
(sinks/pravega/follow.py, the project's Python data source over reader groups, staging what the
driver read; the Pravega client has wheels for Python < 3.12 only, so it is skipped on newer ones).

The real job captures a MariaDB table into the real broker; the follower reads the topic and
MERGEs it into Delta. After the snapshot, and again after inserts, updates, deletes and
primary-key updates, the Delta table equals the source (Kafka with and without
``schemas_enable``). A micro-batch that Spark replays (Delta committed it, Spark's commit log
lacks it) reads the same messages and changes nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pytest
import yaml
from pipeline import StreamStore, stream_store

from binlog.mysql.types import mysql_column, mysql_table
from cdc.app.checkpoint import CheckpointFiles
from cdc.app.cli import main
from cdc.app.config import parse_config
from cdc.app.follow import follow_topics, stream_sink
from cdc.app.runner import JobRunner
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from cdc.model.schema import TableId
from sinks.delta.tables import read_table
from sinks.follow import followed_tables
from sinks.pravega.config import PravegaSinkConfig

COLUMNS = ("id", "name", "amount", "created", "t")
NO_PRAVEGA_CLIENT = pytest.mark.skipif(sys.version_info >= (3, 12), reason="the Pravega client "
                                       "(pravega 0.3.8) has wheels for CPython 3.10 and 3.11 only")


@dataclass(frozen=True)
class PravegaStore:
    """The session's Pravega as the job's stream store (tests/pravega_server.py): the ``sink:``
    entry of streams ``<prefix>.<db>.<table>`` (2 segments), staging under the workdir."""

    server: Any
    kind: str = "pravega"

    def sink(self, workdir: Path, prefix: str) -> dict[str, Any]:
        return {"type": "pravega", "controller_uri": self.server.controller_uri, "topic_prefix": prefix,
                "segments": 2, "staging_path": str(workdir / "pravega-staging")}


@pytest.fixture
def store(request: pytest.FixtureRequest) -> StreamStore | PravegaStore:
    """The stream store a test is parametrized with (``kafka``, ``pulsar``, ``pravega``), on the
    session's server."""
    if request.param == "pravega":
        return PravegaStore(request.getfixturevalue("pravega_server"))
    return stream_store(request)


def job(box: Sandbox, database: str, store: StreamStore | PravegaStore, workdir: Path, schemas_enable: bool = True,
        **sink: Any) -> JobConfig:
    raw = {
        "source": {"hostname": box.cdc.host, "port": box.cdc.port, "username": box.cdc.user,
                   "password": box.cdc.password, "tables": [f"{database}\\..*"], "chunk_size": 50,
                   "server_id": "5420-5423"},
        "sink": sink or {**store.sink(workdir, f"f{database}"), "schemas_enable": schemas_enable},
        "checkpoint": str(workdir / "checkpoint"), "parallelism": 2}
    return parse_config(raw, warn_plain_password=False)


def events_in_stream(store: StreamStore | PravegaStore, config: JobConfig, database: str) -> int:
    """How many events the items table's Pravega stream holds (0 for the other stores: unused)."""
    if not isinstance(store, PravegaStore):
        return 0
    from pravega_server import read_stream

    sink = stream_sink(config)
    assert isinstance(sink, PravegaSinkConfig)
    return len(read_stream(sink.controller_uri, sink.scope, sink.topic(TableId(database, "items"))))


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
@pytest.mark.parametrize(("store", "schemas_enable"), [
    ("kafka", True), ("kafka", False), ("pulsar", True),
    pytest.param("pravega", True, marks=NO_PRAVEGA_CLIENT)], indirect=["store"])
def test_follower_keeps_delta_equal_to_the_source(store: StreamStore | PravegaStore, schemas_enable: bool, spark: Any,
                                                  mysql_server: Sandbox, database: str, admin: Any,
                                                  tmp_path: Path) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2), "
                    "created DATETIME(3), t TIME)")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
                        [(i, f"n{i}", Decimal(i) / 4, dt.datetime(2024, 1, 1, 0, 0, i % 60, 1000 * i),
                          f"-0{i % 9}:00:0{i % 10}") for i in range(1, 121)])
    config = job(mysql_server, database, store, tmp_path, schemas_enable)
    target = tmp_path / "delta"
    JobRunner(config, spark).run(once=True)
    follow_topics(config, str(target), once=True, spark=spark)
    assert delta_rows(target, database) == source_rows(mysql_server, database)
    snapshot_events = events_in_stream(store, config, database)

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
    checkpoint = CheckpointFiles(str(target / "_checkpoints" / "follow-topic"))
    if isinstance(store, PravegaStore):  # the second run went on from the first's position: each event once
        stream = stream_sink(config).topic(TableId(database, "items"))
        last = checkpoint.offset(checkpoint.last("offsets") or 0)["streams"][stream]
        assert last["events"] == events_in_stream(store, config, database) - snapshot_events > 0

    # Delta holds the last micro-batch, Spark's commit log loses it: Spark replays it (the same
    # offsets, so the same messages), and the MERGE finds its app transaction and changes nothing.
    last = checkpoint.last("commits")
    assert last is not None and last > 0
    for name in (str(last), f".{last}.crc"):
        (Path(checkpoint.root) / "commits" / name).unlink(missing_ok=True)
    version = deltalake.DeltaTable(str(target / database / "items")).version()
    follow_topics(config, str(target), once=True, spark=spark)
    assert checkpoint.last("commits") == last, "the lost batch was replayed"
    assert deltalake.DeltaTable(str(target / database / "items")).version() == version
    assert delta_rows(target, database) == expected


@pytest.mark.parametrize("store", ["kafka"], indirect=True)
def test_follower_refuses_a_job_without_a_stream_store_and_a_keyless_table(
        store: StreamStore, mysql_server: Sandbox, database: str, tmp_path: Path) -> None:
    config = job(mysql_server, database, store, tmp_path)
    delta_only = job(mysql_server, database, store, tmp_path, type="delta", path=str(tmp_path / "lake"))
    with pytest.raises(ConfigError, match="no `type: kafka`, `type: pravega` or `type: pulsar` sink"):
        stream_sink(delta_only)
    assert stream_sink(config, "kafka") is config.sink[0]
    with pytest.raises(ConfigError, match="no `type: pulsar` sink"):
        stream_sink(config, "pulsar")
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
    assert err == ["error: sink: the job has no `type: kafka`, `type: pravega` or `type: pulsar` sink: follow-topic reads "
                   "the topics a stream-store sink writes; add one to `sink:`"]
    assert mysql_server.cdc.password not in "\n".join(err)
