"""A driver process for the crash tests: runs the job continuously until it is killed.

Usage: python tests/driver_process.py '<json: the job file's tree>'
It prints "batch N" after each batch the sinks committed, so a test can kill it mid-flight.
"""

from __future__ import annotations

import json
import sys

from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.spark.session import local_session


class PrintCommits:
    """Hooks that print each committed batch (pickled by value to the workers: a __main__ class)."""

    def __init__(self) -> None:
        self.batch = 0

    def reached(self, point: str) -> None:
        if point == "after_sink_commit":
            print(f"batch {self.batch}", flush=True)
            self.batch += 1


def main(arg: str) -> None:
    config = parse_config({**json.loads(arg), "trigger_interval": "200ms"}, warn_plain_password=False)
    spark = local_session("spark-cdc-crash-driver", parallelism=2)
    print("started", flush=True)
    JobRunner(config, spark, hooks=PrintCommits()).run()


if __name__ == "__main__":
    main(sys.argv[1])
