"""The Delta tables a sink keeps: where they live, how they are created, how batches are marked.

Layout under the sink's root path, per source table ``db.t``::

    <path>/<db>/<t>             the mirror (the source table's columns, flat)
    <path>/<db>/<t>_changelog   the changelog (op, before, after, source, ts_ms)

Both are created on first write, with every column nullable and these table properties:

* ``spark_cdc.sourceTable``: ``db.t``; ``spark_cdc.kind``: ``mirror`` or ``changelog``;
* ``spark_cdc.primaryKey``: the key columns as a JSON list (MERGE matches on them);
* ``spark_cdc.schema``: the source table's sink schema (columns with their MySQL and Arrow types,
  and under ``evolve`` each column's identity across renames) as JSON, updated when the table
  evolves (``sinks/delta/evolve.py``); a restart reads it back;
* ``delta.appendOnly = true`` on changelogs;
* ``delta.dataSkippingStatsColumns``: the columns whose min/max statistics are safe to keep
  (see :func:`stats_columns`).

Idempotency: each commit carries a Delta *app transaction* ``(app_id, batch_id)``; a writer first
reads the table's stored version for its ``app_id`` and writes nothing when it is at or past the
batch. delta-rs does not refuse a stale version itself, so the check here is what makes replays
safe. Each table checks its own version, so a crash between the mirror's and the changelog's
commits heals on replay.
"""

from __future__ import annotations

import json
import re
from typing import Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.schema import Schema as DeltaSchema

from cdc.model.schema import TableId, TableSchema, schema_to_dict
from sinks.base import SinkSchemaMismatch

TableKind = Literal["mirror", "changelog"]

PROP_SOURCE = "spark_cdc.sourceTable"
PROP_KIND = "spark_cdc.kind"
PROP_KEY = "spark_cdc.primaryKey"
PROP_SCHEMA = "spark_cdc.schema"  # the sink schema the table has (JSON; updated when it evolves)
PROP_PENDING = "spark_cdc.schemaPending"  # the sink schema a drop/rename rewrite is making (JSON)

# Decimal statistics travel through float64 in delta-rs (and decimal(20,0) maxima are clamped to
# the int64 range): readers that prune on them lose rows. 15 digits survive a float64 round trip.
_MAX_STATS_DECIMAL_PRECISION = 15
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def table_uri(root: str, table_id: TableId, kind: TableKind) -> str:
    """Where ``table_id``'s mirror or changelog lives under ``root`` (a path or URI)."""
    suffix = "_changelog" if kind == "changelog" else ""
    return f"{root.rstrip('/')}/{table_id.db}/{table_id.table}{suffix}"


def app_id(query_id: str, stream: str) -> str:
    """The Delta app-transaction id of one write stream of one query.

    Args:
        query_id: a stable identity of the streaming query (its checkpoint), not Spark's run id.
        stream: which writer: ``batch`` (merge/append per micro-batch) or ``snapshot`` (bulk
            files committed by the driver). Separate ids let both commit in the same batch.
    """
    return f"spark-cdc/{query_id}/{stream}"


def commit_properties(app: str, batch_id: int) -> CommitProperties:
    """Commit properties that record ``(app, batch_id)`` in the same commit as the data."""
    return CommitProperties(app_transactions=[Transaction(app, batch_id)])


def is_committed(table: DeltaTable, app: str, batch_id: int) -> bool:
    """True when ``table`` already holds batch ``batch_id`` (or a later one) of ``app``."""
    version = table.transaction_version(app)
    return version is not None and version >= batch_id


def ensure_marked(table: DeltaTable, app: str, batch_id: int) -> None:
    """Make sure ``table`` records ``(app, batch_id)``, with an empty commit if need be.

    delta-rs makes no commit for a MERGE that changes no row (say, a batch whose only events
    insert then delete one key), and so drops the MERGE's app transaction; without this marker
    a replay of the batch could not be told from a first run.
    """
    table.update_incremental()
    if not is_committed(table, app, batch_id):
        table.create_write_transaction([], mode="append", schema=table.schema(),
                                       commit_properties=commit_properties(app, batch_id))


def quote(name: str) -> str:
    """A column name quoted for delta-rs / Spark SQL expressions."""
    return "`" + name.replace("`", "``") + "`"


def mirror_key(schema: TableSchema) -> tuple[str, ...]:
    """The columns that identify a mirror row: the primary key, else every column.

    Tables without a primary key are mirrored as sets: a row is identified by all of its
    values, so fully identical duplicate rows in the source collapse into one mirror row.
    """
    return schema.primary_key or tuple(schema.column_names)


def merge_predicate(key: tuple[str, ...], null_safe: bool = False) -> str:
    """``t.k1 = s.k1 AND ...``: the MERGE match condition on the key columns.

    ``null_safe`` compares with ``IS NOT DISTINCT FROM`` (keyless tables: any column may be NULL).
    """
    op = "IS NOT DISTINCT FROM" if null_safe else "="
    return " AND ".join(f"(t.{quote(k)} {op} s.{quote(k)})" for k in key)


def stats_eligible(t: pa.DataType) -> bool:
    """True for leaf types whose min/max statistics every reader here handles exactly."""
    if pa.types.is_decimal(t):
        return bool(t.precision <= _MAX_STATS_DECIMAL_PRECISION)
    return bool(
        pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_date32(t)
        or pa.types.is_timestamp(t) or pa.types.is_string(t)
    )


def stats_columns(schema: pa.Schema) -> list[str]:
    """Dotted paths of the leaf columns that keep statistics (floats, binaries, wide decimals not).

    Floats are left out because NaN is ignored by min/max; binaries because they are not
    comparable the same way everywhere.
    """
    out: list[str] = []

    def walk(prefix: str, field: pa.Field) -> None:
        name = prefix + _quote(field.name)
        if pa.types.is_struct(field.type):
            for i in range(field.type.num_fields):
                walk(name + ".", field.type.field(i))
        elif stats_eligible(field.type):
            out.append(name)

    for f in schema:
        walk("", f)
    return out


def _quote(name: str) -> str:
    return name if _PLAIN_NAME.match(name) else "`" + name.replace("`", "``") + "`"


def table_configuration(schema: TableSchema, kind: TableKind, storage: pa.Schema) -> dict[str, str]:
    """The table properties of a new mirror or changelog (see the module docstring)."""
    config = {
        PROP_SOURCE: str(schema.table_id),
        PROP_KIND: kind,
        PROP_KEY: json.dumps(list(schema.primary_key)),
        PROP_SCHEMA: json.dumps(schema_to_dict(schema)),
    }
    columns = stats_columns(storage)
    if columns:
        config["delta.dataSkippingStatsColumns"] = ",".join(columns)
    else:
        config["delta.dataSkippingNumIndexedCols"] = "0"
    if kind == "changelog":
        config["delta.appendOnly"] = "true"
    return config


def read_table(uri: str, storage_options: dict[str, str] | None = None) -> pa.Table:
    """Every live row of the Delta table at ``uri``, deletion vectors applied.

    delta-rs's pyarrow reader refuses tables with deletion vectors (the delta-spark engine's
    mirrors); its DataFusion reader applies them.
    """
    table = DeltaTable(uri, storage_options=storage_options or None)
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return table.to_pyarrow_table()
    return _query(table, "SELECT * FROM t").cast(pa.schema(table.schema().to_arrow()))


def count_rows(uri: str, storage_options: dict[str, str] | None = None) -> int:
    """How many live rows the Delta table at ``uri`` holds (deletion vectors applied)."""
    table = DeltaTable(uri, storage_options=storage_options or None)
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return int(table.count())
    return int(_query(table, "SELECT count(*) AS n FROM t")["n"][0].as_py())


def _query(table: DeltaTable, sql: str) -> pa.Table:
    """delta-rs's SQL over ``table`` (registered as ``t``), read through the Arrow stream interface
    (``pa.table()`` of the result would import pandas to ask whether it is a DataFrame: 0.2 s)."""
    return pa.RecordBatchReader.from_stream(QueryBuilder().register("t", table).execute(sql)).read_all()


def open_table(uri: str, storage_options: dict[str, str]) -> DeltaTable | None:
    """The Delta table at ``uri``, or None when there is none yet."""
    try:
        return DeltaTable(uri, storage_options=storage_options or None)
    except TableNotFoundError:
        return None


def ensure_table(
    uri: str, storage_options: dict[str, str], schema: TableSchema, kind: TableKind,
    storage: pa.Schema,
) -> DeltaTable:
    """Open the table at ``uri``, creating it first when absent, and check it fits ``schema``.

    Raises:
        SinkSchemaMismatch: the existing table has other columns, types or key.
    """
    table = open_table(uri, storage_options)
    if table is None:
        table = create_table(uri, storage_options, schema, kind, storage)
    check_table(table, uri, schema, storage)
    return table


def create_table(uri: str, storage_options: dict[str, str], schema: TableSchema, kind: TableKind,
                 storage: pa.Schema) -> DeltaTable:
    """Create the table at ``uri`` (nothing happens when another writer just did) and open it."""
    DeltaTable.create(
        uri, storage, mode="ignore", name=f"{schema.table_id}{'_changelog' if kind == 'changelog' else ''}",
        description=f"spark-cdc {kind} of {schema.table_id}",
        configuration=table_configuration(schema, kind, storage),
        storage_options=storage_options or None, raise_if_key_not_exists=False,
    )
    return DeltaTable(uri, storage_options=storage_options or None)


def check_table(table: DeltaTable, uri: str, schema: TableSchema, storage: pa.Schema) -> None:
    """Raise when ``table`` does not have ``storage``'s columns or ``schema``'s key.

    Raises:
        SinkSchemaMismatch: columns, types or the recorded key differ.
    """
    expected = pa.schema(DeltaSchema.from_arrow(storage).to_arrow())
    actual = pa.schema(table.schema().to_arrow())
    name = str(schema.table_id)
    if not actual.equals(expected, check_metadata=False):
        raise SinkSchemaMismatch(
            f"Delta table {uri} has schema {actual} but {name} now needs {expected}, which is not "
            "an added column or a widened type (the only changes the sink follows under lenient; "
            "evolve also drops and renames, see docs/concepts/schema-evolution.md): migrate or drop the table "
            "(and restart the snapshot)",
            table=name, uri=uri,
        )
    recorded = table.metadata().configuration.get(PROP_KEY)
    if recorded is not None and json.loads(recorded) != list(schema.primary_key):
        raise SinkSchemaMismatch(
            f"Delta table {uri} is keyed on {recorded} but {name}'s primary key is now "
            f"{list(schema.primary_key)}; drop the table (and restart the snapshot)",
            table=name, uri=uri,
        )
