"""Is the job's storage the same for the driver and every executor?

Executors write staged chunks to the state directory and Parquet files next to the Delta tables;
the driver plans from those files and commits them. On a cluster, a local path such as
``/tmp/cdc`` names a different folder on every node, and the job would fail much later, batch
by batch, or (worse) read its own stale files. :func:`check_visible` finds it at start: the
driver writes a probe file, and one task per executor slot looks for it.

Runs on the driver (the probe tasks on executors). A local master shares the driver's file
system, so the check is skipped there.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

from cdc.model.errors import ConfigError
from cdc.spark.state import StateStore


def _seen_by_task(root: str, rel: str) -> tuple[str, bool]:
    """Executor: (this host, whether the probe file is there)."""
    return socket.gethostname(), StateStore(root).exists(rel)


def check_visible(spark: Any, paths: dict[str, str]) -> None:
    """Check that every executor sees the folders in ``paths`` (``{"state_dir": "/x", ...}``).

    Raises:
        ConfigError: a folder the executors do not see; the message names the key, the path and
            the fix.
    """
    master = str(spark.sparkContext.master)
    if master.startswith("local"):
        return
    slots = max(2, int(spark.sparkContext.defaultParallelism))
    for key, root in paths.items():
        store, rel = StateStore(root), f".probe-{uuid.uuid4().hex}"
        store.write_bytes(rel, b"spark-cdc probe: the driver wrote this; executors must see it\n")
        try:
            seen = spark.sparkContext.parallelize(range(slots), slots) \
                .map(lambda _, r=root, f=rel: _seen_by_task(r, f)).collect()
        finally:
            store.delete(rel)
        blind = sorted({host for host, ok in seen if not ok})
        if blind:
            raise ConfigError(
                f"{key} {root} is not visible from the executors on {', '.join(blind)}: the driver's files "
                "there are missing on those nodes. Put checkpoint, state_dir and sink.path on storage every "
                "node sees (HDFS, S3, ABFS, or a shared file system), not on a local disk",
                key=key, path=root)
