"""The PostgreSQL peers of benchmarks/peers.py (``--source postgres``): Flink CDC 3.5.0's
``postgres-cdc`` incremental snapshot source and Debezium 3.5.0.Final's PostgreSQL connector
against ours, on the same TPC-DS customer table in the same PostgreSQL (postgres_bench.py's
sandbox and load, ``pg_customer``; ours is postgres_bench.py's job).

* **Flink CDC** (module ``benchmarks/peers/flink-cdc-postgres``): ``PostgresSourceBuilder``'s
  incremental source in Flink's MiniCluster at ``--parallelism``, the flink-cdc-base framework
  ours follows: chunks of ``--chunk-size`` rows tuned (ours' size; as shipped its default, 8096),
  each chunk read between a low and a high watermark and its backfill read from a slot of its own.
  Snapshot with ``StartupOptions.snapshot()``, catch-up with ``StartupOptions.committed()``.
* **Debezium** (module ``benchmarks/peers/debezium``, ``--connector postgres``): the embedded
  engine, snapshot with ``snapshot.mode=initial`` (one thread for one table: parallelism 1),
  catch-up with ``snapshot.mode=no_data`` and no offsets.

Who makes what, as the sandbox's superuser unless said:

* **the login**: role ``peer`` with LOGIN REPLICATION and SELECT on the table, the privileges of
  ours' ``cdc`` role; made here;
* **the publication**: ``peers``, ``FOR TABLE public.customer``, made here (making a publication
  takes the table's owner; ours reads ``spark_cdc``, ``FOR ALL TABLES``, made with the
  database). Both peers name it (``publication.name``); at its default ``publication.autocreate.mode``
  a connector finds it there and creates nothing. Every tool decodes with ``pgoutput``
  (``plugin.name``: both peers default to decoderbufs, an extension PostgreSQL does not ship);
* **snapshot slots**: each peer run makes its own as it starts, as shipped: Flink CDC's enumerator
  the slot of the stream split that would follow the snapshot (``--slot``), and each chunk's backfill
  one more (``<slot>_<subtask>``, dropped after the chunk); Debezium's ``initial`` snapshot the slot
  its snapshot's transaction starts from. This harness drops them after the run;
* **catch-up slots**: made here before the burst, one per peer run
  (``pg_create_logical_replication_slot(name, 'pgoutput')``), so that every run reads the same
  backlog from the same start: Flink CDC from the slot's ``confirmed_flush_lsn``
  (``committed()``), Debezium from the slot's position too (with no offsets and no snapshot, the
  connector starts streaming where the slot stands). PEERS.md's start for Debezium on MariaDB, an
  offset file recorded by a ``no_data`` run, has no use here: the slot is the position. Ours
  catches up from its job's own slot, where its last snapshot left it; each slot is dropped after
  its run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from peer_harness import FLINK_CDC_CHUNK_SIZE, LaunchTimedPhase, OursFromLaunch, PeerBench
from postgres_bench import SCHEMA, TABLE, PgCustomer, apply_updates
from postgres_bench import Bench as PgBench
from postgres_bench import parse_args as pg_options
from tpcds_customer import paired_snapshots

from cdc.app.sandbox.postgres import PgEndpoint

PEER_ROLE = "peer"
PUBLICATION = "peers"
TOOLS = {"flink-cdc": "flink-cdc-postgres", "debezium": "debezium"}  # tool -> its module
SLOT_DROP_S = 60.0  # how long a finished peer's walsender may take to let its slot go


def peer_role(table: PgCustomer) -> PgEndpoint:
    """The peers' login (LOGIN REPLICATION, SELECT on the table) and their publication."""
    admin, password = table.box.admin, f"peer-{uuid.uuid4().hex[:16]}"
    with contextlib.closing(admin.connect()) as conn:
        conn.execute(f"CREATE ROLE \"{PEER_ROLE}\" LOGIN REPLICATION PASSWORD '{password}'")
    with contextlib.closing(admin.connect(table.database)) as conn:
        conn.execute(f'GRANT USAGE ON SCHEMA {SCHEMA} TO "{PEER_ROLE}"')
        conn.execute(f'GRANT SELECT ON {SCHEMA}.{TABLE} TO "{PEER_ROLE}"')
        conn.execute(f'CREATE PUBLICATION "{PUBLICATION}" FOR TABLE {SCHEMA}.{TABLE}')
    return PgEndpoint(admin.host, admin.port, PEER_ROLE, password)


def drop_slots(conn: psycopg.Connection[Any], name: str) -> list[str]:
    """Drop the slot ``name`` and those named ``<name>_...`` (Flink CDC's backfill slots), ending
    the walsender that still holds one (a peer's JVM halts without closing its connections);
    the names dropped.

    Raises:
        RuntimeError: a slot stayed active for :data:`SLOT_DROP_S`.
    """
    query = "SELECT slot_name, active_pid FROM pg_replication_slots WHERE slot_name = %s OR starts_with(slot_name, %s)"
    deadline, dropped = time.monotonic() + SLOT_DROP_S, []
    while rows := conn.execute(query, (name, f"{name}_")).fetchall():
        for slot, pid in rows:
            if pid is not None:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                continue
            with contextlib.suppress(psycopg.errors.ObjectInUse):  # taken again between the two queries
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                dropped.append(slot)
        if time.monotonic() > deadline:
            raise RuntimeError(f"replication slots {[r[0] for r in rows]} stayed active for {SLOT_DROP_S:.0f} s")
        time.sleep(0.05)
    return dropped


class OursPostgres(OursFromLaunch, PgBench):
    """postgres_bench's phases, timed from each child process's launch."""

    def server_process(self) -> tuple[int | None, str]:
        return self.server_pid, "postgres"


class PostgresPeers(PeerBench):
    """The PostgreSQL peers and ours on postgres_bench.pg_customer's table."""

    def __init__(self, table: PgCustomer, args: argparse.Namespace, work: Path,
                 classpaths: dict[str, str]) -> None:
        super().__init__(args, work, classpaths)
        self.table = table
        self.login = peer_role(table)
        # postgres_bench's options at their defaults (the job's), so a new option there cannot miss here
        self.ours = OursPostgres(table, pg_options(["--chunk-size", str(args.chunk_size),
                                                    "--updates", str(args.burst)]), work)
        self._runs = itertools.count(1)
        self.facts.update(postgres=table.box.version, publication=PUBLICATION, decoding_plugin="pgoutput")

    @contextlib.contextmanager
    def admin(self) -> Iterator[psycopg.Connection[Any]]:
        with contextlib.closing(self.table.box.admin.connect(self.table.database)) as conn:
            yield conn

    def peer(self, tool: str, phase: str, tuned: bool, slot: str, expect: int) -> None:
        """One peer run reading through ``slot``, which is dropped after it."""
        t, login, a = self.table, self.login, self.args
        p = a.parallelism if tool == "flink-cdc" else 1
        args = ["--mode", phase, "--host", login.host, "--port", str(login.port), "--user", login.user,
                "--database", t.database, "--schema", SCHEMA, "--table", TABLE, "--slot", slot,
                "--publication", PUBLICATION, "--expect", str(expect)]
        if tool == "flink-cdc":
            args += ["--parallelism", str(p), "--chunk-size", str(a.chunk_size if tuned else FLINK_CDC_CHUNK_SIZE)]
        else:
            args += ["--connector", "postgres", "--offsets", str(self.work / f"{slot}.offsets")]
        self.run_peer(tool, TOOLS[tool], phase, tuned, p, args, login.password)
        with self.admin() as conn:
            dropped = drop_slots(conn, slot)
        self.runs[-1].detail["slots_dropped"] = dropped

    def snapshot(self, tool: str, tuned: bool) -> None:
        """A peer's snapshot, through a slot of its own that the peer makes."""
        self.peer(tool, "snapshot", tuned, f"peer_snapshot_{next(self._runs)}", self.table.rows)

    def tuned_snapshots(self) -> None:
        for tool in TOOLS:
            self.snapshot(tool, True)

    def snapshots(self) -> Path:
        """The peers' snapshots as shipped (unless --quick), then ``--rounds`` pairs of both tuned
        peers and ours back to back, the order alternating (tpcds_customer.paired_snapshots): which
        peer is the faster one is not known before; ours' last run's job continues in catch-up."""
        for tool in () if self.args.quick else TOOLS:
            self.snapshot(tool, False)
        return paired_snapshots(self.args.rounds, self.tuned_snapshots, self.our_snapshot, self.ours.forget,
                                self.runs)

    def catch_ups(self, job: Path) -> None:
        """A slot per peer run, one burst of updates, then every tool's catch-up of it (each peer
        as shipped and tuned; ours from its job's slot)."""
        runs = {(tool, tuned): f"peer_catch_up_{tool.replace('-', '_')}_{'tuned' if tuned else 'shipped'}"
                for tool in TOOLS for tuned in (False, True)}
        with self.admin() as conn:
            for slot in runs.values():
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        changed, seconds = apply_updates(self.table.box.admin, self.table, self.args.burst)
        self.facts["burst"] = {"updates": changed, "seconds": round(seconds, 2), "from_lsn": row[0] if row else None,
                               "slots": sorted(runs.values())}
        print(f"  burst: {changed:,} updates in {seconds:.1f}s", flush=True)
        for (tool, tuned), slot in runs.items():
            self.peer(tool, "catch-up", tuned, slot, changed)
        self.our_catch_up(job, changed)

    def catch_up_phase(self, job: Path, p: int, cpb: int) -> LaunchTimedPhase:
        self.ours.pipeline(f"ours-catch-up-p{p}", job, p, cpb)
        return self.ours.last
