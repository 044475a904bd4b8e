"""``source.max_batch_bytes``: a backlog is read in batches of bounded binlog bytes (issue 18).

A capped batch ends at a cut, a byte position that may fall inside a transaction; the
transaction belongs to the batch it begins in, which reads it to its end. These tests check the
cut arithmetic, that slices meeting at cuts give every change once and never split a
transaction (real MariaDB binlog), and that a capped catch-up over many batches and a binlog
rotation is exactly once through the real job, also across injected crashes and SIGKILLs of the
driver, and that the walk hints the cuts leave in the state directory are deleted once no batch
can use them.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql
import pytest
from faults import InjectedFault
from pipeline import Pipeline, RandomWriter, writing
from test_pipeline import check_all, create_table, kill_a_driver_at_random, pipeline  # noqa: F401 (the fixture)

from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.dialect import MySqlDialect
from binlog.mysql.positions import BinlogOffset, byte_cuts, capped_end
from binlog.mysql.reader import MySqlBinlogReader, current_offset
from binlog.mysql.server import binary_log_sizes
from cdc.app.runner import JobFailed
from cdc.app.sandbox.mysql import Sandbox
from cdc.model.schema import TableId
from cdc.spark.state import StateStore
from sinks.delta.follower import _groups

Conn = pymysql.connections.Connection

# --- the cut, without a server ------------------------------------------------------------------

SIZES = {"b.000007": 1000, "b.000008": 5000, "b.000009": 3000}


def test_a_short_slice_ends_where_the_server_is() -> None:
    start, end = BinlogOffset("b.000007", 400, server="1"), BinlogOffset("b.000009", 2000, server="1")
    assert capped_end(start, end, SIZES, 600 + 5000 + 2000) is end
    same = BinlogOffset("b.000009", 2500, gtid="0-1-9", server="1")
    assert capped_end(end, same, SIZES, 500) is same


@pytest.mark.parametrize(("max_bytes", "file", "pos"), [
    (1, "b.000007", 401), (599, "b.000007", 999), (600, "b.000008", 0), (601, "b.000008", 1),
    (5600, "b.000009", 0), (7599, "b.000009", 1999)])
def test_a_long_slice_is_cut_max_bytes_on_counted_across_files(max_bytes: int, file: str, pos: int) -> None:
    start, end = BinlogOffset("b.000007", 400, server="1"), BinlogOffset("b.000009", 2000, gtid="0-1-5", server="1")
    cut = capped_end(start, end, SIZES, max_bytes)
    assert (cut.file, cut.pos, cut.cut, cut.server, cut.gtid) == (file, pos, True, "1", None)
    assert start.is_before(cut) and cut.is_before(end)


def test_a_slice_over_a_missing_file_is_not_cut() -> None:
    start, end = BinlogOffset("b.000006", 4), BinlogOffset("b.000009", 2000)
    assert capped_end(start, end, SIZES, 10) is end  # b.000006 is not listed: the reader says why


def test_a_cut_survives_the_offset_log_and_byte_cuts_are_cuts() -> None:
    cut = BinlogOffset("b.000008", 77, server="1", cut=True)
    assert cut.to_dict() == {"file": "b.000008", "pos": 77, "server": "1", "cut": True}
    assert BinlogOffset.from_dict(cut.to_dict()).cut
    assert "cut" not in BinlogOffset("b.000008", 77).to_dict()  # old offset logs read the same
    assert BinlogOffset.from_dict({"file": "b.000008", "pos": 77}).cut is False
    cuts = byte_cuts(BinlogOffset("b.000007", 4), BinlogOffset("b.000009", 2000), SIZES, 3, 100, 0.2)
    assert cuts and all(c.cut for c in cuts)


def test_the_option_defaults_to_128_mib_and_can_be_turned_off() -> None:
    base = {"hostname": "h", "username": "u", "tables": ["d\\..*"]}
    assert MySqlSourceConfig.model_validate(base).max_batch_bytes == 128 * 1024 * 1024
    assert MySqlSourceConfig.model_validate({**base, "max_batch_bytes": None}).max_batch_bytes is None
    with pytest.raises(ValueError, match="max_batch_bytes"):
        MySqlSourceConfig.model_validate({**base, "max_batch_bytes": 0})


# --- slices that meet at cuts, on a real binlog ---------------------------------------------------

def random_transactions(admin: Conn, table: str, n: int, seed: int, flush_at: int | None = None) -> None:
    """``n`` transactions of 1-6 random statements each: inserts, updates of several rows,
    deletes and primary-key updates; ``FLUSH BINARY LOGS`` after transaction ``flush_at``."""
    rng = random.Random(seed)
    with admin.cursor() as cur:
        for i in range(n):
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 6)):
                k = rng.randrange(0, 3000)
                cur.execute(rng.choice([
                    f"INSERT IGNORE INTO {table} (id, v, n) VALUES ({k}, 'w{k}', {rng.randrange(1000)})",
                    f"UPDATE {table} SET v = 'u{rng.randrange(1000)}', n = n + 1 WHERE id = {k}",
                    f"DELETE FROM {table} WHERE id = {k}",
                    f"UPDATE IGNORE {table} SET id = {rng.randrange(0, 3000)} WHERE id = {k}",
                    f"UPDATE {table} SET n = n - 1, v = REPEAT('x', {rng.randrange(38)}) "
                    f"WHERE id BETWEEN {k} AND {k + 40}",
                ]))
            cur.execute("COMMIT")
            if i == flush_at:
                cur.execute("FLUSH BINARY LOGS")


def changes(reader: MySqlBinlogReader, start: BinlogOffset, end: BinlogOffset,
            decode_from: BinlogOffset | None = None) -> list[tuple[str, int, int, str]]:
    """(file, pos, row, GTID) of every change in the slice, in order (closes the reader)."""
    with reader:
        if decode_from is not None:
            return [(e.file, e.pos, i, e.gtid or "") for e in reader.read_event_rows(start, end, decode_from=decode_from)
                    for i in range(e.first_row, e.first_row + e.num_rows)]
        return [(c.position.file, c.position.pos, c.position.row, c.source["gtid"]) for c in reader.read(start, end)]


def test_batches_cut_anywhere_give_each_transaction_to_exactly_one_batch(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    """Chains of capped slices (each starting at the last one's cut) over multi-row transactions
    and a rotation yield the whole slice's changes once, in order, each transaction in one batch;
    a capped slice cut again for several readers adds up to the same."""
    create_table(admin, "t", rows=300)
    with admin.cursor() as cur:  # a slice from a cut walks from its file's start: keep earlier tests' out
        cur.execute("FLUSH BINARY LOGS")
    start = current_offset(cdc_conn)
    random_transactions(admin, "t", 150, seed=3, flush_at=70)
    end = current_offset(cdc_conn)
    assert end.file != start.file
    whole = changes(reader("t"), start, end)
    assert len({g for *_, g in whole}) > 100 and all(g for *_, g in whole)
    sizes = binary_log_sizes(cdc_conn)
    for max_bytes in (700, 2345, 9000):
        got: list[tuple[str, int, int, str]] = []
        owner: dict[str, int] = {}
        at, batches = start, 0
        while at.is_before(end):
            cut = capped_end(at, end, sizes, max_bytes)
            assert at.is_before(cut)
            piece = changes(reader("t"), at, cut)
            for *_, gtid in piece:
                assert owner.setdefault(gtid, batches) == batches, f"{gtid} split over two batches ({max_bytes})"
            cuts = byte_cuts(at, cut, sizes, 3, 64, 0.2)
            pieces = [changes(reader("t"), at, e, b) for b, e in zip([at, *cuts], [*cuts, cut], strict=True)]
            assert [c for p in pieces for c in p] == piece, f"a capped slice cut for readers ({max_bytes})"
            got += piece
            at, batches = cut, batches + 1
        assert got == whole, f"max_bytes {max_bytes}: {len(got)} changes, {len(whole)} expected"
        assert batches > 3


def test_a_transaction_larger_than_the_cap_is_read_whole_by_one_batch(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    create_table(admin, "t", rows=500)
    start = current_offset(cdc_conn)
    with admin.cursor() as cur:
        cur.execute("UPDATE t SET v = REPEAT('y', 30)")  # one transaction of 500 row changes
        cur.execute("INSERT INTO t VALUES (100001, 'after', 1)")
    end = current_offset(cdc_conn)
    sizes = binary_log_sizes(cdc_conn)
    slices, at = [], start
    while at.is_before(end):
        cut = capped_end(at, end, sizes, 1000)
        slices.append(changes(reader("t"), at, cut))
        at = cut
    assert len(slices) > 5 and [len(s) for s in slices if s] == [500, 1]


# --- the job: a capped catch-up, exactly once --------------------------------------------------------

def backlog(p: Pipeline, admin: Conn) -> int:
    """A backlog of random multi-row transactions over a binlog rotation; its bytes."""
    with contextlib.closing(p.box.admin.connect()) as conn:
        before = current_offset(conn)
        random_transactions(admin, "t", 240, seed=17, flush_at=110)
        after = current_offset(conn)
        sizes = binary_log_sizes(conn)
    assert after.file != before.file
    files = [f for f in sizes if before.file <= f <= after.file]
    return sum((after.pos if f == after.file else sizes[f]) - (before.pos if f == before.file else 0) for f in files)


@pytest.mark.parametrize(("split", "parallelism"), [(False, 2), (True, 3)], ids=["one-reader", "split-readers"])
def test_capped_catch_up_over_many_batches_is_exact(pipeline: Pipeline, admin: Any, mysql_server: Sandbox,  # noqa: F811
                                                    split: bool, parallelism: int) -> None:
    create_table(admin, rows=1500)
    pipeline.run()
    total = backlog(pipeline, admin)
    cap = max(2048, total // 20)
    pipeline.source["max_batch_bytes"] = cap
    if split:  # each capped batch is also read by several tasks
        pipeline.source["stream_split_bytes"] = cap // 8
    pipeline.job["parallelism"] = parallelism
    catch_up = pipeline.run()
    batches = [b for b in catch_up if b.change_rows]
    assert len(batches) >= 15, f"{total} bytes in batches of {cap}: only {len(batches)} batches"
    check_all(pipeline)
    cuts = [o for o in offsets(pipeline) if o.get("cut")]
    assert len(cuts) >= 15, "the batches end at cuts"
    assert_hints_pruned(pipeline)


def offsets(p: Pipeline) -> list[dict[str, Any]]:
    """The ``position`` of every offset Spark logged for the query."""
    out = []
    for path in sorted((p.checkpoint / "offsets").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1):
        if path.name.isdigit():
            out.append(json.loads(path.read_text().splitlines()[-1])["position"])
    return out


def last_committed(p: Pipeline) -> BinlogOffset:
    """The end of the last batch in Spark's commit log."""
    last = max(int(f.name) for f in (p.checkpoint / "commits").iterdir() if f.name.isdigit())
    return BinlogOffset.from_dict(json.loads((p.checkpoint / "offsets" / str(last)).read_text().splitlines()[-1])
                                  ["position"])


def hint_cuts(p: Pipeline) -> list[BinlogOffset]:
    """The cuts whose walk hints are in the state directory (``binlog_cuts/<server>/<file>.<pos>.json``;
    ``unknown``: the inner cuts of a slice split over several readers, which carry no server)."""
    return [BinlogOffset(f.name.rsplit(".", 2)[0], int(f.name.rsplit(".", 2)[1]),
                         server=None if f.parent.name == "unknown" else f.parent.name)
            for f in (p.state_dir / "binlog_cuts").glob("*/*.json")]


def assert_hints_pruned(p: Pipeline) -> None:
    """Only the walk hints at or after the last committed offset are left."""
    committed = last_committed(p)
    stale = [c for c in hint_cuts(p) if c.is_before(committed)]
    assert not stale, f"walk hints before the committed offset {committed}: {sorted(map(str, stale))[:5]}"


def test_walk_hints_before_the_committed_offset_are_deleted(tmp_path: Path) -> None:
    """The driver deletes the hints of cuts before a committed offset, on that offset's server,
    and the temporary files of crashed writes; the rest stay; calling again changes nothing."""
    config = MySqlSourceConfig.model_validate({"hostname": "h", "username": "u", "tables": ["d\\..*"]})
    store = StateStore(str(tmp_path))
    writer = MySqlDialect(config)
    writer.use_schema_history(store, {})
    cuts = [BinlogOffset(f, p, server="1", cut=True) for f, p in
            [("b.000007", 120), ("b.000007", 900), ("b.000008", 4), ("b.000008", 50), ("b.000008", 300)]]
    for cut in cuts:
        writer.save_walk_hint(cut, BinlogOffset(cut.file, cut.pos + 7))
    store.write_bytes("binlog_cuts/1/b.000008.20.json.tmp-0a1b", b"{")  # a write that crashed
    store.write_bytes("binlog_cuts/1/notes.txt", b"not a hint")
    store.write_json("binlog_cuts/2/b.000007.120.json", {"file": "b.000007", "pos": 127, "server": "2"})
    for pos in (30, 60):  # the inner cuts of a split slice: no server
        writer.save_walk_hint(BinlogOffset("b.000008", pos, cut=True), BinlogOffset("b.000008", pos + 7))
    committed = cuts[3]
    for _ in range(2):  # a restarted driver (a new dialect) prunes again: nothing more goes
        driver = MySqlDialect(config)
        driver.use_schema_history(store, {})
        driver.prune_state(committed)
        assert store.file_names("binlog_cuts/1") == ["b.000008.300.json", "b.000008.50.json", "notes.txt"]
        assert store.file_names("binlog_cuts/2") == ["b.000007.120.json"]  # another server's
        assert store.file_names("binlog_cuts/unknown") == ["b.000008.60.json"]
        assert driver.walk_hint(committed) == BinlogOffset("b.000008", 57)
    driver.prune_state(BinlogOffset("b.000009", 4, server="1"))  # a later batch, in the next file
    assert store.file_names("binlog_cuts/1") == ["notes.txt"]
    assert store.file_names("binlog_cuts/unknown") == []


@pytest.mark.parametrize(("point", "after"), [("after_sink_commit", 6), ("stream", 9), ("plan", 5)])
def test_capped_catch_up_across_a_crash_is_exact(pipeline: Pipeline, admin: Any, mysql_server: Sandbox,  # noqa: F811
                                                 point: str, after: int) -> None:
    """A crash mid-way (after a sink committed a capped batch but before Spark's commit log, in a
    stream task, while planning): the restart replays the same cut batch and goes on."""
    create_table(admin, rows=1500)
    pipeline.run()
    total = backlog(pipeline, admin)
    pipeline.source["max_batch_bytes"] = max(2048, total // 20)
    pipeline.arm(point, after=after)
    with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
        pipeline.run()
    first = len(offsets(pipeline))
    committed = last_committed(pipeline)
    assert committed.cut and committed in hint_cuts(pipeline), "the next batch's walk hint is kept"
    rest = pipeline.run()
    if point == "after_sink_commit":
        assert rest and not rest[0].wrote, f"the replayed batch wrote again: {rest[0]}"
    assert len([b for b in rest if b.change_rows]) >= 5, "the restart went on batch by batch"
    assert len(offsets(pipeline)) > first
    check_all(pipeline)
    assert_hints_pruned(pipeline)


def test_driver_killed_during_capped_batches_is_exact(pipeline: Pipeline, admin: Any,  # noqa: F811
                                                     mysql_server: Sandbox) -> None:
    """SIGKILL the driver process (its JVM and Python workers with it) twice while it reads a
    backlog in capped batches and a random writer (primary-key updates too) goes on: each kill
    lands between two capped batches or inside one (planning, tasks, a sink's commit). The
    restarts replay the cut batch or go on from its cut, exactly once, and the walk hints that
    the kills left behind are deleted by later commits. (Two kills: each driver's start costs
    about 15 s of Spark start-up on 2 cores.)"""
    create_table(admin, rows=1500)
    pipeline.source["chunk_size"] = 500
    pipeline.run()  # the snapshot, in this process
    total = backlog(pipeline, admin)
    pipeline.source["max_batch_bytes"] = max(2048, total // 20)
    spec = json.dumps(pipeline.raw_config())
    rng = random.Random(41)
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=19, pause_s=0.1)
    with writing(writer):
        for attempt in range(2):  # 2-4 capped batches (the backlog is 20 caps), then between two or inside one
            kill_a_driver_at_random(spec, rng, pipeline.workdir / f"driver-{attempt}.err", batches=(2, 4), within_s=1.0)
    cuts = [o for o in offsets(pipeline) if o.get("cut")]
    assert len(cuts) >= 3, f"the killed drivers planned only {len(cuts)} capped batches"
    pipeline.source["max_batch_bytes"] = None  # the rest at once, after the batch a kill interrupted
    rest = pipeline.run()
    assert writer.statements and [b for b in rest if b.change_rows], "the restart caught up on the writer's changes"
    check_all(pipeline)
    assert_hints_pruned(pipeline)


def test_per_transaction_ownership_groups_rows_by_gtid(admin: Conn, cdc_conn: Conn, reader: Any,
                                                       database: str) -> None:
    """A cut inside a multi-statement transaction: the batch before it reads the whole
    transaction, the batch after it none of it (the transaction's events straddle the cut)."""
    create_table(admin, "t", rows=200)
    start = current_offset(cdc_conn)
    with admin.cursor() as cur:
        cur.execute("BEGIN")
        for i in range(20):
            cur.execute(f"UPDATE t SET v = 'x{i}' WHERE id BETWEEN {i * 10} AND {i * 10 + 9}")
        cur.execute("COMMIT")
        cur.execute("UPDATE t SET n = 0 WHERE id = 2")
    end = current_offset(cdc_conn)
    whole = changes(reader("t"), start, end)
    by_gtid: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for f, p, _, g in whole:
        by_gtid[g].append((f, p))
    big = max(by_gtid.values(), key=len)
    middle = BinlogOffset(big[len(big) // 2][0], big[len(big) // 2][1] + 3, server=start.server, cut=True)
    head, tail = changes(reader("t"), start, middle), changes(reader("t"), middle, end)
    assert len(head) == len(big) and head + tail == whole and len(tail) == len(whole) - len(big)


def test_the_next_batch_opens_where_the_last_one_found_the_next_transaction(
        admin: Conn, cdc_conn: Conn, reader: Any, database: str) -> None:
    """The reader of a batch ending at a cut learns where the next transaction begins; a reader
    of the next batch that opens there reads what one walking from the file's start reads."""
    create_table(admin, "t", rows=300)
    start = current_offset(cdc_conn)
    random_transactions(admin, "t", 60, seed=5)
    end = current_offset(cdc_conn)
    sizes = binary_log_sizes(cdc_conn)
    at, checked = start, 0
    while at.is_before(end):
        cut = capped_end(at, end, sizes, 1500)
        with reader("t") as first:
            head = list(first.read_event_rows(at, cut))
            hint = first.next_transaction(cut) if cut.cut else None
        if hint is not None:
            assert not hint.is_before(cut) and hint.file == cut.file
            assert all(BinlogOffset(e.file, e.pos).is_before(hint) for e in head)  # its last transaction too
            with reader("t") as walked, reader("t") as opened:
                slow = [(e.file, e.pos, e.first_row) for e in walked.read_event_rows(cut, end)]
                fast = [(e.file, e.pos, e.first_row) for e in opened.read_event_rows(cut, end, walk_from=hint)]
            assert fast == slow and slow and (slow[0][0], slow[0][1]) >= (hint.file, hint.pos)
            checked += 1
        at = cut
    assert checked > 5


def test_the_mirror_follower_merges_queued_batches_in_bounded_groups() -> None:
    """A backlog queued behind a slow MERGE is read into the driver a group at a time."""
    t = TableId("d", "t")

    def batch(i: int, rows: int) -> tuple[int, Any]:
        return i, {t: pa.table({"x": list(range(rows))})}

    work = [batch(1, 300), batch(2, 300), batch(3, 900), batch(4, 100), batch(5, 50)]
    assert [[b for b, _ in g] for g in _groups(work, 600)] == [[1, 2], [3], [4, 5]]
    assert [[b for b, _ in g] for g in _groups(work, 10**9)] == [[1, 2, 3, 4, 5]]
