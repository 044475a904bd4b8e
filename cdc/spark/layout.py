"""How one Spark stream carries the change rows of one or several tables.

Columns are ``op``, ``before``, ``after``, ``source``, ``ts_ms`` (Debezium's envelope), plus
``staged`` when the job's sinks stage the rows on the executors (the job's case): every row is
then a *manifest* row whose ``staged`` column describes what a sink writer staged (a
:class:`sinks.base.Staged` as JSON), with null images. Without sinks (a user's
``spark.readStream.format("mysql-cdc")``) the rows themselves flow.

* One table: ``before`` and ``after`` are the table's row struct.
* Several tables: ``before`` and ``after`` are structs with one field per table, named
  ``db.table``; only the field of the row's own table (``source.db``/``source.table``) is set.
  Types survive end to end (no JSON), and a sink selects ``after.`db.table``` for each table.
  In SQL: ``SELECT after.`shop.orders`.id FROM changes WHERE source.table = 'orders'``.

The Arrow schema is exactly what Spark expects back from ``read()`` (Spark's own conversion of
the Spark schema), so batches can be handed over without conversion.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc.model.envelope import envelope_schema
from cdc.model.schema import TableId, TableSchema

MANIFEST_COLUMN = "staged"


class StreamLayout:
    """Maps per-table change rows to the stream's columns and back.

    Args:
        schemas: the captured tables (order does not matter; fields are sorted by name).
        manifests: the rows are manifests of staged rows (add the ``staged`` column).
    """

    def __init__(self, schemas: Sequence[TableSchema], manifests: bool = False) -> None:
        self.schemas = {s.table_id: s for s in sorted(schemas, key=lambda s: s.table_id)}
        if not self.schemas:
            raise ValueError("a stream needs at least one table")
        self.multi = len(self.schemas) > 1
        self.manifests = manifests
        self.arrow_schema = _spark_compatible(self._schema())

    def _schema(self) -> pa.Schema:
        first = envelope_schema(next(iter(self.schemas.values())))
        fields = list(first)
        if self.multi:
            image = pa.struct([pa.field(str(t), envelope_schema(s).field("after").type)
                               for t, s in self.schemas.items()])
            fields = [first.field("op"), pa.field("before", image), pa.field("after", image),
                      first.field("source"), first.field("ts_ms")]
        if self.manifests:
            fields.append(pa.field(MANIFEST_COLUMN, pa.string()))
        return pa.schema(fields)

    def spark_schema(self) -> Any:
        """The stream's schema as a Spark ``StructType``."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self.arrow_schema)

    def to_stream(self, table_id: TableId, changes: pa.Table) -> pa.Table:
        """One table's change rows (``cdc.model.envelope`` layout) in the stream's columns."""
        columns = [changes["op"], changes["before"], changes["after"], changes["source"], changes["ts_ms"]]
        if self.multi:
            columns[1:3] = [self._wrap(table_id, changes["before"]), self._wrap(table_id, changes["after"])]
        if self.manifests:
            columns.append(pa.nulls(changes.num_rows, pa.string()))
        return pa.Table.from_arrays(columns, names=list(self.arrow_schema.names)).cast(self.arrow_schema)

    def manifest(self, rows: pa.Table, staged: list[dict[str, Any]]) -> pa.Table:
        """One manifest row for what the sinks staged of ``rows`` (one table's change rows,
        envelope layout, in log order): their last row's op/source/ts_ms (the newest change, for
        the lag), null images, the JSON."""
        first = rows.slice(rows.num_rows - 1, 1)
        images = pa.nulls(1, self.arrow_schema.field("after").type)
        return pa.Table.from_arrays(
            [first["op"], images, images, first["source"], first["ts_ms"], pa.array([json.dumps(staged)])],
            names=list(self.arrow_schema.names)).cast(self.arrow_schema)

    def _wrap(self, table_id: TableId, images: pa.ChunkedArray) -> pa.Array:
        image = images.combine_chunks()
        n, target = len(image), self.arrow_schema.field("after").type
        children = [image.cast(target.field(i).type) if target.field(i).name == str(table_id)
                    else pa.nulls(n, target.field(i).type) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=pc.is_null(image))


def _spark_compatible(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema Spark produces for the Spark form of ``schema`` (what read() must yield)."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    return to_arrow_schema(from_arrow_schema(schema), timezone="UTC")
