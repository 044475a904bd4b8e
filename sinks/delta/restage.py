"""A batch's staged files in the sink schema it commits under (``schema_change.behavior: evolve``).

The executors write each run of rows with the sink schema of the version they were written under
(:class:`~sinks.delta.files.StagedFile`), and one batch may hold runs on both sides of a DDL. The
driver commits the batch under its newest sink schema (``DeltaSink._evolve``). Under ``lenient``
an older file fits that schema as it is (columns only grow: a reader sees the new ones as null).
Under ``evolve`` it may not: a column dropped since is in the file, a renamed column is under its
old name. So such a file is rewritten into the batch's sink schema before the commit
(:func:`restage`), on the driver, with the same column matching as the tables' own evolution
(:func:`sinks.delta.evolve.column_sources`): the files of the batch that holds the DDL, nothing
else. A replay rewrites them again into new files; only one set is ever committed (the app
transaction), the other stays an orphan for ``VACUUM``, as for any replayed file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cdc.model.schema import TableSchema, schema_to_dict
from sinks.base import SchemaStep, TableBatch
from sinks.changes import changelog_schema, mirror_schema
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.evolve import column_sources, data_names, has_lineage, remap
from sinks.delta.files import StagedFile, table_storage, write_table_file

log = logging.getLogger(__name__)


def restage(config: DeltaSinkConfig, batch: TableBatch, schema: TableSchema) -> TableBatch:
    """``batch`` with every staged file that does not fit ``schema`` (its sink schema under
    ``evolve``: a column dropped or renamed since the file's version) rewritten into it; the
    batch itself when ``schema`` is not an ``evolve`` schema or every file fits. Driver side."""
    if not has_lineage(schema):
        return batch
    snapshot = [_fit(config, item, schema) for item in batch.snapshot]
    changes = [item if SchemaStep.is_step(item) else _fit(config, item, schema) for item in batch.changes]
    return replace(batch, snapshot=snapshot, changes=changes)


def _fit(config: DeltaSinkConfig, item: dict[str, Any], schema: TableSchema) -> dict[str, Any]:
    staged = StagedFile.from_dict(item)
    have = staged.table_schema()
    if have == schema or (have is None and all(c.origin == f"{c.name}@0" for c in schema.columns)):
        return item  # the file's columns are the batch's (types at most narrower, as under lenient)
    fs, path = _file(config, staged, schema)
    names = have.column_names if have is not None else data_names(pq.read_schema(path, filesystem=fs))
    sources = column_sources(have, names, schema)
    if all(s == n for n, s in sources.items() if s is not None) and set(names) <= set(sources):
        return item  # only added columns or widened types since: it fits as it is
    storage = mirror_schema(schema) if staged.kind == "mirror" else changelog_schema(schema)
    rows = remap(pq.read_table(path, filesystem=fs), storage, sources)
    out = write_table_file(config, schema, staged.kind, rows)
    log.info("%s: staged %s file of schema version %d rewritten into the batch's sink schema (%s)",
             schema.table_id, staged.kind, staged.version, ", ".join(
                 [f"{s} -> {n}" for n, s in sources.items() if s is not None and s != n]
                 + [f"{d} dropped" for d in sorted(set(names) - set(filter(None, sources.values())))]))
    return replace(out, stream=staged.stream, version=staged.version, schema=schema_to_dict(schema)).to_dict()


def _file(config: DeltaSinkConfig, staged: StagedFile, schema: TableSchema) -> tuple[pafs.FileSystem, str]:
    fs, root = table_storage(config.uri(schema.table_id, staged.kind), config.storage_options)
    return fs, os.path.join(root, staged.path)
