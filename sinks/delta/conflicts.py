"""Delta's conflict check for the commits the job writes itself, on a lake that others also write.

The job's tables are shared: a platform runs ``OPTIMIZE`` (maybe ``ZORDER BY``), ``VACUUM`` and
``REORG TABLE ... APPLY (PURGE)`` from Spark, compaction from delta-rs, and sets table
properties. Delta's answer is optimistic concurrency (https://docs.delta.io/latest/concurrency-control.html):
a writer reads the table at a version, plans its commit on it, and when another commit took the
next version first it reads the commits in between and decides whether its plan still holds.

Here every writer of the job that can lose such a race (:func:`replanning`: the deletion-vector
MERGE, the copy-on-write MERGE and rewrite, the changelog appends of the delta-rs engine; the
delta-spark engine checks the same before Spark's own conflict check) classifies each commit
between the version it planned on and the newest (:func:`check_commits_since`):

* no ``add``/``remove`` with ``dataChange: true``, no schema or protocol change, no app
  transaction of the job's: a compaction or Z-order (``OPTIMIZE``), a purge (``REORG``), a
  ``VACUUM`` (it removes only files no version of the snapshot uses), a properties-only
  ``metaData`` (``SET TBLPROPERTIES``). A ``protocol`` beside it that adds only features a writer
  has nothing to do for here (:data:`INERT_FEATURES`) counts as none: delta-rs's ``SET
  TBLPROPERTIES`` writes the protocol again on every table with table features, adding
  ``variantType`` and ``invariants``. The batch is planned again on the newest version, and
  committed (its rows are staged: a re-plan reads key columns, nothing of the source);
* anything else: :class:`SharedTableConflict`, one line naming the version, its operation and
  the engine that wrote it (``commitInfo.engineInfo``, else ``clientVersion``). Nothing of the
  batch is committed, so the batch is replayed after the fix.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from cdc.model.errors import CdcError, Terminal
from cdc.model.hooks import NO_HOOKS, Hooks
from sinks.delta.commits import MissingCommit, read_actions, table_fs

log = logging.getLogger(__name__)

MAX_REPLANS = 5  # a platform's maintenance does not commit this often between a plan and its commit
T = TypeVar("T")


class CommitConflict(CdcError):
    """Another writer committed the version a commit of the job's own was to take (the
    deletion-vector MERGE and purge create their commit file only if absent)."""


class SharedTableConflict(CdcError, Terminal):
    """Another writer committed to a sink table what the job cannot reconcile with its batch
    (a schema or protocol change, a data change, another instance of the job)."""


Protocol = tuple[int, int, frozenset[str], frozenset[str]]  # reader and writer versions, then features


@dataclass(frozen=True)
class Planned:
    """What a batch was planned on: the table's version, the shape of its schema, its protocol."""

    uri: str
    version: int
    schema: tuple[tuple[str, str, bool], ...]
    partitions: tuple[str, ...]
    protocol: Protocol | None = None  # None: any protocol action is a change

    @classmethod
    def of(cls, table: DeltaTable) -> Planned:
        metadata, p = table.metadata(), table.protocol()
        return cls(table.table_uri, table.version(), schema_shape(table.schema().to_json()),
                   tuple(metadata.partition_columns),
                   (p.min_reader_version, p.min_writer_version, frozenset(p.reader_features or ()),
                    frozenset(p.writer_features or ())))


def protocol_of(action: dict[str, Any]) -> Protocol:
    """A ``protocol`` action's content, comparable with :attr:`Planned.protocol` (features as sets:
    writers list them in any order)."""
    return (int(action.get("minReaderVersion", 1)), int(action.get("minWriterVersion", 2)),
            frozenset(action.get("readerFeatures") or ()), frozenset(action.get("writerFeatures") or ()))


# Table features that ask nothing of the job's writes: types its schemas do not have (a schema
# change is checked on its own), and invariants, which live in column metadata that no sink
# schema carries. delta-rs's SET TBLPROPERTIES adds variantType and invariants to the protocol
# of every table with table features (delta-rs 1.6.6).
INERT_FEATURES = frozenset({"variantType", "variantType-preview", "timestampNtz", "invariants"})
# The features a legacy protocol (writer version below 7) implies, by the writer version that brought each
_LEGACY_WRITER = ((2, ("appendOnly", "invariants")), (3, ("checkConstraints",)),
                  (4, ("changeDataFeed", "generatedColumns")), (5, ("columnMapping",)), (6, ("identityColumns",)))


def features(protocol: Protocol) -> frozenset[str]:
    """Every table feature a protocol turns on, a legacy protocol's implied ones included."""
    reader, writer, reader_features, writer_features = protocol
    out = set(reader_features | writer_features)
    if writer < 7:
        out.update(f for version, names in _LEGACY_WRITER if writer >= version for f in names)
    if reader == 2:
        out.add("columnMapping")
    return frozenset(out)


def _protocol_change(new: Protocol, planned: Protocol | None) -> str | None:
    """How a ``protocol`` action changes what the batch was planned on; None: in nothing the job's
    writes depend on (the same features, or only :data:`INERT_FEATURES` added)."""
    if planned is None:
        return "changed the protocol"
    added, dropped = features(new) - features(planned), features(planned) - features(new)
    if dropped:
        return f"changed the protocol (dropped the table features {', '.join(sorted(dropped))})"
    if added - INERT_FEATURES:
        return f"changed the protocol (added the table features {', '.join(sorted(added - INERT_FEATURES))})"
    return None


def schema_shape(schema_json: str) -> tuple[tuple[str, str, bool], ...]:
    """A Delta schema string as (name, type, nullable) per column: what readers and writers see
    (field metadata, such as column-mapping ids, left out; a change there comes with a protocol
    or a name change)."""
    fields = json.loads(schema_json).get("fields", [])
    return tuple((f["name"], json.dumps(f["type"], sort_keys=True), bool(f.get("nullable", True))) for f in fields)


def engine_of(info: dict[str, Any]) -> str:
    """The writer a commit names (``commitInfo.engineInfo``, else ``clientVersion``)."""
    return str(info.get("engineInfo") or info.get("clientVersion") or "an engine that names none")


def check_commits_since(planned: Planned, storage_options: dict[str, str], app: str,
                        newest: int | None = None) -> int:
    """Check every commit after ``planned.version``; the newest version, on which the batch may be
    planned again.

    Raises:
        SharedTableConflict: a commit the batch cannot be reconciled with (the message names it).
    """
    fs = table_fs(planned.uri, storage_options)
    version = planned.version
    while newest is None or version < newest:
        try:
            actions = read_actions(fs, version + 1)
        except MissingCommit:
            break
        version += 1
        reason = _unreconcilable(actions, planned, app)
        if reason is not None:
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            raise SharedTableConflict(
                f"the Delta table {planned.uri} changed under the job: version {version} "
                f"({info.get('operation', 'an operation')} by {engine_of(info)}) {reason[0]}, which the job cannot "
                f"reconcile with its batch planned on version {planned.version}; nothing of the batch is committed: "
                f"{reason[1]}, then restart the job (the batch is replayed)",
                uri=planned.uri, version=version, engine=engine_of(info))
    return version


_ONE_WRITER = "keep other writers' INSERT, UPDATE, DELETE and MERGE off the sink tables (maintenance is fine: " \
              "docs/operating/maintenance.md)"


def _unreconcilable(actions: list[dict[str, Any]], planned: Planned, app: str) -> tuple[str, str] | None:
    """Why a commit by another writer rules out a re-plan, with the fix; None: it does not."""
    for action in actions:
        change = _protocol_change(protocol_of(action["protocol"]), planned.protocol) if "protocol" in action \
            else None
        if change is not None:
            return change, "undo the protocol change (or drop the table and restart the snapshot)"
        if "metaData" in action:
            meta = action["metaData"]
            if schema_shape(meta.get("schemaString", "{}")) != planned.schema or \
                    tuple(meta.get("partitionColumns") or ()) != planned.partitions:
                return ("changed the schema", "undo the schema change (schema changes reach the sink tables from "
                        "the source's DDL only), or drop the tables and restart the snapshot")
        if "txn" in action and action["txn"].get("appId") == app:
            return "carries a batch of this job", "run one job per sink.path (another instance of it writes here)"
        for kind in ("add", "remove"):
            if kind in action and action[kind].get("dataChange", True):
                return f"changed data (an {kind} with dataChange true)", _ONE_WRITER
    return None


# delta-rs's, and the deletion-vector MERGE's own: another writer took the version planned on
CONFLICTS: tuple[type[BaseException], ...] = (CommitFailedError, CommitConflict)
# ... and a file of the version planned on gone (another writer's compaction, then its VACUUM)
_REPLANNED: tuple[type[BaseException], ...] = (*CONFLICTS, FileNotFoundError)


def replanning(read: Callable[[], DeltaTable], write: Callable[[DeltaTable], T], storage_options: dict[str, str],
               app: str, what: str, hooks: Hooks = NO_HOOKS) -> T:
    """Run ``write`` on the table ``read`` gives; when another writer committed first, check its
    commits (:func:`check_commits_since`) and plan ``write`` again on the newest version. A file
    of the version read that is gone while other writers committed since (a compaction, then a
    VACUUM with no retention) is planned again the same way.

    ``hooks`` is passed ``delta_planned`` between the read and the write (tests commit there as
    another writer would).

    Raises:
        SharedTableConflict: a commit that cannot be reconciled, or ``MAX_REPLANS`` re-plans that
            all lost the race.
    """
    for _ in range(MAX_REPLANS + 1):
        table = read()
        planned = Planned.of(table)
        hooks.reached("delta_planned")
        try:
            return write(table)
        except _REPLANNED as exc:
            newest = check_commits_since(planned, storage_options, app)
            if isinstance(exc, FileNotFoundError) and newest == planned.version:
                raise  # no other writer since: not a file that a compaction and a VACUUM took
            log.info("%s: planned on version %d, another writer committed up to version %d first (%s): planned "
                     "again", what, planned.version, newest, str(exc).splitlines()[0][:200])
    raise SharedTableConflict(f"{what}: other writers committed to {planned.uri} before each of {MAX_REPLANS + 1} "
                              "attempts to commit the batch; nothing of it is committed: make the maintenance "
                              "that runs on the table less frequent, then restart the job (the batch is replayed)",
                              uri=planned.uri)
