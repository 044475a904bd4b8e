"""Keep Delta tables up to date from a stream-store sink's Debezium topics (``python -m cdc follow-topic``).

What a consumer of the topics usually does next: one Delta table per source table, equal to the
source at the last committed batch of the stream store. A store's reader (:meth:`StreamFollower.stream`,
e.g. :class:`sinks.kafka.follow.KafkaFollower` with Spark's ``spark-sql-kafka`` source,
``read_committed``) gives a streaming DataFrame of ``topic``, ``offset`` and ``value``, where
``offset`` orders the messages of one key (the sink writes all changes of a key to one partition
in source order). Each micro-batch then runs, per table:

1. **executors** (``mapInArrow``): decode each value with :mod:`cdc.model.debezium.codec` (with or
   without the ``schema``/``payload`` wrapper; tombstones give no row): a delete gives its
   ``before`` image flagged deleted, any other change its ``after`` image, plus the offset;
2. **executors** (a window per primary key): keep the last change of each key in the batch;
3. **driver**: one Delta ``MERGE`` by primary key: delete a matched key whose last change is a
   delete, update a matched key, insert an unmatched one (unless deleted). A primary-key update
   arrives as a delete of the old key and a create of the new one, so it needs nothing more.

The MERGE carries the Delta app transaction ``(spark-cdc-follow/<checkpoint>, batch id)``: a batch
that Spark replays after a crash (committed to Delta, not yet to Spark's commit log) is skipped,
as the Delta sink does. The tables are laid out and created as the Delta sink's mirrors
(:mod:`sinks.delta.tables`: ``<target>/<db>/<table>``, MySQL ``TIME`` as int64 microseconds).

Runs on the driver (query set-up, MERGE) and the executors (decoding). The table schemas come
from the caller (the job's source); a table without a primary key is refused, because its
messages carry no key to merge on.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa

from cdc.model.debezium.codec import decode_value
from cdc.model.debezium.connect import DebeziumOptions
from cdc.model.errors import ConfigError
from cdc.model.schema import TableId, TableSchema
from sinks.changes import mirror_schema
from sinks.delta.tables import (
    commit_properties,
    ensure_table,
    is_committed,
    merge_predicate,
    quote,
    table_uri,
)
from sinks.stream.config import StreamSinkConfig

DELETED = "__spark_cdc_deleted"
OFFSET = "__spark_cdc_offset"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@dataclass(frozen=True)
class FollowedTable:
    """One topic and the Delta table it keeps up to date."""

    schema: TableSchema
    topic: str
    uri: str


def followed_tables(sink: StreamSinkConfig, schemas: dict[TableId, TableSchema],
                    target: str) -> list[FollowedTable]:
    """The topic and Delta table of each source table, in name order.

    Raises:
        ConfigError: a table has no primary key (its messages carry no key to merge on).
    """
    out = []
    for table_id in sorted(schemas):
        schema = schemas[table_id]
        if not schema.primary_key:
            raise ConfigError(f"table {table_id} has no primary key: follow-topic merges by key; "
                              f"leave it out of `source.tables` or give it a primary key",
                              table=str(table_id))
        out.append(FollowedTable(schema, sink.topic(table_id), table_uri(target, table_id, "mirror")))
    return out


def app_id(checkpoint: str) -> str:
    """The Delta app-transaction id of a follower: stable for one checkpoint folder."""
    digest = hashlib.sha1(os.path.abspath(checkpoint).encode()).hexdigest()[:16]
    return f"spark-cdc-follow/{digest}"


class StreamFollower(ABC):
    """A streaming query from a stream-store sink's topics into Delta tables (driver side).

    Args:
        spark: a session with the delta-spark jars (and the store's, if its reader needs any).
        sink: the job's stream-store sink section (topic names, value encodings, client settings).
        schemas: the tables to follow (from the job's source).
        target: the root of the Delta tables (``<target>/<db>/<table>``; a path or URI).
        checkpoint: Spark's checkpoint folder for this query.
        max_offsets_per_trigger: messages per micro-batch at most (None: all available).
    """

    def __init__(self, spark: Any, sink: StreamSinkConfig, schemas: dict[TableId, TableSchema],
                 target: str, checkpoint: str, max_offsets_per_trigger: int | None = None) -> None:
        self.spark = spark
        self.sink = sink
        self.tables = followed_tables(sink, schemas, target)
        self.checkpoint = checkpoint
        self.max_offsets = max_offsets_per_trigger
        self.app = app_id(checkpoint)

    @abstractmethod
    def stream(self) -> Any:
        """The store's streaming DataFrame of every followed topic from its start, committed
        messages only: columns ``topic`` (string), ``offset`` (long: orders one key's messages)
        and ``value`` (binary; null for a tombstone)."""

    def describe(self) -> str:
        """Where the follower reads (for logs; never a secret)."""
        return self.sink.type

    def start(self, once: bool = False, trigger_interval_s: float = 1.0) -> Any:
        """Create the Delta tables if missing and start the query (a ``StreamingQuery``).

        Args:
            once: read what the topics hold now, then stop (available-now).
            trigger_interval_s: else, start a micro-batch this often.
        """
        for t in self.tables:
            ensure_table(t.uri, {}, t.schema, "mirror", mirror_schema(t.schema))
        writer = self.stream().writeStream.foreachBatch(self.apply_batch)
        writer = writer.option("checkpointLocation", self.checkpoint)
        writer = (writer.trigger(availableNow=True) if once
                  else writer.trigger(processingTime=f"{trigger_interval_s} seconds"))
        return writer.start()

    def apply_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch (driver): merge one micro-batch into every followed table."""
        df.persist()
        try:
            for t in self.tables:
                self._merge(t, df.where(df.topic == t.topic), batch_id)
        finally:
            df.unpersist()

    def _merge(self, t: FollowedTable, messages: Any, batch_id: int) -> None:
        from deltalake import DeltaTable as RsTable
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        table = RsTable(t.uri)
        if is_committed(table, self.app, batch_id):
            return  # a replay of a batch this table already holds
        session = self.spark.newSession()  # the transaction confs stay on this session
        spark_schema = session.read.format("delta").load(t.uri).schema
        out_schema = StructType([*spark_schema.fields, StructField(DELETED, BooleanType(), False),
                                 StructField(OFFSET, LongType(), False)])
        decode = partial(decode_messages, schema=t.schema, options=self.sink.debezium_options(),
                         storage=mirror_schema(t.schema))
        rows = messages.mapInArrow(decode, out_schema)
        key = list(t.schema.primary_key)
        last = Window.partitionBy(*[F.col(quote(k)) for k in key]).orderBy(F.col(OFFSET).desc())
        source = rows.withColumn("__n", F.row_number().over(last)).where("__n = 1").drop("__n")
        values = {quote(c): f"s.{quote(c)}" for c in spark_schema.fieldNames()}
        delta_table = importlib.import_module("delta.tables").DeltaTable
        session.conf.set(_TXN_APP_ID, self.app)
        session.conf.set(_TXN_VERSION, str(batch_id))
        flag = f"s.{DELETED}"
        (delta_table.forPath(session, t.uri).alias("t")
         .merge(source.alias("s"), merge_predicate(tuple(key)))
         .whenMatchedDelete(condition=flag)
         .whenMatchedUpdate(condition=f"NOT {flag}", set=values)
         .whenNotMatchedInsert(condition=f"NOT {flag}", values=values)
         .execute())
        table.update_incremental()
        if not is_committed(table, self.app, batch_id):  # a MERGE that changed nothing
            table.create_write_transaction([], mode="append", schema=table.schema(),
                                           commit_properties=commit_properties(self.app, batch_id))


def decode_messages(batches: Iterator[pa.RecordBatch], schema: TableSchema, options: DebeziumOptions,
                    storage: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Executor (``mapInArrow``): messages (``offset``, ``value``) -> one row image per change.

    A delete gives its ``before`` image with ``__spark_cdc_deleted`` true; ``c``/``u``/``r`` their
    ``after`` image. Tombstones give nothing. Columns: the table's (storage types), then the flag
    and the message's offset.

    Raises:
        DebeziumFormatError: a value is not a Debezium event of ``schema``'s table (names the field).
    """
    row_schema = schema.arrow_schema()
    out_schema = pa.schema([*storage, pa.field(DELETED, pa.bool_(), False),
                            pa.field(OFFSET, pa.int64(), False)])
    for batch in batches:
        images: list[dict[str, Any]] = []
        deleted: list[bool] = []
        offsets: list[int] = []
        for offset, value in zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(),
                                 strict=True):
            record = decode_value(value, schema, options=options)
            if record is None:
                continue  # a tombstone
            image = record.before if record.op == "d" else record.after
            assert image is not None  # the decoder checks the images against the op
            images.append(image)
            deleted.append(record.op == "d")
            offsets.append(offset)
        table = pa.Table.from_pylist(images, schema=row_schema) if images else row_schema.empty_table()
        columns = [table.column(f.name).cast(f.type) for f in storage]
        columns += [pa.array(deleted, pa.bool_()), pa.array(offsets, pa.int64())]
        yield from pa.Table.from_arrays(columns, schema=out_schema).to_batches()
