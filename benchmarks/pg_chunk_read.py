"""PostgreSQL snapshot chunk reads: COPY as CSV parsed by Arrow, against a binary COPY decoded by the
ADBC driver, on key-range chunks and on CTID-range chunks.

Run: ``.venv/bin/python benchmarks/pg_chunk_read.py [--scale 100] [--rounds 3]`` (``--scale 1`` for a
quick run: 100,000 rows; 100 is 2,000,000).

Starts a throwaway PostgreSQL with TPC-DS ``customer`` loaded as benchmarks/postgres_bench.py loads
it, splits the table with the job's own splitter at the job's chunk size (32,768 rows), and reads
every chunk into the same Arrow table (the job's types) in one process, in turn:

* **csv** (the job's path until this benchmark): ``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` on a
  psycopg session, read by ``server.copy_out``, parsed by Arrow's CSV reader into text columns and
  converted column-wise by ``types.texts_to_table``;
* **binary**: the dialect's ``select_chunk``: ``COPY (SELECT ...) TO STDOUT (FORMAT binary)`` decoded
  into Arrow by the ADBC PostgreSQL driver, then ``copy_binary.to_job_table``;
* each of the two again on **CTID ranges** (PeerDB's way): ``WHERE ctid >= '(p,0)'::tid AND ctid <
  '(q,0)'::tid`` over the table's pages, as many ranges as there are key chunks (PostgreSQL 14+
  runs them as TID range scans: no index, a sequential read of each range's pages).

The ways alternate in order between ``--rounds`` rounds (after a warm-up pass of each). For each
it prints the median rows/s, the client's CPU seconds (this process) and the server backend's
(``/proc/<pid>/stat`` of the session that ran the reads), with ratios against csv on key ranges.
Before timing, it checks that csv and binary give equal tables: every chunk of ``customer``, and a
table with every type the job supports and their edge values (NaN, infinities, BC dates, years
past 9999, ``24:00:00``, quoted array elements...). Writes
``benchmarks/results/pg_chunk_read-<date>-sf<scale>-<commit>.json`` with the load average and the
Python speed probe at the start and the end. Not a test: asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_bench import RunStart
from postgres_bench import KEY, SCHEMA, TABLE, PgCustomer, pg_customer

from binlog.postgres.config import PostgresSourceConfig
from binlog.postgres.copy_binary import borrowed_adbc, fetch_table, select_list, to_job_table
from binlog.postgres.dialect import PostgresDialect, range_predicate
from binlog.postgres.server import borrowed, copy_out
from binlog.postgres.types import quote_ident, sql_table, texts_to_table
from cdc.model.config import DEFAULT_CHUNK_SIZE
from cdc.model.schema import TableId, TableSchema
from chunking.chunks import SnapshotSplit
from chunking.splitter import ChunkSplitter, SplitterOptions

RESULTS = Path(__file__).with_name("results")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- the two readers, each given a WHERE clause ------------------------------------------------


def read_csv(conn: Any, schema: TableSchema, where: str) -> pa.Table:
    """The job's chunk read before the binary COPY (``dialect.select_chunk`` at 67e0ab1)."""
    cols = ", ".join(quote_ident(c) for c in schema.column_names)
    data = copy_out(conn, f"COPY (SELECT {cols} FROM {sql_table(schema.table_id)} WHERE {where}) "
                          "TO STDOUT WITH (FORMAT csv)")
    names = [f"c{i}" for i in range(len(schema.columns))]
    if not data:
        return texts_to_table([[] for _ in names], schema)
    texts = pacsv.read_csv(
        pa.py_buffer(data),
        read_options=pacsv.ReadOptions(column_names=names, block_size=max(1 << 20, min(len(data) + 1, 1 << 30))),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True,
                                             quoted_strings_can_be_null=False, null_values=[""]))
    return texts_to_table([texts.column(n).combine_chunks() for n in names], schema)


def read_binary(conn: Any, schema: TableSchema, where: str) -> pa.Table:
    """The dialect's chunk read: a binary COPY by the ADBC driver (``dialect.select_chunk``)."""
    return to_job_table(fetch_table(conn, f"SELECT {select_list(schema)} FROM {sql_table(schema.table_id)} "
                                          f"WHERE {where}"), schema)


# --- chunks ------------------------------------------------------------------------------------


def key_chunks(dialect: PostgresDialect, schema: TableSchema, chunk_size: int) -> list[SnapshotSplit]:
    """The job's chunks of the table: its splitter, its key, ``chunk_size`` rows."""
    column = dialect.chunk_key(schema)
    with contextlib.closing(dialect.connect()) as conn:
        splitter = ChunkSplitter(dialect.split_queries(conn, schema, column), schema, column,
                                 SplitterOptions(chunk_size=chunk_size))
        splits: list[SnapshotSplit] = []
        while not splitter.finished:
            splits += splitter.next_chunks(64)
    return splits


def ctid_ranges(conn: Any, table: TableId, count: int) -> list[str]:
    """``count`` CTID ranges of even page counts covering the table's pages (the last one open)."""
    pages = int(conn.execute("SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                             (sql_table(table),)).fetchone()[0])
    bounds = sorted({pages * i // count for i in range(1, count)})
    edges = [None, *bounds, None]
    return [" AND ".join([*([f"ctid >= '({lo},0)'::tid"] if lo is not None else []),
                          *([f"ctid < '({hi},0)'::tid"] if hi is not None else [])]) or "TRUE"
            for lo, hi in itertools.pairwise(edges)]


# --- measuring ---------------------------------------------------------------------------------


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) of one server backend process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


@dataclass
class Way:
    """One way to read the chunks: its reader, its WHERE clauses, its session and backend pid."""

    name: str
    read: Callable[[Any, TableSchema, str], pa.Table]
    wheres: list[str]
    session: str  # "csv" or "binary": the session it runs on


def run_way(way: Way, conns: dict[str, Any], pids: dict[str, int], schema: TableSchema) -> dict[str, float]:
    """Read every chunk once; rows, wall and CPU seconds."""
    conn, pid = conns[way.session], pids[way.session]
    server, own, started = backend_cpu(pid), own_cpu(), time.perf_counter()
    rows = sum(way.read(conn, schema, w).num_rows for w in way.wheres)
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "client_cpu_s": own_cpu() - own, "server_cpu_s": backend_cpu(pid) - server}


def summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    seconds = statistics.median(r["seconds"] for r in runs)
    return {"rows": int(runs[0]["rows"]), "seconds": round(seconds, 3), "rows_per_s": round(runs[0]["rows"] / seconds),
            "client_cpu_s": round(statistics.median(r["client_cpu_s"] for r in runs), 3),
            "server_cpu_s": round(statistics.median(r["server_cpu_s"] for r in runs), 3),
            "runs_s": [round(r["seconds"], 3) for r in runs]}


# --- equality ----------------------------------------------------------------------------------

EDGE_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE edges (
  id int PRIMARY KEY, i2 smallint, i8 bigint, o oid, dm posint, num numeric(12,3), num_free numeric, n40 numeric(40,2),
  r real, d double precision, b boolean, t text, vc varchar(10), ch char(4), nm name, c1 "char", by bytea,
  dt date, tm time, ttz timetz, ts timestamp(6), ts3 timestamp(3), tstz timestamptz, iv interval, u uuid,
  j json, jb jsonb, x xml, ia int[], ta text[], fa real[], ba bool[], ea mood[], ua uuid[], tsa timestamp[],
  ipa inet[], e mood, ip inet, net cidr, mac macaddr, vb varbit, m money, pt point
)"""

EDGE_ROWS = [
    "(1, -32768, 9223372036854775807, 4294967295, 7, -123456789.125, 'NaN', 1.25, 1.5, 'NaN', true, "
    "'hé \"q\" ,x\nnew line', 'abc', 'ab', 'nm', 'x', '\\x00ff10', '2024-02-29', '23:59:59.999999', "
    "'12:34:56.5+02', '2024-01-02 03:04:05.678901', '2024-01-02 03:04:05.1', '2024-01-02 03:04:05.5+05:30', "
    "'1 year 2 mons 3 days 04:05:06.5', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": [1, 2]}', "
    "'{\"b\": null}', '<a>x</a>', '{1,NULL,3}', '{\"x y\",NULL,\"q\\\"z\",\"\",\"NULL\"}', '{1.5,NaN,-Infinity}', "
    "'{t,f,NULL}', '{ok,sad}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '{\"2024-01-01 00:00:00\",infinity}', "
    "'{::1,10.0.0.1/8}', 'happy', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', B'101', '-1234.5', '(1,2)')",
    "(2, NULL, NULL, 0, NULL, 0, '1.0000000000000000000000000000000000000000001', -0.01, '-Infinity', 1e300, "
    "false, '', NULL, NULL, '', NULL, '', '0001-01-01', '24:00:00', '00:00:00+00', 'infinity', '-infinity', "
    "'infinity', '-1 day', NULL, 'null', '[]', NULL, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', NULL, '::1', "
    "NULL, NULL, B'', 0, NULL)",
    "(3, 1, -1, NULL, 1, NULL, 'Infinity', NULL, 0, -0.0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "'0044-03-15 BC', '00:00:00.000001', NULL, '10000-01-01 00:00:00', '4713-01-01 00:00:00 BC', "
    "'9999-12-31 23:59:59.999999+00', 'P0D', NULL, NULL, NULL, NULL, '[0:1]={7,8}', NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(4, " + ", ".join(["NULL"] * 42) + ")",
]


def same(a: pa.Table, b: pa.Table) -> list[str]:
    """The columns whose values differ (NaN equal to NaN), or the schemas when they differ."""
    if a.schema != b.schema:
        return [f"schema: {a.schema} != {b.schema}"]
    return [name for name in a.column_names if _normal(a.column(name).to_pylist()) != _normal(b.column(name).to_pylist())]


def _normal(value: Any) -> Any:
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return "NaN" if isinstance(value, float) and value != value else value


def check_equal(box: Any, database: str, dialect: PostgresDialect, conns: dict[str, Any],
                schema: TableSchema, splits: list[SnapshotSplit]) -> list[str]:
    """csv against binary: every chunk of ``schema``, then the edge-value table. Returns mismatches."""
    bad: list[str] = []
    column = schema.column(KEY)
    for s in splits:
        where = range_predicate(conns["csv"], column, s.start, s.end)
        diff = same(read_csv(conns["csv"], schema, where), read_binary(conns["binary"], schema, where))
        bad += [f"customer chunk {s.split_id}: {d}" for d in diff]
    with contextlib.closing(box.admin.connect(database)) as admin:
        admin.execute(EDGE_DDL)
        admin.execute("INSERT INTO edges VALUES " + ", ".join(EDGE_ROWS))
    with contextlib.closing(dialect.connect()) as conn:
        edges = dialect.table_schema(conn, TableId(SCHEMA, "edges"))
    a, b = read_csv(conns["csv"], edges, "TRUE"), read_binary(conns["binary"], edges, "TRUE")
    bad += [f"edges: {d}: {a.column(d).to_pylist()} != {b.column(d).to_pylist()}" for d in same(a, b)
            if not d.startswith("schema")] + [d for d in same(a, b) if d.startswith("schema")]
    return bad


# --- the run -----------------------------------------------------------------------------------


def measure(t: PgCustomer, rounds: int, chunk_size: int) -> dict[str, Any]:
    c = t.box.cdc
    dialect = PostgresDialect(PostgresSourceConfig(hostname=c.host, port=c.port, username=c.user, password=c.password,
                                                   database=t.database, tables=[f"{SCHEMA}\\.{TABLE}"],
                                                   chunk_size=chunk_size))
    with contextlib.closing(dialect.connect()) as conn:
        schema = dialect.table_schema(conn, TableId(SCHEMA, TABLE))
        splits = key_chunks(dialect, schema, chunk_size)
        ctids = ctid_ranges(conn, schema.table_id, len(splits))
    with borrowed(dialect.settings) as pg, borrowed_adbc(dialect.settings) as adbc:
        conns = {"csv": pg, "binary": adbc}
        with adbc.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pids = {"csv": int(pg.info.backend_pid), "binary": int(cur.fetchone()[0])}
        column = schema.column(KEY)
        keys = [range_predicate(pg, column, s.start, s.end) for s in splits]
        ways = [Way("csv, key ranges", read_csv, keys, "csv"), Way("binary, key ranges", read_binary, keys, "binary"),
                Way("csv, CTID ranges", read_csv, ctids, "csv"),
                Way("binary, CTID ranges", read_binary, ctids, "binary")]
        mismatches = check_equal(t.box, t.database, dialect, conns, schema, splits)
        print(f"{len(splits)} key chunks of {chunk_size:,} rows ({splits[0].start!r}..), {len(ctids)} CTID ranges; "
              f"csv and binary tables {'equal' if not mismatches else 'DIFFER'}", flush=True)
        for m in mismatches:
            print("  differs:", m[:400], flush=True)
        for way in ways:  # warm-up: the page cache, the shared buffers, the imports
            run_way(way, conns, pids, schema)
        runs: dict[str, list[dict[str, float]]] = {w.name: [] for w in ways}
        for r in range(rounds):
            for way in (ways if r % 2 == 0 else ways[::-1]):
                runs[way.name].append(run_way(way, conns, pids, schema))
                got = runs[way.name][-1]
                print(f"  round {r + 1} {way.name:<20} {got['seconds']:6.2f} s  load {os.getloadavg()[0]:.2f}",
                      flush=True)
    ways_out = {name: summarize(rs) for name, rs in runs.items()}
    base = ways_out["csv, key ranges"]
    for w in ways_out.values():
        w["vs_csv"] = round(w["rows_per_s"] / base["rows_per_s"], 2)
        w["client_cpu_vs_csv"] = round(w["client_cpu_s"] / base["client_cpu_s"], 2)
        w["server_cpu_vs_csv"] = round(w["server_cpu_s"] / base["server_cpu_s"], 2)
    return {"chunks": len(splits), "chunk_size": chunk_size, "ctid_ranges": len(ctids), "equal": not mismatches,
            "mismatches": mismatches, "ways": ways_out}


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--scale", type=int, default=100, help="TPC-DS scale (1 = 100k rows, 100 = 2M)")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes of each way, the order alternating")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="rows per key chunk (the job's)")
    args = parser.parse_args()
    start = RunStart.now()
    print(f"TPC-DS customer in PostgreSQL, scale {args.scale}; {start.describe()}", flush=True)
    with pg_customer(args.scale) as t:
        print(f"PostgreSQL {t.box.version}: {t.rows:,} rows loaded", flush=True)
        result = measure(t, args.rounds, args.chunk_size)
        version = t.box.version
    print(f"\n{'way':<20} {'rows/s':>10} {'vs csv':>7} {'client CPU s':>13} {'server CPU s':>13}")
    for name, w in result["ways"].items():
        print(f"{name:<20} {w['rows_per_s']:>10,} {w['vs_csv']:>6.2f}x {w['client_cpu_s']:>8.2f} ({w['client_cpu_vs_csv']:.2f}x)"
              f" {w['server_cpu_s']:>7.2f} ({w['server_cpu_vs_csv']:.2f}x)")
    code = commit()
    out = RESULTS / f"pg_chunk_read-{dt.date.today().isoformat()}-sf{args.scale}-{code}.json"
    RESULTS.mkdir(exist_ok=True)
    out.write_text(json.dumps({"scale": args.scale, "rows": t.rows, "date": dt.date.today().isoformat(), "code": code,
                               "postgres": version, "rounds": args.rounds, **start.conditions(), **result},
                              indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
