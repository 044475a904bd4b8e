"""The chunk splitter: cuts a table into key-range chunks, lazily (Flink CDC's ChunkSplitter).

Runs on the driver, once per table, a few chunks at a time, through the queries a dialect
answers (:class:`SplitQueries`). It probes the chunk key's ``MIN``, ``MAX`` and the approximate
row count, then:

* **Even splitting** when the key is an integer or DECIMAL and the distribution factor
  ``(max - min + 1) / row_count`` lies in ``[distribution_factor_lower,
  distribution_factor_upper]``: boundaries ``min + i * step`` with the dynamic chunk size
  ``step = factor * chunk_size`` (at least 1 for integers, at least one unit of the column's
  scale for DECIMAL, where Flink would force an integer step). No query per chunk.
* **Uneven splitting** otherwise (strings, dates, sparse or skewed keys, unknown row count):
  each chunk end is the largest of the next ``chunk_size`` keys from the chunk's start
  (:meth:`SplitQueries.chunk_end`); when that is the chunk's own start (one key value repeated
  more than chunk_size times) the end is the smallest key above it. The same query returns the
  row count and whether the end moved, both decided by the server (collation applies).
  Where Flink stops when an end reaches the probed MAX, we stop when fewer than chunk_size rows
  remain, so rows appended during splitting are chunked too instead of swelling the last chunk.

Chunks are half-open and contiguous: ``(-inf, b1)`` (with the NULL keys), ``[b1, b2)``, ...,
``[bn, +inf)``. :meth:`ChunkSplitter.next_chunks` computes only the chunks asked for, and the
whole progress is a small JSON value (:class:`SplitterState`): a splitter rebuilt from it
continues with exactly the boundaries the first one would have produced.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import ROUND_FLOOR, Decimal, localcontext
from typing import Any, Literal, Protocol

from cdc.model.config import DEFAULT_CHUNK_SIZE
from cdc.model.errors import ConfigError, NoChunkKey
from cdc.model.schema import Column, TableSchema
from chunking.chunks import KeyValue, SnapshotSplit, decode_value, encode_value

log = logging.getLogger(__name__)

_OPTION = "source.chunk_key_columns"

Mode = Literal["even", "uneven"]
MODES: tuple[Mode, ...] = ("even", "uneven")
_PRECISION = 100  # DECIMAL(65, 30) arithmetic stays exact
_LOG_EVERY_CHUNKS = 100
_LOG_EVERY_SECONDS = 30.0


class SplitQueries(Protocol):
    """The queries that split one table, answered by the dialect (driver side).

    Values are the chunk key's values as the database driver returns them; comparisons are the
    server's (collations apply).
    """

    def key_range(self) -> tuple[KeyValue, KeyValue]:
        """``MIN`` and ``MAX`` of the chunk key (None, None for an empty table)."""
        ...

    def approximate_rows(self) -> int:
        """The catalog's row estimate (0 when unknown)."""
        ...

    def chunk_end(self, lower: KeyValue, size: int) -> tuple[KeyValue, int, bool]:
        """The largest of the first ``size`` keys at or above ``lower``, how many keys that
        was (at most ``size``), and whether that largest key is above ``lower``."""
        ...

    def next_key_above(self, lower: KeyValue) -> KeyValue:
        """The smallest key above ``lower`` (None when there is none)."""
        ...

    def key_is_indexed(self) -> bool:
        """True when an index starts with the chunk key (else every boundary query scans)."""
        ...


def select_chunk_key(schema: TableSchema, configured: str | None,
                     chunkable: Callable[[Column], bool]) -> Column:
    """The column to split a table on: the configured one, else the first primary-key column.

    Args:
        schema: the table.
        configured: the ``source.chunk_key_columns`` entry for this table, if any.
        chunkable: the dialect's test of whether a column's type can be range-split.

    Raises:
        ConfigError: the configured column does not exist or has a type that cannot be chunked.
        NoChunkKey: no column is configured and the table has no (usable) primary key.
    """
    table = str(schema.table_id)
    if configured is not None:
        try:
            column = schema.column(configured)
        except KeyError:
            raise ConfigError(
                f"{_OPTION}[{table!r}]: table {table} has no column {configured!r} "
                f"(columns: {', '.join(schema.column_names)})",
                table=table, column=configured,
            ) from None
        if not chunkable(column):
            raise ConfigError(
                f"{_OPTION}[{table!r}]: column {column.name!r} has type {column.data_type}, which "
                "cannot be chunked; choose an integer, decimal, string, binary or temporal column",
                table=table, column=column.name,
            )
        return column
    if not schema.primary_key:
        raise NoChunkKey(
            f"table {table} has no primary key, so it cannot be split into chunks; set "
            f'{_OPTION}: {{"{table}": "<column>"}} to an (ideally indexed) column',
            table=table,
        )
    column = schema.column(schema.primary_key[0])
    if not chunkable(column):
        raise NoChunkKey(
            f"table {table}: primary-key column {column.name!r} has type {column.data_type}, "
            f'which cannot be chunked; set {_OPTION}: {{"{table}": "<column>"}} to another column',
            table=table, column=column.name,
        )
    return column


@dataclass(frozen=True)
class SplitterOptions:
    """How to split tables (Flink CDC's ``scan.incremental.snapshot.chunk.*`` options).

    Attributes:
        chunk_size: target rows per chunk (``source.chunk_size``: :data:`DEFAULT_CHUNK_SIZE`; Flink
            CDC's default is 8096).
        distribution_factor_lower: below this factor keys are too dense for even splitting
            (Flink's ``chunk-key.even-distribution.factor.lower-bound``).
        distribution_factor_upper: above it keys are too sparse
            (``chunk-key.even-distribution.factor.upper-bound``).

    Raises:
        ConfigError: a value is out of range (the message names the option).
    """

    chunk_size: int = DEFAULT_CHUNK_SIZE
    distribution_factor_lower: float = 0.05
    distribution_factor_upper: float = 1000.0

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ConfigError(
                f"source.chunk_size must be a positive integer, got {self.chunk_size!r}",
                option="source.chunk_size",
            )
        lower, upper = self.distribution_factor_lower, self.distribution_factor_upper
        if not lower >= 0:
            raise ConfigError(
                f"source.distribution_factor_lower must be at least 0, got {lower!r}",
                option="source.distribution_factor_lower",
            )
        if not upper >= lower:
            raise ConfigError(
                f"source.distribution_factor_upper ({upper!r}) must not be below "
                f"source.distribution_factor_lower ({lower!r})",
                option="source.distribution_factor_upper",
            )


@dataclass(frozen=True)
class SplitterState:
    """Where splitting of one table stands; JSON-serializable through :meth:`to_dict`.

    Attributes:
        table: ``db.table``.
        key_column: the chunk key column.
        mode: ``even`` or ``uneven``.
        min_value: the key's MIN at probe time (None: no non-NULL key).
        max_value: the key's MAX at probe time.
        row_count: the approximate row count at probe time.
        step: the even-splitting chunk width (None when uneven).
        next_start: the start of the next chunk (None before the first chunk).
        next_id: the split_id of the next chunk.
        finished: True once the last chunk ``[bn, +inf)`` was produced.
    """

    table: str
    key_column: str
    mode: Mode
    min_value: KeyValue
    max_value: KeyValue
    row_count: int
    step: KeyValue = None
    next_start: KeyValue = None
    next_id: int = 0
    finished: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "key_column": self.key_column, "mode": self.mode,
            "min": encode_value(self.min_value), "max": encode_value(self.max_value),
            "row_count": self.row_count, "step": encode_value(self.step),
            "next_start": encode_value(self.next_start), "next_id": self.next_id,
            "finished": self.finished,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitterState:
        """Rebuild a state from :meth:`to_dict` output.

        Raises:
            ValueError: a field is missing or malformed.
        """
        try:
            mode = d["mode"]
            if mode not in MODES:
                raise ValueError(f"splitter state has unknown mode {mode!r}")
            return cls(
                table=str(d["table"]), key_column=str(d["key_column"]), mode=mode,
                min_value=decode_value(d["min"]), max_value=decode_value(d["max"]),
                row_count=int(d["row_count"]), step=decode_value(d["step"]),
                next_start=decode_value(d["next_start"]), next_id=int(d["next_id"]),
                finished=bool(d["finished"]),
            )
        except KeyError as exc:
            raise ValueError(f"splitter state lacks field {exc.args[0]!r}") from None


def distribution_factor(min_value: Any, max_value: Any, row_count: int) -> Decimal | None:
    """``(max - min + 1) / row_count``, or None when it is undefined (no rows, no keys)."""
    if min_value is None or max_value is None or row_count <= 0:
        return None
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        return (Decimal(max_value) - Decimal(min_value) + 1) / Decimal(row_count)


def choose_mode(
    column: Column, min_value: Any, max_value: Any, row_count: int, options: SplitterOptions
) -> tuple[Mode, KeyValue]:
    """Even splitting (and its step) for well-distributed numeric keys, else uneven.

    A zero or absurd row count gives an undefined or out-of-bounds factor: uneven splitting,
    which does not trust the estimate.
    """
    if not column.is_numeric:
        return "uneven", None
    factor = distribution_factor(min_value, max_value, row_count)
    if factor is None:
        return "uneven", None
    lower = Decimal(str(options.distribution_factor_lower))
    upper = Decimal(str(options.distribution_factor_upper))
    if not lower <= factor <= upper:
        return "uneven", None
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        width = factor * options.chunk_size
        if column.is_integer:
            return "even", max(int(width), 1)
        unit = Decimal(1).scaleb(-(column.scale or 0))
        return "even", max(width.quantize(unit, rounding=ROUND_FLOOR), unit)


class ChunkSplitter:
    """Splits one table into :class:`SnapshotSplit` chunks, a few at a time (driver side).

    Args:
        queries: the dialect's split queries for this table and column (they run on a driver
            connection the caller owns).
        schema: the table.
        column: the chunk key column (see :func:`select_chunk_key`).
        options: chunk size and factor bounds.
        state: a saved :attr:`state` to continue from; None probes the table and starts over.

    Raises:
        ConfigError: the chunk key differs from the saved state's.
    """

    def __init__(
        self, queries: SplitQueries, schema: TableSchema, column: Column, options: SplitterOptions,
        state: SplitterState | None = None,
    ) -> None:
        self._queries = queries
        self.schema = schema
        self.options = options
        self.column = column
        self._started = self._last_log = time.monotonic()
        self._state = self._probe() if state is None else self._check_state(state)

    @property
    def state(self) -> SplitterState:
        """The progress so far (immutable; save it to continue later)."""
        return self._state

    @property
    def finished(self) -> bool:
        """True when the last chunk has been produced."""
        return self._state.finished

    def next_chunks(self, n: int) -> list[SnapshotSplit]:
        """Compute and return the next (up to) ``n`` chunks; fewer only at the table's end."""
        chunks: list[SnapshotSplit] = []
        while len(chunks) < n and not self._state.finished:
            even = self._state.mode == "even"
            chunks.append(self._emit(self._next_even_end() if even else self._next_uneven_end()))
            self._log_progress()
        return chunks

    def estimated_total_chunks(self) -> int:
        """The number of chunks: exact for even splitting, ~row_count/chunk_size for uneven."""
        st = self._state
        if st.finished:
            return st.next_id
        if st.mode == "even":
            with localcontext() as ctx:
                ctx.prec = _PRECISION
                inner = (Decimal(st.max_value) - Decimal(st.min_value)) // Decimal(st.step)
            return int(inner) + 1
        guess = math.ceil(st.row_count / self.options.chunk_size)
        return max(st.next_id + 1, guess)

    # -- probing -------------------------------------------------------------------------

    def _probe(self) -> SplitterState:
        tid = self.schema.table_id
        min_value, max_value = self._queries.key_range()
        row_count = self._queries.approximate_rows()
        mode, step = choose_mode(self.column, min_value, max_value, row_count, self.options)
        if mode == "uneven" and not self._queries.key_is_indexed():
            log.warning(
                "%s: chunk key %s is not the first column of any index, so every chunk boundary "
                "query scans the table; index it or choose an indexed column in "
                "source.chunk_key_columns", tid, self.column.name,
            )
        log.info(
            "%s: splitting on %s (%s%s), min %r, max %r, ~%d rows", tid, self.column.name, mode,
            f", step {step}" if step is not None else "", min_value, max_value, row_count,
        )
        return SplitterState(
            table=str(tid), key_column=self.column.name, mode=mode, min_value=min_value,
            max_value=max_value, row_count=row_count, step=step,
        )

    def _check_state(self, state: SplitterState) -> SplitterState:
        table = str(self.schema.table_id)
        if state.table != table:
            raise ValueError(f"splitter state of {state.table} given for table {table}")
        if state.key_column.lower() != self.column.name.lower():
            raise ConfigError(
                f"source.chunk_key_columns[{table!r}]: the snapshot of {table} was started with "
                f"chunk key {state.key_column!r}, now {self.column.name!r}; restore the previous "
                "setting or restart the snapshot of this table",
                table=table, column=self.column.name,
            )
        if state.mode == "even" and state.step is None:
            raise ValueError(f"splitter state of {table}: even mode without a step")
        return state

    # -- one chunk at a time -------------------------------------------------------------

    def _emit(self, end: KeyValue) -> SnapshotSplit:
        st = self._state
        split = SnapshotSplit(self.schema.table_id, st.next_id, st.key_column, st.next_start, end)
        self._state = replace(st, next_start=end, next_id=st.next_id + 1, finished=end is None)
        return split

    def _next_even_end(self) -> KeyValue:
        st = self._state
        base = st.min_value if st.next_start is None else st.next_start
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            end = base + st.step
        return None if end > st.max_value else end

    def _next_uneven_end(self) -> KeyValue:
        st = self._state
        if st.min_value is None:
            return None  # empty table or only NULL keys: one chunk
        lower = st.min_value if st.next_start is None else st.next_start
        end, count, moved = self._queries.chunk_end(lower, self.options.chunk_size)
        if count < self.options.chunk_size:
            return None  # what remains fits in one chunk: the last
        return end if moved else self._queries.next_key_above(lower)

    def _log_progress(self) -> None:
        st, now = self._state, time.monotonic()
        if st.finished:
            log.info("%s: split into %d chunks (%s) in %.1fs", st.table, st.next_id, st.mode,
                     now - self._started)
        elif st.next_id % _LOG_EVERY_CHUNKS == 0 or now - self._last_log >= _LOG_EVERY_SECONDS:
            log.info("%s: %d chunks so far (~%d in all)", st.table, st.next_id,
                     self.estimated_total_chunks())
        else:
            return
        self._last_log = now
