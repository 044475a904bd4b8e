"""The Dialect contract: everything the pipeline asks of a source database (Flink CDC's
``DataSourceDialect``).

One implementation per database, one sub-package each (``binlog/mysql``, ...), registered in
:mod:`binlog.registry` under its ``source.type``. The layers above (the Spark source, the job)
call only this contract; the algorithms below (:mod:`chunking`) state what they need as small
protocols (:class:`~chunking.splitter.SplitQueries`, :class:`~chunking.chunks.KeyOrder`) that a
dialect answers.

A dialect object holds its validated ``source:`` config and nothing else, so it pickles to
executors; every method that talks to the server opens its own connection there, or takes one
the caller opened with :meth:`Dialect.connect`. Where each method runs is in its docstring.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

import pyarrow as pa

from cdc.model.config import SourceConfig
from cdc.model.events import ChangeEvent
from cdc.model.history import Behavior, HistoryStore, SchemaHistory, SchemaVersion, SortKey
from cdc.model.positions import Offset
from cdc.model.schema import Column, TableId, TableSchema
from chunking.chunks import KeyOrder, SnapshotSplit
from chunking.splitter import SplitQueries


@dataclass(frozen=True)
class ChangeRows:
    """Change rows of one table from a log slice, in log order (:mod:`cdc.model.envelope`
    layout, primary-key updates already split into a delete and a create). No row: a DDL of the
    table handed over where it lies, tagged with its version and the DDL
    (:func:`cdc.model.history.with_schema`; MySQL, where the log holds the statement).

    Attributes:
        table_id: the table.
        rows: the change rows.
        first: the log sort key of the first row (of the DDL without rows; orders the files of a
            split slice).
    """

    table_id: TableId
    rows: pa.Table
    first: tuple[int, ...]


@dataclass(frozen=True)
class ChunkVersion:
    """The schema versions a snapshot chunk meets (:meth:`LogReader.chunk_version`).

    Attributes:
        version: the version its rows were read under (in force at its LW).
        split: where the next version of its table starts inside its window ``(LW, HW)``: the
            chunk's rows end there, the log after it reaches the sinks as changes (None: no
            DDL in the window).
        later: every version that starts inside the window, in order.
    """

    version: SchemaVersion
    split: Any | None = None
    later: tuple[SchemaVersion, ...] = ()


class LogReader(Protocol):
    """Reads bounded slices of the change log for some tables (executor; one per task and
    reader id; a context manager that closes its connections).

    A reader follows the DDL of its tables (and of the ``follow`` tables it was made with) into
    the job's schema history as it reads; it yields rows of its tables only."""

    def changes(self, start: Any, end: Any, decode_from: Any | None = None) -> Iterator[ChangeEvent]:
        """The changes in ``(start, end]``, one per row, in log order (the backfill's input),
        each image with the columns of the schema version it was written under.
        ``decode_from``: the log before it is only read for its DDL, no change of it is yielded.
        The schema history knows every version that starts before a yielded change."""
        ...

    def chunk_version(self, table: TableId, low: Any, high: Any, read: pa.Schema) -> ChunkVersion:
        """The schema version a chunk of ``table`` read at ``low`` (its rows' Arrow schema
        ``read``, tagged by :func:`chunking.backfill.tag_read_schema`) was read under, and the
        versions that start in its window ``(low, high)``. Valid once :meth:`changes` has read
        past ``low`` (or to ``high``), from a start where the history was complete.

        Raises:
            SchemaChanged: the rows' columns are not what the history says the table had at
                ``low`` (a DDL the log does not show), or the chunk key column changed.
        """
        ...

    def version_at(self, table: TableId, offset: Any) -> SchemaVersion | None:
        """The version the schema history knows in force at ``offset``, without reading the log
        (None: the table has no history)."""
        ...

    def snapshot_rows(self, table: TableId, version: SchemaVersion, rows: pa.Table, ts_ms: int) -> pa.Table:
        """A chunk's ``op='r'`` rows (:func:`cdc.model.envelope.snapshot_envelope` of
        ``version``'s columns) in the sinks' schema, tagged with ``version``
        (:func:`cdc.model.history.with_schema`), as the stream's rows are."""
        ...

    def change_rows(self, start: Any, end: Any, decode_from: Any | None = None) -> Iterator[ChangeRows]:
        """The same changes as Arrow change rows, a few tables' worth at a time (the stream's
        hot path). ``decode_from`` skips the changes before it (a slice cut for several
        readers, see :class:`SupportsSplitSlices`)."""
        ...

    def __enter__(self) -> LogReader:
        ...

    def __exit__(self, *exc: object) -> None:
        ...


class Dialect(ABC):
    """A source database's part of the pipeline.

    Args:
        config: the validated ``source:`` section (of :attr:`config_class`).
    """

    name: ClassVar[str]
    """The ``source.type`` this dialect serves, and its registry key."""
    config_class: ClassVar[type[SourceConfig]]
    """Its ``source:`` config model."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.address})"

    # --- driver: discovery and start-up checks ----------------------------------------------

    @abstractmethod
    def connect(self) -> Any:
        """An autocommit DB-API connection as the CDC user (driver; the caller closes it).

        Raises:
            SourceUnreachable: nothing answers at the configured address.
            AuthenticationFailed: the server refused the user or password.
        """

    @abstractmethod
    def check_source(self, conn: Any) -> None:
        """The start-up checks: server settings, privileges, log retention, reader ids.

        Raises:
            CdcError: a Terminal error whose message names the setting or GRANT to fix.
        """

    @abstractmethod
    def discover_tables(self, conn: Any, patterns: Sequence[str]) -> list[TableId]:
        """The tables whose ``db.table`` fully matches one of the regexes.

        Raises:
            ConfigError: nothing matches (the message lists what the user can see).
        """

    @abstractmethod
    def table_schema(self, conn: Any, table: TableId) -> TableSchema:
        """A table's columns (with their Arrow types) and primary key.

        Raises:
            TableNotFound: the table does not exist or the user cannot see it.
        """

    @abstractmethod
    def chunk_key(self, schema: TableSchema) -> Column:
        """The column a table is split on (``source.chunk_key_columns``, else the primary key).

        Raises:
            NoChunkKey: no usable key, and none configured.
            ConfigError: the configured column is unusable.
        """

    @abstractmethod
    def split_queries(self, conn: Any, schema: TableSchema, column: Column) -> SplitQueries:
        """The queries the chunk splitter runs on ``conn`` for one table (driver)."""

    # --- positions --------------------------------------------------------------------------

    @abstractmethod
    def current_offset(self, conn: Any) -> Offset:
        """The log position after the last committed transaction (a high watermark)."""

    @abstractmethod
    def startup_offset(self, conn: Any) -> Offset | None:
        """Where the log is read from first for ``source.startup_mode`` (None: now)."""

    @abstractmethod
    def offset_from_dict(self, data: dict[str, Any]) -> Offset:
        """The offset :meth:`Offset.to_dict` wrote (read back from the offset log)."""

    @abstractmethod
    def describe_offset(self, data: dict[str, Any]) -> str:
        """A short human form of a stored offset, for progress lines (``mysql-bin.000003:154``)."""

    # --- executors ----------------------------------------------------------------------------

    @abstractmethod
    def read_chunk(self, schema: TableSchema, split: SnapshotSplit,
                   on_low_watermark: Callable[[], None] | None = None) -> tuple[Offset, pa.Table]:
        """Record the low watermark, then read the chunk's rows (executor; no locks).

        ``schema`` is the table as the caller last knew it. A DDL may have changed it since, or
        change it while the chunk is read: the rows are read under the table's definition at the
        LW, which no DDL changed before the SELECT ran (read again otherwise), and are tagged
        with it (:func:`chunking.backfill.tag_read_schema`). ``on_low_watermark`` runs right
        after the LW is taken (tests inject DDL there).

        Returns:
            The LW and the rows as that definition's ``arrow_schema()``: every change after the
            LW is either in the rows or in the log after the LW, never lost between them.

        Raises:
            SchemaChanged: the chunk key column was renamed or dropped.
        """

    @abstractmethod
    def key_order(self, column: Column, conn: Any) -> KeyOrder:
        """The server's order of a chunk key column (``conn`` from :meth:`connect`)."""

    @abstractmethod
    def log_reader(self, reader_id: int, tables: Sequence[TableSchema],
                   follow: Sequence[TableSchema] = ()) -> LogReader:
        """A reader of the change log for ``tables`` (executor). ``reader_id`` is one of
        :meth:`reader_ids`: readers that run at the same time use different ids. The reader
        also follows the DDL of ``follow`` (their schema history), without yielding their rows."""

    @abstractmethod
    def reader_ids(self) -> list[int]:
        """The ids concurrent log readers take, one each (MySQL: ``source.server_id``)."""

    @abstractmethod
    def snapshot_source(self, table: TableId, high_watermark: Offset, ts_ms: int) -> dict[str, Any]:
        """The source block of a chunk's ``r`` rows emitted at ``high_watermark``."""


@dataclass(frozen=True)
class SourceFinding:
    """One prerequisite of CDC on the source server, as ``python -m cdc validate`` prints it.

    Attributes:
        item: what is checked (``REPLICATION SLAVE``, ``binlog_format``, ``SELECT on shop.t``).
        ok: the server meets it.
        found: what the server has (``STATEMENT``, ``missing``).
        fix: the exact statement or setting to apply (empty when ``ok``).
    """

    item: str
    ok: bool
    found: str
    fix: str = ""


class SupportsSourceReport(ABC):
    """A dialect that reports every prerequisite at once (grants, log settings, retention),
    each with the statement that fixes it, where :meth:`Dialect.check_source` stops at the first."""

    @abstractmethod
    def source_report(self, conn: Any, tables: Sequence[TableId]) -> list[SourceFinding]:
        """Check the server and the CDC user for ``tables`` (driver; reads only, changes nothing)."""


class SupportsLogRelease(ABC):
    """A dialect whose server keeps the log until told it is no longer needed (Postgres: a
    replication slot's confirmed position)."""

    @abstractmethod
    def release(self, conn: Any, offset: Offset) -> None:
        """Let the server drop the log before ``offset`` (driver). Called only once the batch
        ending there is committed by every sink and by Spark, with a position no later than
        the low watermark of any chunk still to be emitted; never moves backwards."""


class SupportsTableJoin(ABC):
    """A dialect whose server must be prepared before a table that joins a running job can be
    captured (Postgres: the role must read it and the publication must list it)."""

    @abstractmethod
    def prepare_join(self, conn: Any, tables: Sequence[TableId]) -> None:
        """Make ``tables`` capturable, where the role may (driver; at start and when tables join).

        Raises:
            MissingPrivilege: the role may not; the message names the statement to run.
        """


class SupportsSchemaHistory:
    """A dialect that follows DDL with a schema history kept in the job's state
    (:mod:`cdc.model.history`, docs/concepts/schema-evolution.md)."""

    history_store: HistoryStore | None = None  # the job's state directory, once bound

    def use_schema_history(self, store: HistoryStore, schemas: dict[TableId, TableSchema]) -> None:
        """Keep the history in ``store`` from now on, starting each table without one at
        ``schemas`` (driver, before the dialect is pickled to executors)."""
        history = SchemaHistory(store)
        for schema in schemas.values():
            history.start(schema)  # version 0 for a table without a history (a first start)
        self.bind_schema_history(store)

    def bind_schema_history(self, store: HistoryStore) -> None:
        """Keep the history in ``store``, which the driver started (:meth:`use_schema_history`),
        without starting any table's (executors: their readers follow the DDL there)."""
        self.history_store = store

    def catalog_version_at(self, offset: Offset) -> tuple[SortKey, str] | None:
        """Where a version read from the catalog at the log's position ``offset`` starts: its
        history key and its position in the dialect's words; None when the dialect finds such
        versions in its log itself (Postgres: with the table's first change under a definition,
        or at a chunk's HW, ``binlog/postgres/reader.py``)."""
        return None

    def join_schema_history(self, schemas: Sequence[TableSchema], now: Callable[[], Offset]) -> list[SchemaVersion]:
        """Record the definition of each table that joins the job's offsets with this plan as a
        new version at the log's current position (``now()``, asked once, only when needed),
        where it differs from the table's latest stored version (driver, once per plan in which
        tables join; :meth:`cdc.model.history.SchemaHistory.joined`).

        ``schemas`` must be tables that no committed or planned offset names: the log of a table
        an offset names is followed, and its DDL recorded where it lies.

        Raises:
            SchemaChanged: a definition differs under ``source.schema_change.behavior: exception``.
        """
        if self.history_store is None:
            return []
        config: Any = getattr(self, "config", None)  # a dialect's validated source: section
        behavior = cast(Behavior, config.schema_change.behavior) if hasattr(config, "schema_change") else "lenient"
        history = SchemaHistory(self.history_store, behavior)
        changed = [s for s in schemas if history.known(s.table_id) and history.versions(s.table_id)[-1].schema != s]
        where = self.catalog_version_at(now()) if changed else None
        if where is None:
            return []
        made = [history.joined(schema, *where) for schema in changed]
        return [v for v in made if v is not None]


class SupportsSplitSlices(ABC):
    """A dialect whose long log slices can be decoded by several readers at once."""

    @abstractmethod
    def slice_cuts(self, connection: Callable[[], Any], start: Any, end: Any, parts: int) -> list[Any]:
        """Where to cut ``(start, end]`` so that up to ``parts`` readers finish together
        (driver; ``connection()`` gives a connection, opened only when needed); empty when the
        slice is not worth cutting."""


def piece_offsets(total: int, parts: int, min_bytes: int, skip_cost: float) -> list[int]:
    """Where to cut ``total`` bytes of log so that up to ``parts`` readers finish together.

    Every reader after the first walks over the log before its piece (for the DDL or the
    relation definitions in force there) at ``skip_cost`` of reading it (0 to 1), so piece ``k``
    gets ``(1 - skip_cost) ** k`` times the bytes of the first. Fewer pieces when a piece would
    hold fewer than ``min_bytes``.

    Returns:
        The ``n - 1`` inner cuts of ``n`` pieces as byte offsets from the slice's start, in
        order; empty when the slice stays whole.
    """
    n = min(parts, total // max(1, min_bytes))

    def weights(k: int) -> list[float]:
        return [(1.0 - skip_cost) ** i for i in range(k)]

    while n >= 2 and total * weights(n)[-1] / sum(weights(n)) < min_bytes:
        n -= 1  # the last piece, the smallest, would be too small
    if n < 2:
        return []
    share, done, cuts = weights(n), 0.0, []
    for w in share[:-1]:
        done += w
        cuts.append(int(total * done / sum(share)))
    return cuts


class SupportsBatchCap(ABC):
    """A dialect that can end a batch's log slice before the server's current position, so that
    a backlog is read in batches of bounded size (Spark's admission control, ``ReadMaxBytes``)."""

    @abstractmethod
    def max_batch_bytes(self) -> int | None:
        """The configured most bytes of log one batch reads (None: no cap)."""

    @abstractmethod
    def capped_end(self, connection: Callable[[], Any], start: Any, end: Any, max_bytes: int) -> Any:
        """``end``, or an offset after ``start`` and before ``end`` where a batch of at most about
        ``max_bytes`` of log ends (driver; ``connection()`` gives a connection, opened only when
        needed). Slices that meet there give each transaction to exactly one batch."""


class SupportsStatePruning(ABC):
    """A dialect that keeps files of its own in the job's state directory which only batches
    starting before some position can use (MySQL: the walk hints of capped batches' cuts)."""

    @abstractmethod
    def prune_state(self, committed: Offset) -> None:
        """Delete the files that no batch starting at or after ``committed`` can use (driver;
        called with the end of each committed batch). Idempotent; a file it fails to delete is
        logged and left for a later call (the files are shortcuts, never needed for correctness)."""
