"""What Spark's checkpoint file manager costs a micro-batch, on a local checkpoint.

Run: ``.venv/bin/python benchmarks/checkpoint_managers.py [--batches 40] [--rounds 2]``.

Each run is a fresh process with a local session (as a job's), a stream of ``--batches`` one-line
JSON files read one per batch (available-now) into a foreachBatch that does nothing, so what is
left is Spark's own per-batch work: planning, the offset log (``walCommit``), the commit log
(``commitOffsets``) and the file source's log (``latestOffset``). The two managers alternate,
``--rounds`` times each:

* ``file-context``: Spark's default (``FileContextBasedCheckpointFileManager``), whose renames on
  Hadoop's local file system fork ``readlink`` from the driver JVM;
* ``file-system``: what a job with a local checkpoint uses (``FileSystemBasedCheckpointFileManager``,
  ``cdc.spark.session.fork_free_checkpoints``).

Prints ms per batch and the mean of each step of Spark's progress, per run. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cdc.spark.session import CHECKPOINT_MANAGER, FILE_CONTEXT_CHECKPOINTS, FILE_SYSTEM_CHECKPOINTS

MANAGERS = {"file-context": FILE_CONTEXT_CHECKPOINTS, "file-system": FILE_SYSTEM_CHECKPOINTS}


def child(manager: str, batches: int) -> None:
    """One run (a process of its own): prints a JSON line."""
    from cdc.spark.session import local_session

    spark = local_session("checkpoint-managers", parallelism=2, light_jvm=True, **{CHECKPOINT_MANAGER: MANAGERS[manager]})
    work = tempfile.mkdtemp(prefix="checkpoint-managers-")
    os.makedirs(f"{work}/in")
    for i in range(batches):
        with open(f"{work}/in/{i:05d}.json", "w") as f:
            f.write('{"a": 1}\n')
    df = spark.readStream.schema("a INT").option("maxFilesPerTrigger", 1).json(f"{work}/in")
    started = time.perf_counter()
    query = df.writeStream.foreachBatch(lambda batch, batch_id: None).option("checkpointLocation", f"{work}/cp")
    query = query.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    steps: dict[str, list[float]] = {}
    for progress in query.recentProgress:
        for step, ms in progress["durationMs"].items():
            steps.setdefault(step, []).append(ms)
    print(json.dumps({"manager": manager, "batches": len(query.recentProgress), "seconds": round(seconds, 2),
                      "ms_per_batch": round(1000 * seconds / max(len(query.recentProgress), 1)),
                      "step_ms": {k: round(statistics.mean(v), 1) for k, v in sorted(steps.items())},
                      "load": round(os.getloadavg()[0], 2)}))
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for manager in MANAGERS:
            out = subprocess.run([sys.executable, __file__, "--child", manager, str(args.batches)],
                                 capture_output=True, text=True, check=True)
            print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
