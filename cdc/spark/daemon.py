"""Spark's Python daemon, with the modules of the project's tasks imported once, before it forks.

Spark starts one daemon per executor (``spark.python.daemon.module``) and forks a worker from it
for each Python task that finds no idle worker. PySpark's own daemon imports none of the task's
modules, so every worker imported pyarrow, pandas (pyarrow's first ``pa.array`` of a NumPy array
imports it), NumPy, the dialect and the sink writers itself: 1.0 to 2.0 s of CPU per worker on
this 2-core machine, most of a short stream batch (py-spy, ``benchmarks/py_spy_summary.py``). A worker forked from
this daemon has them already, in pages it shares with the daemon.

Forking after these imports is safe: the only threads they start are jemalloc's background purgers
(pyarrow's and delta-rs's allocators) and OpenBLAS's pool (NumPy), and each of those libraries
handles ``fork`` itself (its at-fork hooks stop or reset the threads). None of them starts a
thread pool of its own at import; pyarrow's and delta-rs's start on first use, which only a
worker does.

Runs on the executors only: ``python -m cdc.spark.daemon <worker module>``, as Spark launches it.
Only the task workers' daemon uses it; the daemons of PySpark's planners (``lookup_data_sources``,
``create_data_source``, ``plan_data_source_read``) stay ``pyspark.daemon``.
"""

from __future__ import annotations

import importlib
import logging

# What a task of the job imports besides every registered dialect: Arrow, NumPy, pandas, PySpark's
# worker, the task code and every registered sink (``sinks.registry`` imports them).
PRELOAD: tuple[str, ...] = (
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.ipc",
    "pyarrow.parquet",
    "pandas",
    "pyspark.worker",
    "cdc.spark.tasks",
    "sinks.registry",
)


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``, then every registered dialect; returns what did not import.

    A module that does not import (an optional dependency missing) is left to the worker that
    needs it, which then raises the error a user can act on.
    """
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:
            logging.getLogger(__name__).debug("not preloaded: %s (%s)", name, e)
            failed.append(name)
    from binlog.registry import DIALECT_NAMES, dialect_class

    for name in DIALECT_NAMES:
        try:
            dialect_class(name)
        except Exception as e:
            logging.getLogger(__name__).debug("not preloaded: dialect %s (%s)", name, e)
            failed.append(name)
    return failed


def main() -> None:
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
