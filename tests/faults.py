"""Deterministic crashes for the exactly-once tests: hooks (cdc/model/hooks.py) armed by files.

A test arms a point by writing ``<dir>/<point>``; the next time the pipeline passes that point
(on the driver or in an executor task) the file is deleted and :class:`InjectedFault` is raised.
Files, not variables, because Spark's Python workers are separate processes started before a
test runs. The hooks object is pickled to the workers; they import this module from the tests
folder, which conftest.py puts on PYTHONPATH for every process it starts.
"""

from __future__ import annotations

import os
from pathlib import Path

from cdc.model.errors import CdcError, Transient
from cdc.model.hooks import POINTS


class InjectedFault(CdcError, Transient):
    """A crash a test asked for."""


class FileFaults:
    """Hooks that raise at points armed in a directory.

    Args:
        directory: where armed points live (created on first arm).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = str(directory)

    def __repr__(self) -> str:
        return f"FileFaults({self.directory!r})"

    def arm(self, point: str, after: int = 0) -> None:
        """Make a pass through ``point`` fail, after letting ``after`` passes through."""
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {', '.join(POINTS)}")
        os.makedirs(self.directory, exist_ok=True)
        Path(self.directory, point).write_text(str(after))

    def reached(self, point: str) -> None:
        """Raise :class:`InjectedFault` once if ``point`` is armed and its passes are used up.

        Concurrent tasks may both fire; a test only needs the point to fail at least once.
        """
        path = Path(self.directory, point)
        try:
            remaining = int(path.read_text() or "0")
        except (FileNotFoundError, ValueError):
            return
        if remaining > 0:
            path.write_text(str(remaining - 1))
            return
        try:
            path.unlink()
        except FileNotFoundError:
            return  # another task fired it first
        raise InjectedFault(f"injected fault at {point}", point=point)
