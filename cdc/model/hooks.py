"""Named points in the pipeline where a test may inject a crash.

The product calls ``hooks.reached(point)`` at a few points: the stage, emit and stream tasks
(executors; ``low_watermark`` right after a chunk's LW, before its SELECT), batch planning and
the moment after the sinks committed (driver), and points inside sinks (the Delta mirror's
background MERGE, ...; ``delta_planned`` between a Delta commit's read of its table and the commit,
where tests commit as another writer: sinks/delta/conflicts.py). In production the hooks are :data:`NO_HOOKS`, which do nothing. The
crash tests install hooks that raise at an armed point (tests/faults.py), to prove exactly-once
at every step; tests/test_ddl_during_snapshot.py runs DDL at them. Hooks travel to executors
pickled, so an implementation must be picklable and importable there.
"""

from __future__ import annotations

from typing import Protocol

POINTS = ("stage", "plan", "emit", "stream", "after_sink_commit", "mirror", "between_sinks",
          "sink_commit", "low_watermark", "sink_evolve", "sink_rewritten", "maintenance",
          "delta_planned")


class Hooks(Protocol):
    """Called when the pipeline passes a named point."""

    def reached(self, point: str) -> None:
        """May raise, to simulate a crash at ``point``."""
        ...


class NoHooks:
    """The production hooks: nothing happens."""

    def reached(self, point: str) -> None:
        return None

    def __repr__(self) -> str:
        return "NoHooks()"


NO_HOOKS = NoHooks()
