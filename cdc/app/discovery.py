"""Tables that join and leave a running job (``source.table_discovery_interval``; driver).

A continuous job (not ``--once``) asks the dialect every interval which tables ``source.tables``
matches: one catalog query, no start-up checks. When a table matches that the job does not
capture, or a captured table is gone, :meth:`TableWatcher.poll` returns the new set, and the
runner (cdc/app/runner.py) stops the streaming query between two batches and starts a new one on
the same checkpoint, in the same process and Spark session. A new query is needed because the
stream's columns depend on the tables (:class:`~cdc.spark.layout.StreamLayout`).

What the new query does with the tables is what every restart of the job does
(cdc/spark/planner.py):

* a **new table joins** ``pending``: it is snapshotted in chunks with the watermark merge while
  the other tables stream on from the committed offset. None of its log changes flows before its
  chunks are emitted, and each chunk's backfill reads the log only from its low watermark, so a
  row written between the ``CREATE TABLE`` and the restart reaches the sinks once, as a snapshot
  row, and every later change once, as a change;
* a **table gone** (dropped, renamed away) leaves the offsets; its sink tables stay as they are.
  Its changes just before the drop are still in the log ahead of the query, so the running query
  goes on until it has committed a batch through the log position the look saw
  (:attr:`TableWatcher.drain_to`, past the drop), and only then stops: they reach the sinks.
  A batch planned before it went and replayed after neither stages nor emits its chunks.

A table that matches but cannot be captured yet is left out, with one warning naming the fix,
and tried again at every look: a table without a primary key and without
``source.chunk_key_columns`` (a snapshot needs a chunk key), or on PostgreSQL one the role may not
read or add to the publication (:class:`~binlog.dialect.SupportsTableJoin`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from binlog.dialect import Dialect, SupportsTableJoin
from cdc.model.errors import CdcError, ConfigError, TableNotFound
from cdc.model.positions import Offset
from cdc.model.schema import TableId, TableSchema
from cdc.spark.source import SNAPSHOT_MODES

log = logging.getLogger(__name__)


class TableWatcher:
    """Looks for tables that join or leave a running job (driver, the runner's thread).

    Args:
        dialect: the source's dialect.
        interval_s: seconds between looks.
        captured: the tables the running query captures.
    """

    def __init__(self, dialect: Dialect, interval_s: float, captured: Iterable[TableId]) -> None:
        self.dialect = dialect
        self.interval_s = interval_s
        self.captured = frozenset(captured)
        self._next = time.monotonic() + interval_s
        self._refused: dict[TableId, str] = {}  # tables left out, with the reason already logged
        self._warned = ""  # the last look's problem, logged once
        self.drain_to: Offset | None = None  # the log end at the last look that found a table gone

    @classmethod
    def of(cls, dialect: Dialect, captured: Iterable[TableId]) -> TableWatcher | None:
        """A watcher at ``source.table_discovery_interval``; None when that is off."""
        interval = dialect.config.discovery_interval_s
        return None if interval is None else cls(dialect, interval, captured)

    def poll(self) -> frozenset[TableId] | None:
        """The tables to capture from now on when they changed, else None; looks at most once per
        interval. Never raises: a look that fails is logged and retried at the next interval."""
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + self.interval_s
        return self.look()

    def after_failure(self) -> frozenset[TableId] | None:
        """The tables to capture when the query failed and a captured table is gone (a chunk read
        or a split query of a table dropped during its snapshot fails), else None."""
        tables = self.look()
        return tables if tables is not None and not self.captured <= tables else None

    def look(self) -> frozenset[TableId] | None:
        """Discover now: the new set of tables when a table joins or leaves, else None. When a
        table is gone, :attr:`drain_to` is the log's end as the look saw it: past the drop, so a
        query that commits through it has every change the table had."""
        try:
            with contextlib.closing(self.dialect.connect()) as conn:
                found = self._discover(conn)
                joining = [t for t in found if t not in self.captured and self._joins(conn, t)]
                self.drain_to = self.dialect.current_offset(conn) if not self.captured <= set(found) else None
        except Exception as exc:  # the query meets a lasting problem itself; a look only waits
            self._warn_once(f"looking for new and dropped tables failed (tried again every "
                            f"{self.interval_s:g}s): {exc}")
            return None
        gone = sorted(self.captured - set(found))
        tables = (self.captured - set(gone)) | set(joining)
        if not tables:
            self._warn_once(f"no table matches source.tables any more ({', '.join(map(str, gone))} gone): "
                            "the query keeps running on its tables until one matches")
            return None
        self._warned = ""
        if not joining and not gone:
            return None
        for t in joining:
            log.info("table %s matches source.tables: it joins the running job (snapshotted while the "
                     "others stream, then streamed)", t)
        for t in gone:
            log.info("captured table %s is gone from the source: it is no longer captured; its sink "
                     "tables stay", t)
        return tables

    def schemas(self, tables: Iterable[TableId]) -> dict[TableId, TableSchema]:
        """The tables' definitions now, for the next query (a table dropped meanwhile is left out);
        they become :attr:`captured`.

        Raises:
            CdcError: the source cannot be reached.
        """
        out = {}
        with contextlib.closing(self.dialect.connect()) as conn:
            for t in sorted(tables):
                with contextlib.suppress(TableNotFound):
                    out[t] = self.dialect.table_schema(conn, t)
        self.captured = frozenset(out)
        return out

    def _warn_once(self, message: str) -> None:
        if message != self._warned:
            log.warning("%s", message)
        self._warned = message

    def _discover(self, conn: Any) -> list[TableId]:
        try:
            return self.dialect.discover_tables(conn, self.dialect.config.tables)
        except ConfigError:
            return []  # nothing matches

    def _joins(self, conn: Any, table: TableId) -> bool:
        """Whether a newly matched table can be captured; a warning names the fix once if not."""
        try:
            schema = self.dialect.table_schema(conn, table)
            if self.dialect.config.startup_mode in SNAPSHOT_MODES:
                self.dialect.chunk_key(schema)  # NoChunkKey names source.chunk_key_columns
            if isinstance(self.dialect, SupportsTableJoin):
                self.dialect.prepare_join(conn, [table])
        except TableNotFound:
            return False  # dropped again already
        except CdcError as exc:
            if self._refused.get(table) != str(exc):
                log.warning("table %s matches source.tables but cannot join the running job yet (the job "
                            "looks again every %gs): %s", table, self.interval_s, exc)
            self._refused[table] = str(exc)
            return False
        self._refused.pop(table, None)
        return True
