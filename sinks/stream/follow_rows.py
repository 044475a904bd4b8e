"""The rows a stream store's follower source hands Spark (Pulsar, Pravega): per message its topic,
its offset in what the source read, and its value (null: a tombstone), in Arrow batches."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

SCHEMA = "topic string, offset long, value binary"
ARROW_SCHEMA = pa.schema([("topic", pa.string()), ("offset", pa.int64()), ("value", pa.binary())])
ROWS_PER_BATCH = 10_000  # messages per Arrow batch


def rows_batch(topic: str, first: int, values: Sequence[bytes | None]) -> pa.RecordBatch:
    """``values`` of ``topic`` as one batch, their offsets counting from ``first``."""
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([topic] * n, pa.string()), pa.array(range(first, first + n), pa.int64()),
         pa.array(values, pa.binary())], schema=ARROW_SCHEMA)
