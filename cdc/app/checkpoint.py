"""Read Spark's checkpoint of a job without Spark: which batches it planned and committed.

Spark writes ``<checkpoint>/offsets/N`` (a version line, a metadata line, then one line per
source: ours is :class:`~cdc.spark.offsets.SourceOffset` as JSON) before batch N runs, and
``<checkpoint>/commits/N`` once the sink returned. Runs on the driver or in ``python -m cdc
status``; reads only, for local paths and any URI pyarrow understands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from cdc.model.positions import Offset
from cdc.model.storage import filesystem
from cdc.spark.offsets import SourceOffset


@dataclass(frozen=True)
class CheckpointFiles:
    """A checkpoint directory, read-only.

    Args:
        root: the job's ``checkpoint`` (a local path or a URI).
    """

    root: str

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return filesystem(self.root)

    def batches(self, kind: str) -> list[int]:
        """The batch ids of ``offsets`` (planned) or ``commits`` (committed), ascending."""
        fs, base = self._fs()
        selector = pafs.FileSelector(f"{base}/{kind}", allow_not_found=True)
        return sorted(int(i.base_name) for i in fs.get_file_info(selector)
                      if i.type == pafs.FileType.File and i.base_name.isdigit())

    def last(self, kind: str) -> int | None:
        """The newest batch id of ``offsets`` or ``commits``; None when there is none."""
        ids = self.batches(kind)
        return ids[-1] if ids else None

    def offset(self, batch_id: int) -> dict[str, Any]:
        """The source offset Spark recorded for a batch (our SourceOffset's JSON)."""
        fs, base = self._fs()
        with fs.open_input_stream(f"{base}/offsets/{batch_id}") as f:
            lines = f.read().decode().splitlines()
        return dict(json.loads(lines[2]))

    def committed_offset(self, position: Callable[[dict[str, Any]], Offset]) -> SourceOffset | None:
        """The source offset of the newest batch Spark committed (``position`` parses the
        dialect's position); None before the first commit."""
        last = self.last("commits")
        return None if last is None else SourceOffset.from_dict(self.offset(last), position)

    def committed_ms(self, batch_id: int) -> int | None:
        """When Spark wrote ``commits/N`` (the file's time), in epoch milliseconds."""
        fs, base = self._fs()
        info = fs.get_file_info(f"{base}/commits/{batch_id}")
        return None if info.mtime_ns is None else info.mtime_ns // 1_000_000
