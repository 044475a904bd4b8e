"""A job's data source as Spark ships it: a light class that carries the spec as bytes.

Spark pickles a registered data source class to each Python process that plans a stream:
``create_data_source`` (which asks for the schema), ``plan_data_source_read`` (which builds the
reader and pickles the function the executors run) and the streaming source runner (offsets and
partitions). A class that held the :class:`~cdc.spark.source.SourceSpec` itself made each of them
import the dialect, the sinks' writers, the config models and Arrow just to unpickle it: 1.4 CPU s
per process on this 2-core machine (0.35 s with PySpark alone), on the query start's critical path.

:class:`PackedSource` holds the stream's Spark schema and the spec pickled once on the driver, so
``create_data_source`` imports PySpark alone. Its stream reader, :class:`PackedStreamReader`,
holds the same bytes and unpickles them only where it is used: the streaming source runner builds
the spec's own reader at its first call (:func:`cdc.spark.source.stream_reader`), and a task
builds the spec's read function at its ``read`` (:func:`cdc.spark.source.task_reader`), while
``plan_data_source_read``, which only pickles the reader for the executors, imports nothing of
the project. That process runs alone between a batch's plan and its tasks: with the spec's reader
built there, a 300k-update catch-up took 4.20-4.37 s (MySQL) and 4.25-4.44 s (Postgres); with
this reader, 3.55-3.82 s and 3.76-4.03 s (benchmarks/tpcds_customer.py ``--catch-up-only``,
benchmarks/postgres_bench.py ``--catch-up-variants ""``, alternating runs).

This module imports nothing of the project: the pickle names the functions that build the
reader and the read function.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow


class PackedSource(DataSource):
    """``spark.readStream.format(<format_name>)`` of one job: a subclass per spec sets the three
    class attributes (:func:`packed_source`)."""

    format_name: ClassVar[str] = ""
    spark_schema: ClassVar[Any] = None  # the stream's StructType
    packed: ClassVar[bytes] = b""  # pickle of (reader factory, read function factory, spec)

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def schema(self) -> Any:
        return type(self).spark_schema

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return PackedStreamReader(type(self).packed)


class PackedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of a packed spec: the driver's calls go to the spec's own reader, built
    at the first of them; :meth:`read` runs the spec's read function, built in the task."""

    def __init__(self, packed: bytes) -> None:
        self.packed = packed
        self._reader: Any = None  # the spec's reader, once a driver call built it

    def __getstate__(self) -> dict[str, Any]:
        return {"packed": self.packed, "_reader": None}  # the driver's reader stays there

    def _driver(self) -> Any:
        if self._reader is None:
            factory, _, spec = pickle.loads(self.packed)
            self._reader = factory(spec)
        return self._reader

    def initialOffset(self) -> dict[str, Any]:
        offset: dict[str, Any] = self._driver().initialOffset()
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        limit: ReadLimit = self._driver().getDefaultReadLimit()
        return limit

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        offset: dict[str, Any] = self._driver().latestOffset(start, limit)
        return offset

    def prepareForTriggerAvailableNow(self) -> None:
        self._driver().prepareForTriggerAvailableNow()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        parts: list[InputPartition] = self._driver().partitions(start, end)
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        self._driver().commit(end)

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.stop()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        _, task_reader, spec = pickle.loads(self.packed)
        batches: Iterator[Any] = task_reader(spec)(partition)
        return batches


def packed_source(format_name: str, spark_schema: Any, factory: Callable[[Any], DataSourceStreamReader],
                  task_reader: Callable[[Any], Callable[[InputPartition], Iterator[Any]]],
                  spec: Any) -> type[PackedSource]:
    """A :class:`PackedSource` subclass for ``spec``: ``factory(spec)`` builds its stream reader
    for the driver's calls, ``task_reader(spec)`` the function a task reads a partition with (the
    stream reader's ``read``, without what only the driver needs).

    The spec is pickled with PySpark's cloudpickle, as Spark pickles the class: hooks and writers
    defined in a test or a notebook pickle by value."""
    from pyspark import cloudpickle

    return type(f"Packed{format_name.title().replace('-', '')}Source", (PackedSource,), {
        "__module__": __name__, "format_name": format_name, "spark_schema": spark_schema,
        "packed": cloudpickle.dumps((factory, task_reader, spec))})
