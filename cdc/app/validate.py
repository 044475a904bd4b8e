"""``python -m cdc validate --check-connection``: every prerequisite on the source, each missing
one with the exact GRANT or setting that fixes it.

Runs on the driver. The checks themselves are the dialect's
(:class:`~binlog.dialect.SupportsSourceReport`: binlog/mysql/checks.py,
binlog/postgres/checks.py); this module connects, finds the tables and prints the report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from binlog.dialect import Dialect, SourceFinding, SupportsSourceReport
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError


def source_report(dialect: Dialect, config: JobConfig) -> list[SourceFinding] | None:
    """The source's findings (None when the dialect has no report); reads only.

    Raises:
        CdcError: the source cannot be reached, or refused the user (one line, as at start).
    """
    if not isinstance(dialect, SupportsSourceReport):
        return None
    with contextlib.closing(dialect.connect()) as conn:
        try:
            tables = dialect.discover_tables(conn, config.source.tables)
            unmatched: list[SourceFinding] = []
        except ConfigError as exc:  # no table visible to the user matches source.tables
            tables, unmatched = [], [SourceFinding("source.tables", False, "no visible table matches",
                                                   " ".join(str(exc).split()))]
        return [*dialect.source_report(conn, tables), *unmatched]


def render_report(address: str, findings: Sequence[SourceFinding]) -> str:
    """One line per finding; a missing one ends with what to run."""
    missing = sum(not f.ok for f in findings)
    lines = [f"source {address}: {len(findings)} check(s), {missing} missing"]
    for f in findings:
        if f.ok:
            lines.append(f"  ok       {f.item}: {f.found}")
        else:
            lines.append(f"  MISSING  {f.item}: {f.found}; fix: {f.fix}")
    return "\n".join(lines)
