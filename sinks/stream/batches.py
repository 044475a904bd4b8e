"""Driver side of every stream-store sink: a batch's messages in commit order, the DDLs it is the
first to carry, and the staging folder's upkeep."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from itertools import chain

from cdc.model.debezium.headers import Headers, context_headers
from cdc.model.history import SchemaChange
from cdc.model.storage import filesystem
from sinks.base import TableBatch, staged_files
from sinks.stream.messages import Message, read_staged, with_headers


def batch_messages(staging: str, batch: TableBatch, schemas_enable: bool,
                   context: Headers = ()) -> Iterator[Message]:
    """One table's messages of a batch, in the order they are published: the snapshot rows, then
    the log's changes in log order, with Debezium's primary-key-update headers, then ``context``
    (:func:`batch_context`) on every message."""
    snapshot = read_staged(staging, staged_files(batch.snapshot))
    changes = with_headers(read_staged(staging, staged_files(batch.changes)), schemas_enable)
    if not context:
        return chain(snapshot, changes)
    return (m._replace(headers=m.headers + context) for m in chain(snapshot, changes))


def batch_context(batch: TableBatch, run_id: str) -> Headers:
    """Debezium 3's context headers of a table's messages (:mod:`cdc.model.debezium.headers`): the
    source's name and connector, as the writer recorded them with each staged file."""
    files = staged_files(batch.snapshot + batch.changes)
    if not files or "context" not in files[0]:
        return ()
    name, connector = files[0]["context"]
    return context_headers(name, connector, run_id)


def change_context(change: SchemaChange, run_id: str) -> Headers:
    """Debezium 3's context headers of a schema change event (its source's name and connector)."""
    return context_headers(str(change.source.get("name", "")), str(change.source.get("connector", "mysql")), run_id)


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
