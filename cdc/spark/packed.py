"""A job's data source as Spark ships it: a light class that carries the spec as bytes.

Spark pickles a registered data source class to each Python process that plans a stream:
``create_data_source`` (which asks for the schema), ``plan_data_source_read`` (which builds the
reader the executors run) and the streaming source runner (offsets and partitions). A class that
held the :class:`~cdc.spark.source.SourceSpec` itself made each of them import the dialect, the
sinks' writers, the config models and Arrow just to unpickle it: 1.4 CPU s per process on this
2-core machine (0.35 s with PySpark alone), on the query start's critical path.

:class:`PackedSource` holds the stream's Spark schema and the spec pickled once on the driver,
so ``create_data_source`` imports PySpark alone; :meth:`PackedSource.streamReader` unpickles the
spec where a reader is built, and the reader (hence what the executors get) is the one the
spec's own data source makes. This module imports nothing of the project: the pickle names the
function that builds the reader (:func:`cdc.spark.source.stream_reader`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader


class PackedSource(DataSource):
    """``spark.readStream.format(<format_name>)`` of one job: a subclass per spec sets the three
    class attributes (:func:`packed_source`)."""

    format_name: ClassVar[str] = ""
    spark_schema: ClassVar[Any] = None  # the stream's StructType
    packed: ClassVar[bytes] = b""  # pickle of (reader factory, spec)

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def schema(self) -> Any:
        return type(self).spark_schema

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        factory, spec = pickle.loads(type(self).packed)
        reader: DataSourceStreamReader = factory(spec)
        return reader


def packed_source(format_name: str, spark_schema: Any, factory: Callable[[Any], DataSourceStreamReader],
                  spec: Any) -> type[PackedSource]:
    """A :class:`PackedSource` subclass for ``spec``: ``factory(spec)`` builds its stream reader.

    The spec is pickled with PySpark's cloudpickle, as Spark pickles the class: hooks and writers
    defined in a test or a notebook pickle by value."""
    from pyspark import cloudpickle

    return type(f"Packed{format_name.title().replace('-', '')}Source", (PackedSource,), {
        "__module__": __name__, "format_name": format_name, "spark_schema": spark_schema,
        "packed": cloudpickle.dumps((factory, spec))})
