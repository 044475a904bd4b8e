"""The marker of a committed batch on a stream-store sink's control topic (driver side).

Every stream-store sink records each batch it committed as one control message keyed by the job
id: JSON of the batch id, its message counts per topic and the schema versions published so far.
A restarted job reads the newest marker of its id (a compacted topic keeps one per job) to know
which batch its replay may skip and which schema change events are out already.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CommitMarker:
    """What the control topic records of a job's newest committed batch.

    Attributes:
        batch: its id (-1: none).
        schema_versions: per table, the newest schema version whose change event is published.
    """

    batch: int = -1
    schema_versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, key: bytes | str | None, value: bytes | None, job_id: str) -> CommitMarker:
        """The marker a control message holds for ``job_id`` (another job's, or an empty value:
        ``CommitMarker()``)."""
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        if key != job_id or not value:
            return cls()
        doc: dict[str, Any] = json.loads(value)
        return cls(int(doc["batch"]), {t: int(v) for t, v in doc.get("schema_versions", {}).items()})


def marker_value(job_id: str, batch_id: int, messages: dict[str, int],
                 schema_versions: dict[str, int] | None = None) -> bytes:
    """The control message's value for a batch (its key is the job id)."""
    return json.dumps({"job": job_id, "batch": batch_id, "messages": messages,
                       "schema_versions": schema_versions or {}}, sort_keys=True).encode()
