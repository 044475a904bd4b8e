"""GTID offsets (issue 21): start from a GTID set, and resume on a promoted replica by GTID.

Unit tests of the GTID set forms need no server; the rest run a real MariaDB (the session's
server, or a primary and a replica started by ``tests/mariadb_replica.py``), real Spark and Delta.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mariadb_replica import ReplicaPair, gtid_binlog_pos, replica_pair
from pipeline import Pipeline, RandomWriter, assert_mirror_equals_source

from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.dialect import MySqlDialect
from binlog.mysql.positions import BinlogOffset, ChangePosition, GtidSet
from binlog.mysql.reader import BinlogReaderOptions, MySqlBinlogReader, current_offset
from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.envelope import split_key_changes
from cdc.model.errors import ConfigError, InvalidBinlogPosition
from cdc.model.schema import TableId, TableSchema

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "4f22ab58-82db-22f2-af44-d91bb9530673"


# --- GTID sets (no server) -------------------------------------------------------------------------

def test_gtid_sets_parse_both_forms_and_normalize() -> None:
    assert str(GtidSet.parse(" 1-2-7 ,0-1-100\n")) == "0-1-100,1-2-7"
    mysql = GtidSet.parse(f"{UUID_A.upper()}:1-5:6-10:20,\n{UUID_A}:11-12,{UUID_B}:3")
    assert mysql.kind == "mysql" and str(mysql) == f"{UUID_A}:1-12:20,{UUID_B}:3"
    assert str(GtidSet.parse(f"{UUID_A}:1-5:tag_a:1-3")) == f"{UUID_A}:1-5,{UUID_A}:tag_a:1-3"
    assert GtidSet.parse("").kind == "empty"


@pytest.mark.parametrize(("text", "message"), [
    ("0-1", "is not a GTID"), ("0-1-x", "is not a GTID"), ("0-1-5,0-2-9", "domain 0 twice"),
    (f"{UUID_A}:5-3", "1 <= first <= last"), (f"{UUID_A}:0-3", "1 <= first <= last"),
    (f"0-1-5,{UUID_A}:1", "mixes MariaDB and MySQL"), ("3e11fa47:1-5", "is not a GTID"),
])
def test_bad_gtid_sets_are_refused_with_the_accepted_forms(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GtidSet.parse(text)


def test_gtid_set_order_is_containment() -> None:
    p = GtidSet.parse
    assert p("0-1-5").compare(p("0-2-9")) == -1  # a promoted replica's later transactions
    assert p("0-2-9").compare(p("0-1-5")) == 1
    assert p("0-1-5").compare(p("0-1-5")) == 0
    assert p("0-1-5,1-1-3").compare(p("0-2-9")) is None  # domain 1 is missing: diverged
    assert p(f"{UUID_A}:1-100").compare(p(f"{UUID_A}:1-100,{UUID_B}:1-5")) == -1
    assert p(f"{UUID_A}:1-100:102").compare(p(f"{UUID_A}:1-101")) is None  # a hole each side
    assert p("").compare(p("0-1-1")) == -1
    assert p("0-1-5").compare(p(f"{UUID_A}:1-5")) is None


def test_offsets_of_two_servers_are_ordered_by_gtid() -> None:
    old = BinlogOffset("mysql-bin.000007", 9000, "0-1-50", server="1")
    new = BinlogOffset("mysql-bin.000001", 400, "0-2-60", server="2")
    assert old.is_before(new) and new.is_at_or_after(old) and not new.is_before(old)
    same = BinlogOffset("mysql-bin.000001", 100, "0-1-50", server="2")
    assert old.compare(same) == 0
    assert BinlogOffset.from_dict(new.to_dict()) == new and BinlogOffset.from_dict(new.to_dict()).server == "2"
    assert "server" not in BinlogOffset("mysql-bin.000001", 4).to_dict()  # old offsets stay as they were
    with pytest.raises(InvalidBinlogPosition, match=r"GTID set .* is unknown"):
        old.compare(BinlogOffset("mysql-bin.000001", 4, None, server="2"))
    with pytest.raises(InvalidBinlogPosition, match="diverged"):
        old.compare(BinlogOffset("mysql-bin.000001", 4, "0-1-40,1-2-3", server="2"))


def _raw(**source: Any) -> dict[str, Any]:
    return {"source": {"type": "mysql", "hostname": "h", "username": "u", "password": "p",
                       "tables": ["d\\..*"], "startup_mode": "specific-offset", **source},
            "sink": {"type": "delta", "path": "/tmp/none"}, "checkpoint": "/tmp/none-cp"}


def test_startup_gtid_is_validated_naming_the_key() -> None:
    ok = parse_config(_raw(startup_offset={"gtid": " 0-1-100,1-2-7"}), warn_plain_password=False)
    assert isinstance(ok.source, MySqlSourceConfig) and ok.source.startup_offset is not None
    assert ok.source.startup_offset.gtid == "0-1-100,1-2-7"
    mysql = parse_config(_raw(startup_offset={"gtid": f"{UUID_A}:1-100"}), warn_plain_password=False)
    assert isinstance(mysql.source, MySqlSourceConfig) and mysql.source.startup_offset is not None
    for offset, message in [({"gtid": "0-1-x"}, r"source\.startup_offset\.gtid: .*not a GTID"),
                            ({"gtid": ""}, r"source\.startup_offset\.gtid: an empty GTID set"),
                            ({"gtid": "0-1-5", "file": "mysql-bin.000001", "pos": 4}, "not both")]:
        with pytest.raises(ConfigError, match=message):
            parse_config(_raw(startup_offset=offset), warn_plain_password=False)


# --- a GTID start on one server ---------------------------------------------------------------------

def _dialect(box: Sandbox, database: str, **source: Any) -> MySqlDialect:
    c = box.cdc
    return MySqlDialect(MySqlSourceConfig(hostname=c.host, port=c.port, username=c.user, password=c.password,
                                          tables=[f"{database}\\..*"], server_id="6200-6203", **source))


def _gtid_start(box: Sandbox, database: str, gtid: str) -> BinlogOffset | None:
    dialect = _dialect(box, database, startup_mode="specific-offset", startup_offset={"gtid": gtid})
    with contextlib.closing(dialect.connect()) as conn:
        return dialect.startup_offset(conn)


@pytest.mark.slow
def test_specific_offset_by_mariadb_gtid_starts_after_exactly_those_transactions(
        spark: Any, mysql_server: Sandbox, database: str, admin: Any, tmp_path: Path) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        gtids = []
        for i in range(10):  # one transaction each
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, f"v{i}"))
            cur.execute("SELECT @@last_gtid")
            gtids.append(cur.fetchone()[0])
    with admin.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        now = cur.fetchone()[0]
    after_4 = gtids[4]
    assert GtidSet.parse(after_4).compare(GtidSet.parse(now)) == -1
    start = _gtid_start(mysql_server, database, after_4)
    assert start is not None and start.gtid == after_4 and start.server == "1"
    at_end = _gtid_start(mysql_server, database, now)
    assert at_end is not None and at_end.compare(current_offset(admin)) <= 0

    p = Pipeline(spark, mysql_server, database, tmp_path,
                 source={"startup_mode": "specific-offset", "startup_offset": {"gtid": after_4}})
    p.run()
    changes = p.changelog("t").to_pylist()
    assert sorted(r["after"]["id"] for r in changes) == [5, 6, 7, 8, 9]
    assert [r["op"] for r in changes] == ["c"] * 5
    assert sorted(r["source"]["gtid"] for r in changes) == sorted(gtids[5:])

    for gtid, message in [("0-1-999999999", "has not executed every transaction"),
                          (f"{UUID_A}:1-5", "is a mysql GTID set, but the server is mariadb")]:
        with pytest.raises(ConfigError, match=rf"source\.startup_offset\.gtid: .*{message}"):
            _gtid_start(mysql_server, database, gtid)


# --- failover: a primary and a replica ---------------------------------------------------------------

@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicaPair]:
    with replica_pair() as p:
        yield p


def _execute(box: Sandbox, *statements: str) -> None:
    with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)


def _write_for(box: Sandbox, database: str, seconds: float, seed: int) -> int:
    writer = RandomWriter(box, database, "t", seed=seed, key_space=600, pause_s=0.002).start()
    time.sleep(seconds)
    writer.stop()
    return writer.statements


def _run_in_background(p: Pipeline) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    stop, errors = threading.Event(), []

    def run() -> None:
        try:
            JobRunner(p.config(), p.spark, hooks=p.faults).run(stop=stop)
        except BaseException as exc:  # the job fails when its server dies under it
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, stop, errors


def _committed_batches(p: Pipeline) -> int:
    commits = p.checkpoint / "commits"
    return len([f for f in commits.iterdir() if f.name.isdigit()]) if commits.exists() else 0


def _identities(entries: list[tuple[str | None, str, int, int, str]]) -> Counter[tuple[str, int, str]]:
    """Each change as (gtid, its place among the transaction's changes, op): the same on every
    server that holds the transaction, unlike (file, pos, row)."""
    by_gtid: dict[str, list[tuple[str, int, int, str]]] = {}
    for gtid, file, pos, row, op in entries:
        assert gtid, f"a change at {file}:{pos} has no GTID"
        by_gtid.setdefault(gtid, []).append((file, pos, row, op))
    out: Counter[tuple[str, int, str]] = Counter()
    for gtid, changes in by_gtid.items():
        places = sorted({(int(f.rsplit(".", 1)[1]), pos, row) for f, pos, row, _ in changes})
        for f, pos, row, op in changes:
            out[gtid, places.index((int(f.rsplit(".", 1)[1]), pos, row)), op] += 1
    return out


def _reference(box: Sandbox, schema: TableSchema, since_gtid: str) -> Counter[tuple[str, int, str]]:
    """Every change of the table after ``since_gtid``, read from ``box``'s binlog."""
    options = BinlogReaderOptions(connection=box.cdc, server_id=6390, tables=(schema.table_id,))
    with MySqlBinlogReader(options) as reader:
        start = reader.local(BinlogOffset("elsewhere-bin.000001", 4, since_gtid, server="elsewhere"))
        with contextlib.closing(box.cdc.connect()) as conn:
            end = current_offset(conn)
        changes = split_key_changes(list(reader.read(start, end)), schema.primary_key)
    places = [(c, c.position) for c in changes]
    return _identities([(c.source["gtid"], at.file, at.pos, at.row, c.op) for c, at in places
                        if isinstance(at, ChangePosition)])


@pytest.mark.slow
def test_failover_to_a_promoted_replica_resumes_by_gtid_exactly_once(
        spark: Any, pair: ReplicaPair, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Snapshot on the primary; stream while writing; SIGKILL the primary while the job runs;
    point the job at the replica (same checkpoint); write there; catch up; check."""
    db = "shop"
    _execute(pair.primary, f"CREATE DATABASE {db}",
             f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
             f"INSERT INTO {db}.t VALUES " + ",".join(f"({i * 2}, 'v{i}', {i})" for i in range(250)))
    pair.wait_caught_up()
    since = gtid_binlog_pos(pair.primary)
    p = Pipeline(spark, pair.primary, db, tmp_path, job={"trigger_interval": "1s"})
    p.run()  # the snapshot, on the primary
    # The primary's binlog moves to other files: its positions no longer match the replica's.
    _execute(pair.primary, "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    thread, stop, errors = _run_in_background(p)
    _write_for(pair.primary, db, 2.0, seed=21)
    deadline = time.monotonic() + 30
    while _committed_batches(p) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    pair.wait_caught_up()
    with contextlib.closing(pair.primary.admin.connect()) as conn:
        old = current_offset(conn)
    pair.kill_primary()  # while the job streams
    thread.join(timeout=20)  # it fails at its next plan (trigger every second)
    stop.set()
    thread.join(timeout=60)
    assert not thread.is_alive()
    killed_at = _committed_batches(p)
    assert killed_at >= 3 and errors, f"the job should have failed with its server ({killed_at} batches)"

    with contextlib.closing(pair.replica.admin.connect()) as conn:
        replica_at = current_offset(conn)
    assert (replica_at.file, replica_at.pos) != (old.file, old.pos), "the test needs different positions"
    p.box = pair.replica
    with pytest.raises(ConfigError, match="run with --failover"):  # a new address needs the operator's word
        p.run()
    _write_for(pair.replica, db, 1.5, seed=22)
    p.run(failover=True)
    _write_for(pair.replica, db, 0.5, seed=23)
    p.run()

    offsets = sorted((f for f in (p.checkpoint / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    servers_of_offsets = [json.loads(f.read_text().splitlines()[-1])["position"].get("server") for f in offsets]
    assert servers_of_offsets[0] == "1" and servers_of_offsets[-1] == "2", servers_of_offsets
    schema = p.schemas()[TableId(db, "t")]
    assert_mirror_equals_source(p, "t", schema)
    log = p.changelog("t").to_pylist()
    reads = [r for r in log if r["op"] == "r"]
    assert len(reads) == 250 and len({r["after"]["id"] for r in reads}) == 250
    got = _identities([(r["source"]["gtid"], r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["op"])
                       for r in log if r["op"] != "r"])
    twice = [k for k, n in got.items() if n > 1]
    assert not twice, f"changes written twice: {twice[:5]}"
    with caplog.at_level("WARNING"):
        want = _reference(pair.replica, schema, since)
    assert [r.getMessage() for r in caplog.records if "resuming by GTID" in r.getMessage()], "one log line"
    assert set(got) == set(want), (f"missing {sorted(set(want) - set(got))[:5]}, "
                                   f"invented {sorted(set(got) - set(want))[:5]}")
    servers = {r["source"]["server_id"] for r in log if r["op"] != "r"}
    assert servers == {1, 2}, servers  # changes written on both, read from both
