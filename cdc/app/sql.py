"""``python -m cdc sql``: a SQL query over a job's tables by name, printed for people or scripts.

Opens a local Spark session on the job's catalog (``<state_dir>/catalog``, where ``python -m cdc
run`` registered the mirrors and changelogs), runs the query and prints the result as a table,
JSON lines or CSV. Runs on the driver; the job must not be running (the catalog's embedded Derby
database serves one process at a time). It deletes the job's record of the names it registered
(``sinks.delta.catalog.RECORD``), as a query may change them.

A job with a Pravega sink also gets its streams as temporary views (:func:`stream_views`,
:mod:`sinks.pravega.catalog`): one per table in the job's schema history, its events decoded
with that history, read only when a query scans it. Kafka and Pulsar topics are not views (yet).
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc.model.config import JobConfig
from cdc.model.errors import CdcError, Terminal
from cdc.model.history import SchemaVersion
from cdc.model.schema import TableId

Views = Callable[[Any], list[str]]  # registers views on a session; their names


class QueryFailed(CdcError, Terminal):
    """Spark refused the query (the message is Spark's first line)."""


def run_sql(catalog: str | Path, query: str, fmt: str = "table", spark: Any | None = None,
            views: Views | None = None) -> str:
    """The result of ``query`` over the catalog in folder ``catalog``, formatted (``table``,
    ``json``, ``csv``). ``spark``: a session to use instead of opening one on ``catalog``;
    ``views``: registers more names first (a job's streams: :func:`stream_views`).

    Raises:
        CdcError: there is no catalog in that folder yet (and no views), or the query failed.
    """
    from cdc.spark.session import local_session
    from sinks.delta.catalog import forget_names

    if spark is None and views is None and not (Path(catalog) / "metastore_db").exists():
        raise CdcError(f"there is no catalog at {catalog} yet: run the job first (python -m cdc run --config "
                       "...); a job started by spark-submit registers its tables in that session's catalog")
    if spark is None:  # the query may drop or create names: the job's next start asks the metastore again
        forget_names(catalog)
    session = spark if spark is not None else local_session("spark-cdc-sql", parallelism=1, catalog_dir=catalog)
    if views is not None:
        views(session)
    # pyspark logs a failed query's whole JVM stack at ERROR; the one line below says it all
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        table = session.sql(query).toArrow()
    except Exception as exc:  # AnalysisException, ParseException: one line naming the problem
        raise QueryFailed(f"the query failed: {_problem(exc)}") from None
    rows = table.to_pylist()
    if fmt == "json":
        return "".join(json.dumps(r, default=str) + "\n" for r in rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=table.column_names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    return _table_text(table.column_names, rows)


def _problem(exc: Exception) -> str:
    """The line of a failed query's error that names the problem: Spark's first line, or, when a
    Python worker failed (a stream view's reader), the error the worker raised (its last line)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].startswith("An exception was thrown from the Python worker"):
        return lines[-1]
    return lines[0]


def stream_views(config: JobConfig) -> Views | None:
    """The job's Pravega streams as views (:func:`sinks.pravega.catalog.register_views`), typed
    by the job's schema history; None when the job has no Pravega sink."""
    pravega = [s for s in config.sink if s.type == "pravega"]
    if not pravega:
        return None
    versions = schema_history(config)

    def register(spark: Any) -> list[str]:
        from sinks.pravega.catalog import register_views
        from sinks.pravega.config import PravegaSinkConfig

        return [name for s in pravega if isinstance(s, PravegaSinkConfig)
                for name in register_views(spark, s, versions)]

    return register


def schema_history(config: JobConfig) -> dict[TableId, list[SchemaVersion]]:
    """Every table of the job's schema history (``<state_dir>/schemas``) and its versions, oldest
    first; empty before the job's first run."""
    import pyarrow.fs as pafs

    from cdc.app.runner import JobPaths
    from cdc.spark.state import StateStore

    store = StateStore(JobPaths.of(config).state_dir)
    listed = store.fs.get_file_info(pafs.FileSelector(store.path("schemas"), allow_not_found=True))
    tables = [TableId.parse(i.base_name) for i in listed if i.type == pafs.FileType.Directory]
    return {t: sorted((SchemaVersion.from_dict(d) for d in store.schema_versions(t)), key=lambda v: v.version)
            for t in tables}


def _table_text(columns: list[str], rows: list[dict[str, Any]]) -> str:
    cells = [[_cell(r[c]) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    head = "|" + "|".join(f" {c:<{w}} " for c, w in zip(columns, widths, strict=True)) + "|"
    body = ["|" + "|".join(f" {v:<{w}} " for v, w in zip(row, widths, strict=True)) + "|" for row in cells]
    return "\n".join([line, head, line, *body, line, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"]) + "\n"


def _cell(value: Any) -> str:
    return "NULL" if value is None else str(value)
