"""Driver side of every stream-store sink: a batch's messages in commit order, the DDLs it is the
first to carry, and the staging folder's upkeep."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from itertools import chain

from cdc.model.history import SchemaChange
from cdc.model.storage import filesystem
from sinks.base import TableBatch, staged_files
from sinks.stream.messages import Message, read_staged, with_headers


def batch_messages(staging: str, batch: TableBatch, schemas_enable: bool) -> Iterator[Message]:
    """One table's messages of a batch, in the order they are published: the snapshot rows, then
    the log's changes in log order, with Debezium's primary-key-update headers."""
    snapshot = read_staged(staging, staged_files(batch.snapshot))
    changes = with_headers(read_staged(staging, staged_files(batch.changes)), schemas_enable)
    return chain(snapshot, changes)


def new_schema_changes(tables: Iterable[TableBatch], published: dict[str, int]) -> list[SchemaChange]:
    """The DDLs a batch is the first to carry (a DDL handed over where it lies, or rows written
    under it), in version order per table: those above the newest version ``published`` per
    table. Each comes as the batch's first set that carries it says: the DDL's own
    (:class:`~sinks.base.SchemaStep`, the statement's time and server), else the earliest change
    set's, else a snapshot set's; the same on a replay."""
    out: dict[tuple[str, int], SchemaChange] = {}
    for b in tables:
        table = str(b.schema.table_id)
        for staged in chain(b.changes, b.snapshot):  # changes in log order: a DDL before its rows
            if "schema_change" in staged:
                change = SchemaChange.from_dict(staged["schema_change"])
                if change.version > published.get(table, 0):
                    out.setdefault((table, change.version), change)
    return [out[k] for k in sorted(out)]


def clear_staging(staging: str) -> None:
    """Empty the job's staging folder (files of a crashed run: their batch is staged again)."""
    fs, root = filesystem(staging)
    fs.create_dir(root, recursive=True)
    fs.delete_dir_contents(root, missing_dir_ok=True)


def remove_staged(staging: str, tables: Iterable[TableBatch]) -> None:
    """Delete a committed (or skipped) batch's staged files."""
    fs, root = filesystem(staging)
    for f in staged_files([*chain.from_iterable(chain(b.snapshot, b.changes) for b in tables)]):
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(f"{root}/{f['file']}")
