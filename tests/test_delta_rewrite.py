"""The full-rewrite MERGE: taken only when every file holds a changed key, and equal to a MERGE
(real Delta tables, no server)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from change_batches import (
    COMPOSITE_KEY,
    SINGLE_KEY,
    apply,
    batch,
    event,
    frozen_rows,
    model_rows,
    row,
    write_batch,
)

import sinks.delta.engines
import sinks.delta.rewrite
from cdc.model.schema import TableSchema
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.files import commit_snapshot_files, write_snapshot_files


@pytest.fixture
def rewrites(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records whether each mirror write took the rewrite (True) or declined to MERGE (False)."""
    seen: list[bool] = []
    real = sinks.delta.engines.rewrite_all

    def spy(*args: Any, **kwargs: Any) -> bool:
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(sinks.delta.engines, "rewrite_all", spy)
    return seen


def snapshot(sink: DeltaTables, schema: TableSchema, keys: list[tuple[Any, ...]], files: int,
             model: dict[Any, Any]) -> None:
    """Keys spread over ``files`` snapshot files (each a key range), committed as batch 0."""
    events = [event("r", None, row(schema, k, c_int=i), i) for i, k in enumerate(keys)]
    size = -(-len(events) // files)
    staged = [f for i in range(0, len(events), size)
              for f in write_snapshot_files(sink.config, schema, batch(schema, events[i:i + size]))]
    commit_snapshot_files(sink.config, schema, staged, sink.query_id, 0)
    apply(model, schema, events)


def mirror(sink: DeltaTables, schema: TableSchema) -> Any:
    uri = sink.config.uri(schema.table_id, "mirror")
    return frozen_rows(deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist())


@pytest.mark.parametrize("schema", [SINGLE_KEY, COMPOSITE_KEY], ids=["single-key", "composite-key"])
def test_rewrite_when_every_file_is_touched_else_merge(schema: TableSchema, tmp_path: Path,
                                                       rewrites: list[bool]) -> None:
    sink = DeltaTables(DeltaSinkConfig(path=str(tmp_path), engine="delta-rs"), query_id="q")
    keys = [(i,) if schema is SINGLE_KEY else (i, f"k{i}") for i in range(300)]
    model: dict[Any, Any] = {}
    snapshot(sink, schema, keys, files=3, model=model)
    old = {k: row(schema, k, c_int=i) for i, k in enumerate(keys)}
    new_key = (1000,) if schema is SINGLE_KEY else (1000, "x")
    spread = [event("u", old[keys[i]], row(schema, keys[i], c_str="new"), 1000 + i) for i in (5, 150, 290)]
    spread += [event("d", old[keys[7]], None, 1010), event("c", None, row(schema, new_key), 1011)]
    write_batch(sink, schema, batch(schema, spread), 1)
    apply(model, schema, spread)
    assert rewrites == [True] and mirror(sink, schema) == model_rows(model)
    local = [event("u", old[keys[20]], row(schema, keys[20], c_str="only the first file"), 2000)]
    write_batch(sink, schema, batch(schema, local), 2)
    apply(model, schema, local)
    assert rewrites == [True, False] and mirror(sink, schema) == model_rows(model)
    history = deltalake.DeltaTable(sink.config.uri(schema.table_id, "mirror")).history()
    assert [h["operation"] for h in history[:2]] == ["MERGE", "MERGE"]  # the rewrite, then delta-rs's MERGE
    assert deltalake.DeltaTable(sink.config.uri(schema.table_id, "mirror")).transaction_version(sink.app_id) == 2


def test_new_rows_are_written_in_key_order_in_bounded_files(tmp_path: Path, rewrites: list[bool],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sinks.delta.rewrite, "UPSERT_FILE_ROWS", 2)
    schema = SINGLE_KEY
    sink = DeltaTables(DeltaSinkConfig(path=str(tmp_path), engine="delta-rs"), query_id="q")
    keys = [(i,) for i in range(0, 300, 3)]
    model: dict[Any, Any] = {}
    snapshot(sink, schema, keys, files=2, model=model)
    changed = [keys[i] for i in (90, 3, 60, 1, 98)] + [(1,), (151,)]  # out of key order, two new keys
    changes = [event("u", row(schema, k, c_int=keys.index(k)), row(schema, k, c_str="new"), 100 + n)
               if k in keys else event("c", None, row(schema, k, c_str="new"), 100 + n) for n, k in enumerate(changed)]
    write_batch(sink, schema, batch(schema, changes), 1)
    apply(model, schema, changes)
    assert rewrites == [True] and mirror(sink, schema) == model_rows(model)
    files = pa.table(deltalake.DeltaTable(sink.config.uri(schema.table_id, "mirror")).get_add_actions(flatten=True))
    files = files.to_pydict()
    key = schema.primary_key[0]
    new = sorted((lo, hi, n) for lo, hi, n in zip(files[f"min.{key}"], files[f"max.{key}"], files["num_records"],
                                                  strict=True) if n <= 2)
    assert sum(n for _, _, n in new) == len(changed) and len(new) == 4, new
    assert all(a[1] < b[0] for a, b in itertools.pairwise(new)), f"new files overlap in keys: {new}"
