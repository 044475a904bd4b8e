"""Snapshot file hand-off: emit tasks write snapshot rows straight into the sink's files.

The snapshot's ``r`` rows are most of what a CDC job ever moves. Sent through Spark as rows,
every row crosses the Python/JVM boundary, is converted to Spark's row format and back, and
bounds the snapshot at a fraction of what the database can serve. With a hand-off, the task that
emits a chunk (cdc/tasks.py) calls the sink's file writer itself and the stream carries one small
*manifest* row per written file set instead of the rows: ``op='r'``, ``before``/``after`` null,
``source`` naming the table and the chunks' high watermark, and the column
:data:`MANIFEST_COLUMN` holding the writer's JSON description of the files. The sink's
``foreachBatch`` commits the described files (``sinks/delta_files.py``); nothing else changes:
the rows are still a function of the offsets and the state files, a replayed batch writes new
files, and the sink's per-batch idempotence decides whether they are committed.

The writer is named, not imported, so that the core imports no sink: the source option
``snapshot_writer`` is JSON ``{"writer": "module:function", "config": {...}}`` and the optional
``snapshot_writer_secret`` holds JSON merged into ``config`` (object-store credentials; Spark
redacts option values whose key contains ``secret``). The function runs on executors as
``function(config: dict, schema: TableSchema, changes: pa.Table, stream: str) -> list[dict]``:
``changes`` are one table's rows in the ``cdc.model.envelope`` layout, ``op='r'`` rows of emitted
chunks (``stream='snapshot'``) or, in binlog order, the change rows of the batch's binlog slice
(``stream='changes'``: they skip Spark's row conversion the same way); it returns JSON-able file
descriptions.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cdc.model.errors import ConfigError
from cdc.model.schema import TableSchema

MANIFEST_COLUMN = "snapshot_files"
WRITER_OPTION = "snapshot_writer"
SECRET_OPTION = "snapshot_writer_secret"

FileWriter = Callable[[dict[str, Any], TableSchema, pa.Table, str], list[dict[str, Any]]]


@dataclass(frozen=True)
class SnapshotHandoff:
    """Which function writes snapshot files, and its configuration (picklable).

    Attributes:
        writer: ``module:function``, importable on executors.
        config: keyword configuration the function receives (kept out of ``repr``: it may hold
            credentials).
    """

    writer: str
    config: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> SnapshotHandoff | None:
        """The hand-off named by source options, or None when the options name none.

        Raises:
            ConfigError: the option is not JSON of the documented shape.
        """
        raw = options.get(WRITER_OPTION)
        if raw is None:
            return None
        try:
            spec = json.loads(raw)
            secret = json.loads(options.get(SECRET_OPTION) or "{}")
            writer, config = spec["writer"], dict(spec.get("config", {}))
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"option {WRITER_OPTION}: expected JSON "
                              '{"writer": "module:function", "config": {...}}') from None
        if not isinstance(writer, str) or ":" not in writer or not isinstance(secret, dict):
            raise ConfigError(f"option {WRITER_OPTION}: writer must be 'module:function' and "
                              f"{SECRET_OPTION} a JSON object")
        return cls(writer, {**config, **secret})

    def write(self, schema: TableSchema, changes: pa.Table, stream: str = "snapshot") -> list[dict[str, Any]]:
        """Executor: write one table's snapshot rows (``stream='snapshot'``) or binlog change
        rows (``'changes'``); returns the files' descriptions."""
        return _resolve(self.writer)(self.config, schema, changes, stream)


def options_for(writer: str, config: dict[str, Any], secret: dict[str, Any] | None = None) -> dict[str, str]:
    """The source options that name a hand-off (the inverse of :meth:`SnapshotHandoff.from_options`)."""
    out = {WRITER_OPTION: json.dumps({"writer": writer, "config": config})}
    if secret:
        out[SECRET_OPTION] = json.dumps(secret)
    return out


@functools.lru_cache(maxsize=8)
def _resolve(writer: str) -> FileWriter:
    module, _, name = writer.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"option {WRITER_OPTION}: cannot load {writer!r} on this worker ({exc}); "
                          "install the project where Spark's Python workers run") from None
    return fn
