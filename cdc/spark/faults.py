"""Deterministic fault injection for crash tests (a no-op unless a test arms a point).

A test arms a point by writing ``faults/<point>`` in the state directory (``arm``); the next time
the code passes that point the file is deleted and :class:`InjectedFault` is raised. Files, not
environment variables, because Spark's Python workers are started before a test runs and do not
see later changes to the test's environment. Checking costs one ``stat`` per task or batch.

Points: ``stage`` (staging task, after its SELECT, before writing the staged file), ``plan``
(driver, planning the next batch), ``emit`` (emit task, after merging, before yielding rows),
``stream`` (stream task, after reading its first changes), ``after_sink_commit`` (foreachBatch,
after the Delta commits, before Spark writes its commit log), ``mirror`` (the driver's mirror
follower, before a background MERGE: the changelog holds batches the mirror lacks).
"""

from __future__ import annotations

from cdc.model.errors import CdcError, Transient
from cdc.spark.state import StateStore

POINTS = ("stage", "plan", "emit", "stream", "after_sink_commit", "mirror")


class InjectedFault(CdcError, Transient):
    """A crash a test asked for."""


def arm(store: StateStore, point: str, after: int = 0) -> None:
    """Make a pass through ``point`` fail, after letting ``after`` passes through."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; known: {', '.join(POINTS)}")
    store.write_bytes(f"faults/{point}", str(after).encode())


def check(store: StateStore, point: str) -> None:
    """Raise :class:`InjectedFault` once if ``point`` is armed and its passes are used up.

    Concurrent tasks may both fire; a test only needs the point to fail at least once.
    """
    rel = f"faults/{point}"
    if not store.exists(rel):
        return
    remaining = int(store.read_bytes(rel) or b"0")
    if remaining > 0:
        store.write_bytes(rel, str(remaining - 1).encode())
        return
    store.delete(rel)
    raise InjectedFault(f"injected fault at {point}", point=point)
