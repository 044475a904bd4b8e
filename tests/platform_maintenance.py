"""A platform's maintenance of the sink tables, looping in a process of its own as a scheduled job
would, for tests/test_shared_lake_soak.py.

Usage: python tests/platform_maintenance.py <database dir> <stop file> <report file> <seed> <pause>
Each loop picks one Delta table under the database directory (a mirror or a changelog) and one of
delta-rs ``optimize.compact()``, ``optimize.z_order(key)``, ``vacuum(enforce_retention_duration=False)``
or ``alter.set_table_properties`` (a property of its own). The VACUUM keeps no retention on a
mirror, and the hour the docs ask for on a changelog: with none, a compaction and a VACUUM of the
changelog between a SIGKILL and the restart delete the files the mirror catches up from, and the
restart stops (ChangelogGap; docs/operating/maintenance.md, tests/test_shared_lake.py). It pauses
up to ``pause`` seconds between two, until the stop file exists; then it writes a JSON report: per
operation and table kind how many committed, lost a race to the job's commit
(``CommitFailedError``: the platform's side retreats) or failed otherwise, with the first
failures' messages.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

OPERATIONS = ("compact", "z_order", "vacuum", "properties")
CHANGELOG_RETENTION_HOURS = 1  # the least docs/operating/maintenance.md asks of other writers' VACUUM there


def maintain(database_dir: str, stop_file: str, report: str, seed: int, pause_s: float) -> None:
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    failures: list[str] = []
    while not os.path.exists(stop_file):
        tables = sorted(p.name for p in Path(database_dir).iterdir() if (p / "_delta_log").is_dir()) \
            if os.path.isdir(database_dir) else []
        if not tables:
            time.sleep(0.2)
            continue
        name, operation = rng.choice(tables), rng.choice(OPERATIONS)
        kind = "changelog" if name.endswith("_changelog") else "mirror"
        try:
            once(deltalake.DeltaTable(os.path.join(database_dir, name)), operation, kind, rng)
            counts[f"{operation} {kind} committed"] += 1
        except CommitFailedError:
            counts[f"{operation} {kind} lost a race"] += 1
        except TableNotFoundError:
            pass  # being created by the job's snapshot
        except Exception as exc:  # reported to the test, which fails on it
            counts[f"{operation} {kind} failed"] += 1
            if len(failures) < 5:
                failures.append(f"{operation} of {name}: {type(exc).__name__}: {str(exc)[:500]}")
        time.sleep(rng.uniform(0, pause_s))
    Path(report).write_text(json.dumps({"counts": counts, "failures": failures}))


def once(table: Any, operation: str, kind: str, rng: random.Random) -> None:
    """One maintenance operation on a mirror or a changelog."""
    if operation == "compact":
        table.optimize.compact()
    elif operation == "z_order":
        table.optimize.z_order(["id"] if kind == "mirror" else ["ts_ms"])
    elif operation == "vacuum":
        table.vacuum(retention_hours=0 if kind == "mirror" else CHANGELOG_RETENTION_HOURS,
                     enforce_retention_duration=False, dry_run=False)
    else:
        table.alter.set_table_properties({"platform.owner": f"lake-team-{rng.randrange(100)}"},
                                         raise_if_not_exists=False)


if __name__ == "__main__":
    maintain(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
