"""Change rows (:mod:`cdc.model.envelope` layout) of one table from column-wise pgoutput
(:mod:`pgoutput_columnar`), without a Python object per row (executor).

The column-wise counterpart of ``envelope(schema, split_key_changes(raws, schema), name)`` in
:mod:`reader`, with the same rules: an unchanged TOASTed value (``u``) is taken from the old row
(replica identity FULL), else from the table by primary key (``lookup``, one query per such
row); an update without an old tuple (replica identity DEFAULT, key unchanged) gets a key-only
``before`` from its new row; an update that changes the primary key (its texts differ) becomes a
delete and a create at its position.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlog.postgres.pgoutput_columnar import (
    DELETE,
    INSERT,
    TEXT,
    UNCHANGED,
    MessageBlock,
    Refs,
    Scan,
    texts,
    tuples,
)
from binlog.postgres.types import CONNECTOR, sql_table, to_arrow
from cdc import __version__
from cdc.model.envelope import envelope_schema, row_type, source_type
from cdc.model.errors import SchemaChanged
from cdc.model.schema import TableSchema

# The current texts of some columns of one row, by its primary key texts (None: row gone).
Lookup = Callable[[TableSchema, list[str], list[int]], "list[str | None] | None"]


@functools.cache
def _ops() -> pa.Array:
    """The op texts by code, built on first use (see binlog.mysql.change_rows._op_text)."""
    return pa.array(["c", "u", "d"], pa.string())


_CODE = np.zeros(256, np.int8)
_CODE[INSERT], _CODE[ord("U")], _CODE[DELETE] = 0, 1, 2


def column_order(columns: tuple[str, ...], schema: TableSchema) -> list[int]:
    """For each of the job's columns, its index in a Relation message's columns.

    Raises:
        SchemaChanged: the relation's columns are not the job's.
    """
    if list(columns) == schema.column_names:
        return list(range(len(columns)))
    if set(columns) != set(schema.column_names):
        raise SchemaChanged(f"table {schema.table_id}: a change in the log has columns {list(columns)}, but it "
                            f"is read with {schema.column_names}: the table changed while its snapshot was in "
                            "flight, which spark-cdc does not follow (DDL after a table's snapshot is followed). "
                            "Take a new snapshot (a new checkpoint, state directory and sink path)",
                            table=str(schema.table_id))
    return [columns.index(c) for c in schema.column_names]


class _Images:
    """One table's changes as column references: op codes, old and new per job column."""

    def __init__(self, block: MessageBlock, scan: Scan, at: np.ndarray, schema: TableSchema) -> None:
        n, width = len(at), len(schema.columns)
        self.op = np.zeros(n, np.int8)
        self.old = [Refs.nulls(n) for _ in range(width)]
        self.new = [Refs.nulls(n) for _ in range(width)]
        self.has_old, self.has_new = np.zeros(n, bool), np.zeros(n, bool)
        messages, versions = scan.messages[at], scan.version[at]
        for v in np.unique(versions).tolist():
            rows = np.flatnonzero(versions == v)
            rel = scan.relations[v]
            decoded = tuples(block, messages[rows], len(rel.columns))
            self.op[rows] = _CODE[decoded.op]
            self.has_old[rows], self.has_new[rows] = decoded.has_old, decoded.has_new
            for c, i in enumerate(column_order(rel.columns, schema)):
                self.old[c].put(rows, decoded.old[i])
                self.new[c].put(rows, decoded.new[i])

    def fill_from_old(self) -> None:
        """Unchanged TOASTed new values from the old tuple, where it holds them."""
        every = np.arange(len(self.op))
        for old, new in zip(self.old, self.new, strict=True):
            new.put(every, old, (new.kind == UNCHANGED) & self.has_old & (old.kind == TEXT))

    def key_only_before(self, keys: list[int]) -> None:
        """Updates without an old tuple (replica identity DEFAULT): the key columns of the new row."""
        if not keys:
            return
        synth = (self.op == 1) & ~self.has_old & self.has_new
        every = np.arange(len(self.op))
        for c in keys:
            self.old[c].put(every, self.new[c], synth)
        self.has_old |= synth


def _unchanged(images: _Images, after: list[pa.Array], schema: TableSchema,
               keys: list[int], lookup: Lookup) -> None:
    """The unchanged TOASTed values left (no old tuple): the table's current ones, by primary key."""
    missing = np.column_stack([r.kind == UNCHANGED for r in images.new])
    rows = np.flatnonzero(missing.any(axis=1))
    if not len(rows):
        return
    if not keys:
        raise SchemaChanged(f"table {schema.table_id}: an unchanged TOASTed value arrived without the old "
                            "row and the table has no primary key. Run: ALTER TABLE "
                            f"{sql_table(schema.table_id)} REPLICA IDENTITY FULL;", table=str(schema.table_id))
    found: dict[int, list[str | None]] = {c: [] for c in range(len(images.new))}
    for r in rows.tolist():
        key = [after[k][r].as_py() for k in keys]
        cols = np.flatnonzero(missing[r]).tolist()
        values = lookup(schema, key, cols)
        for j, c in enumerate(cols):
            found[c].append(values[j] if values is not None else None)
    for c, values in found.items():
        if values:
            after[c] = pc.replace_with_mask(after[c], pa.array(missing[:, c]), pa.array(values, pa.string()))


def _key_changed(before: list[pa.Array], after: list[pa.Array], keys: list[int]) -> np.ndarray:
    """Per row: some key text differs between the images (a null and a text differ)."""
    differs = np.zeros(len(before[0]) if before else 0, bool)
    for c in keys:
        b, a = before[c], after[c]
        ne = pc.fill_null(pc.not_equal(b, a), False)
        either = pc.xor(pc.is_null(b), pc.is_null(a))
        differs |= pc.or_(ne, either).to_numpy(zero_copy_only=False)
    return differs


def table_rows(block: MessageBlock, scan: Scan, at: np.ndarray, schema: TableSchema, name: str,
               lookup: Lookup, split: bool = True) -> pa.Table:
    """The change rows of the kept changes ``at`` (indexes into ``scan``, all of ``schema``'s
    table, in log order); ``split``: key-changing updates as a delete and a create."""
    images = _Images(block, scan, at, schema)
    keys = [schema.column_names.index(k) for k in schema.primary_key]
    images.fill_from_old()
    images.key_only_before(keys)
    before = [texts(block, r) for r in images.old]
    after = [texts(block, r) for r in images.new]
    _unchanged(images, after, schema, keys, lookup)
    n = len(at)
    split_rows = (images.op == 1) & images.has_old & images.has_new & _key_changed(before, after, keys) \
        if split and keys else np.zeros(n, bool)
    counts = 1 + split_rows
    idx = np.repeat(np.arange(n), counts)
    first = np.cumsum(counts) - counts
    is_delete, is_create = np.zeros(len(idx), bool), np.zeros(len(idx), bool)
    is_delete[first[split_rows]], is_create[first[split_rows] + 1] = True, True
    op = np.where(is_delete, 2, np.where(is_create, 0, images.op[idx]))
    image = row_type(schema)

    def struct(textss: list[pa.Array], present: np.ndarray) -> pa.Array:
        """One image per row; its columns are null where it is (an absent tuple's references are
        nulls, and a split row's copy that lacks the image is masked by the take)."""
        arrays = [to_arrow(t, col) for t, col in zip(textss, schema.columns, strict=True)]
        if split_rows.any():
            take = pa.array(idx, mask=~present)
            arrays = [a.take(take) for a in arrays]
        return pa.StructArray.from_arrays(arrays, fields=list(image), mask=pa.array(~present))

    ts = scan.ts_ms[at][idx]
    return pa.Table.from_arrays(
        [_ops().take(pa.array(op)), struct(before, images.has_old[idx] & ~is_create),
         struct(after, images.has_new[idx] & ~is_delete), _source(block, scan, at, idx, schema, name), pa.array(ts)],
        schema=envelope_schema(schema))


def _source(block: MessageBlock, scan: Scan, at: np.ndarray, idx: np.ndarray, schema: TableSchema,
            name: str) -> pa.Array:
    """The PostgreSQL connector's source block per row, column-wise."""
    n = len(idx)
    commit, lsn = scan.commit_lsn[at][idx], block.lsns[scan.messages[at]][idx]
    table = schema.table_id
    values = {
        "version": pa.repeat(__version__, n), "connector": pa.repeat(CONNECTOR, n), "name": pa.repeat(name, n),
        "ts_ms": pa.array(scan.ts_ms[at][idx]), "snapshot": pa.repeat("false", n), "db": pa.repeat(table.db, n),
        "table": pa.repeat(table.table, n), "schema": pa.repeat(table.db, n),
        "sequence": pc.binary_join_element_wise('["', pa.array(commit).cast(pa.string()), '","',
                                                pa.array(lsn).cast(pa.string()), '"]', ""),
        "txId": pa.array(scan.xid[at][idx]), "lsn": pa.array(lsn), "xmin": pa.nulls(n, pa.int64()),
        "commit_lsn": pa.array(commit), "row": pa.array(scan.row[at][idx].astype(np.int32)),
    }
    fields = list(source_type(CONNECTOR))
    return pa.StructArray.from_arrays([values[f.name].cast(f.type) for f in fields], fields=fields)
