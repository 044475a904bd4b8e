"""``python -m cdc sql`` over a job's Pravega streams (cdc/app/sql.py, sinks/pravega/catalog.py):
each table of the job's schema history is a view named after its stream, one row per
event, decoded with the job's schema history (an event written before a DDL with the version
before it). The real job writes into the session's real Pravega; the Pravega client has wheels
for Python < 3.12 only, so the test is skipped on newer ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc.app.cli import main
from cdc.app.config import parse_config
from cdc.app.follow import stream_sink
from cdc.app.runner import JobRunner, catalog_dir
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.pravega import PravegaSandbox
from cdc.app.sql import QueryFailed, run_sql, schema_history, stream_views
from cdc.model.schema import TableId
from sinks.pravega.catalog import register_views

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sys.version_info >= (3, 12), reason="the Pravega client (pravega 0.3.8) "
                                 "has wheels for CPython 3.10 and 3.11 only")]


def test_a_jobs_streams_are_views_decoded_with_its_schema_history(
        spark: Any, mysql_server: Sandbox, pravega_server: PravegaSandbox, database: str, admin: Any,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))")
        cur.execute("INSERT INTO items VALUES " + ",".join(f"({i}, 'n{i}')" for i in range(1, 6)))
    monkeypatch.setenv("TEST_SQL_STREAMS_PASSWORD", mysql_server.cdc.password)
    raw = {"source": {"hostname": mysql_server.cdc.host, "port": mysql_server.cdc.port,
                      "username": mysql_server.cdc.user, "password": "${TEST_SQL_STREAMS_PASSWORD}",
                      "tables": [f"{database}\\..*"], "server_id": "5430-5433"},
           "sink": {"type": "pravega", "controller_uri": pravega_server.controller_uri,
                    "topic_prefix": f"q{database}", "segments": 2, "staging_path": str(tmp_path / "staging")},
           "checkpoint": str(tmp_path / "checkpoint")}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(raw))
    config = parse_config(raw)
    JobRunner(config, spark).run(once=True)
    with admin.cursor() as cur:
        cur.execute("ALTER TABLE items ADD COLUMN qty INT")
        cur.execute("UPDATE items SET qty = 7, name = 'x' WHERE id = 2")
        cur.execute("DELETE FROM items WHERE id = 5")
    JobRunner(config, spark).run(once=True)

    views = stream_views(config)
    assert views is not None
    view = f"q{database}_{database}_items"
    catalog = catalog_dir(config)
    listed = [json.loads(line) for line in run_sql(catalog, "SHOW TABLES", "json", spark=spark, views=views).splitlines()]
    assert {"namespace": "", "tableName": view, "isTemporary": True} in listed, listed
    out = run_sql(catalog, f"SELECT op, coalesce(after.id, before.id) AS id, after.name, after.qty, schema_version "
                           f"FROM {view} ORDER BY schema_version, op, id", "json", spark=spark, views=views)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [*({"op": "r", "id": i, "name": f"n{i}", "qty": None, "schema_version": 0} for i in range(1, 6)),
                    {"op": "d", "id": 5, "name": None, "qty": None, "schema_version": 1},
                    {"op": "u", "id": 2, "name": "x", "qty": 7, "schema_version": 1}], out

    # a view whose stream is not there: the query fails with the reader's error, naming the stream
    ghost = TableId(database, "never_written")
    register_views(spark, stream_sink(config), {ghost: schema_history(config)[TableId(database, "items")]})
    with pytest.raises(QueryFailed, match=f"Pravega has no stream spark-cdc/q{database}.{database}.never-written"
                                          .replace("_", "-").replace(".", r"\.")):
        run_sql(catalog, f"SELECT count(*) FROM q{database}_{database}_never_written", spark=spark)

    # the command: the job file gives the views (the test's session is the one the command gets)
    capsys.readouterr()
    assert main(["sql", "--config", str(tmp_path / "job.yaml"), "--format", "csv",
                 f"SELECT op, count(*) AS n FROM {view} GROUP BY op ORDER BY op"]) == 0
    assert capsys.readouterr().out == "op,n\nd,1\nr,5\nu,1\n"
