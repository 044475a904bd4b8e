"""A job's Pravega streams as tables for ``python -m cdc sql`` (the idea of Pravega's catalog for
Flink: a stream of Debezium JSON read as a table, typed by a schema kept elsewhere).

Each table of the job's schema history becomes a temporary view named after its stream
(``.`` and ``-`` as ``_``: stream ``cdc.shop.orders`` is view ``cdc_shop_orders``), one row per
event, in the layout of the Delta sink's changelog tables without ``source``::

    op              string   c, u, d or r
    before, after   struct   the row images, with the table's newest columns (MySQL TIME as int64 µs)
    ts_ms           int64    Debezium's ts_ms
    schema_version  int32    the schema history's version the event decoded with

An event decodes with the newest version of the table's schema history that fits it (a column
the event lacks is null). The stream is read when a query scans the view (an executor, a reader
group of its own from the stream's head, removed after), never before: ``SHOW TABLES`` lists the
views without reading anything. Events are read in segment order, so one key's in order; the
order across keys is not the source's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from cdc.model.debezium.codec import ChangeRecord, DebeziumFormatError, decode_value
from cdc.model.history import SchemaVersion
from cdc.model.schema import TableId
from sinks.base import SinkError
from sinks.changes import storage_schema
from sinks.pravega.client import stream_manager
from sinks.pravega.config import PravegaSinkConfig

ROWS_PER_BATCH = 5_000
_NOT_IDENT = re.compile(r"[^a-zA-Z0-9_]")


def view_name(stream: str) -> str:
    """The view of a stream: its name with every character but ``a-z A-Z 0-9 _`` as ``_``."""
    return _NOT_IDENT.sub("_", stream)


def event_schema(version: SchemaVersion) -> pa.Schema:
    """The view's columns for a table whose newest schema version is ``version`` (Arrow types;
    :func:`view_schema` is what Spark is given)."""
    row = pa.struct(list(version.schema.arrow_schema()))
    return pa.schema([("op", pa.string()), ("before", row), ("after", row), ("ts_ms", pa.int64()),
                      ("schema_version", pa.int32())])


def view_schema(version: SchemaVersion) -> pa.Schema:
    """:func:`event_schema` with storable types (durations as int64)."""
    return storage_schema(event_schema(version))


class PravegaTablesSource(DataSource):
    """``spark.read.format("spark-cdc-pravega-table").option("stream", name)``: one of a job's
    streams as a table; a subclass carries the settings (:func:`register_views`)."""

    config: ClassVar[PravegaSinkConfig | None] = None
    versions: ClassVar[dict[str, list[SchemaVersion]]] = {}  # stream -> its table's versions, oldest first

    @classmethod
    def name(cls) -> str:
        return "spark-cdc-pravega-table"

    def _versions(self) -> list[SchemaVersion]:
        return type(self).versions[self.options["stream"]]

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(view_schema(self._versions()[-1]))

    def reader(self, schema: Any) -> DataSourceReader:
        config = type(self).config
        assert config is not None, "use register_views() to make a source with its settings"
        return StreamTableReader(config, self.options["stream"], self._versions())


class StreamTableReader(DataSourceReader):
    """One task reads the whole stream (executor)."""

    def __init__(self, config: PravegaSinkConfig, stream: str, versions: list[SchemaVersion]) -> None:
        self.config, self.stream, self.versions = config, stream, versions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        out = view_schema(self.versions[-1])
        rows: list[dict[str, Any]] = []
        for value in read_stream(self.config, self.stream):
            rows.append(decode_event(value, self.versions, self.config))
            if len(rows) >= ROWS_PER_BATCH:
                yield from _batches(rows, self.versions[-1], out)
                rows = []
        if rows:
            yield from _batches(rows, self.versions[-1], out)


def _batches(rows: list[dict[str, Any]], newest: SchemaVersion, out: pa.Schema) -> list[pa.RecordBatch]:
    return pa.Table.from_pylist(rows, schema=event_schema(newest)).cast(out).to_batches()


def decode_event(value: bytes, versions: list[SchemaVersion], config: PravegaSinkConfig) -> dict[str, Any]:
    """One event as a view row: decoded with the newest version that fits it.

    Raises:
        DebeziumFormatError: no version of the table's history decodes it (names the field the
            newest version stumbled on).
    """
    first: DebeziumFormatError | None = None
    for version in reversed(versions):
        try:
            record = decode_value(value, version.schema, options=config.debezium_options())
        except DebeziumFormatError as exc:
            first = first or exc
            continue
        assert record is not None  # a Pravega event is never a tombstone
        return _row(record, version, versions[-1])
    assert first is not None
    raise first


def _row(record: ChangeRecord, version: SchemaVersion, newest: SchemaVersion) -> dict[str, Any]:
    columns = [c.name for c in newest.schema.columns]

    def image(row: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None else {c: row.get(c) for c in columns}

    return {"op": record.op, "before": image(record.before), "after": image(record.after),
            "ts_ms": record.ts_ms, "schema_version": version.version}


def read_stream(config: PravegaSinkConfig, stream: str) -> Iterator[bytes]:
    """Every event of ``stream`` now, by a reader group of its own from the stream's head (the
    first empty slice, after about a second without data, ends the read); the group is removed."""
    manager = stream_manager(config)
    if stream not in manager.list_stream(config.scope):
        raise SinkError(f"Pravega has no stream {config.scope}/{stream} (at controller_uri="
                        f"{config.controller_uri}): the job has not written that table yet, or the "
                        f"stream was deleted", stream=stream)
    group_name = f"spark-cdc-sql-{uuid.uuid4().hex[:12]}"
    group = manager.create_reader_group(group_name, config.scope, stream, False, None)
    reader = group.create_reader("sql")

    async def next_slice() -> list[bytes]:
        slice_ = await reader.get_segment_slice_async()
        events = [bytes(e.data()) for e in slice_]
        reader.release_segment(slice_)
        return events

    try:
        while events := asyncio.run(next_slice()):
            yield from events
    finally:
        with contextlib.suppress(Exception):
            reader.reader_offline()
        with contextlib.suppress(Exception):
            manager.delete_reader_group(group_name, config.scope)


def register_views(spark: Any, config: PravegaSinkConfig, versions: dict[TableId, list[SchemaVersion]]) -> list[str]:
    """A temporary view on ``spark`` for each table in ``versions`` (the job's schema history);
    their names, sorted. Pravega is not asked anything until a query scans a view (a query over
    the Delta tables alone runs while Pravega is away)."""
    by_stream = {config.topic(t): v for t, v in versions.items() if v}
    source: type[PravegaTablesSource] = type("BoundPravegaTablesSource", (PravegaTablesSource,),
                                             {"config": config, "versions": by_stream})
    spark.dataSource.register(source)
    names = []
    for stream in sorted(by_stream):
        spark.read.format(source.name()).option("stream", stream).load().createOrReplaceTempView(view_name(stream))
        names.append(view_name(stream))
    return names
