"""Change batches built directly in Arrow for sink tests (no database), and a reference model.

The model is the definition the mirror must meet: a dict from key to row, where ``u``/``d``
remove the before image's key and ``c``/``u``/``r`` put the after image, event by event.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import random
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from binlog.mysql.types import mysql_column, mysql_table
from cdc.model.schema import TableId, TableSchema
from sinks.changes import change_schema, normalize
from sinks.delta.engines import DeltaTables
from sinks.delta.tables import read_table

UTC = dt.timezone.utc

# One column of every Arrow type the MySQL mapping produces (see cdc/schema.py:arrow_type).
VALUE_COLUMNS = (
    mysql_column("c_tiny", "tinyint", "tinyint(4)", True),  # int16
    mysql_column("c_int", "int", "int(11)", True),  # int32
    mysql_column("c_big", "bigint", "bigint(20)", True),  # int64
    mysql_column("c_ubig", "bigint", "bigint(20) unsigned", True),  # decimal(20,0)
    mysql_column("c_dec", "decimal", "decimal(38,10)", True, precision=38, scale=10),
    mysql_column("c_float", "float", "float", True),  # float32
    mysql_column("c_double", "double", "double", True),  # float64
    mysql_column("c_str", "varchar", "varchar(40)", True),
    mysql_column("c_bin", "varbinary", "varbinary(40)", True),
    mysql_column("c_bool", "tinyint", "tinyint(1)", True),  # int16 (a "boolean" column holds 0/1/...)
    mysql_column("c_date", "date", "date", True),  # date32
    mysql_column("c_dt", "datetime", "datetime(6)", True),  # timestamp[us]
    mysql_column("c_ts", "timestamp", "timestamp(6)", True),  # timestamp[us, UTC]
    mysql_column("c_time", "time", "time(6)", True),  # duration[us] -> int64 micros in Delta
)

SINGLE_KEY = mysql_table(
    TableId("shop", "items"),
    (mysql_column("id", "int", "int(11)", False), *VALUE_COLUMNS),
    ("id",),
)
COMPOSITE_KEY = mysql_table(
    TableId("shop", "order_lines"),
    (mysql_column("k1", "bigint", "bigint(20)", False), mysql_column("k2", "varchar", "varchar(8)", False),
     *VALUE_COLUMNS),
    ("k1", "k2"),
)
# Keys of the types whose Delta statistics are lossy: unsigned BIGINT above the int64 range and
# DATETIME with microseconds (statistics keep milliseconds).
WIDE_KEY = mysql_table(
    TableId("shop", "ledger"),
    (mysql_column("u", "bigint", "bigint(20) unsigned", False),
     mysql_column("t", "datetime", "datetime(6)", False), *VALUE_COLUMNS[:4]),
    ("u", "t"),
)

KEY_VALUES: dict[str, list[Any]] = {
    "id": [0, 1, 2, 3, 4, 5],
    "k1": [-1, 0, 2**40],
    "k2": ["a", "b", "é"],
    "u": [Decimal(0), Decimal(2**63 - 1), Decimal(2**63), Decimal(2**64 - 1)],
    "t": [dt.datetime(2020, 1, 1, 0, 0, 0, 1), dt.datetime(2020, 1, 1, 0, 0, 0, 999),
          dt.datetime(1000, 1, 1)],
}


def source(pos: int, *, snapshot: str = "false", row: int = 0) -> dict[str, Any]:
    """A Debezium MySQL source block at ``mysql-bin.000001:pos`` (row ``row``)."""
    return {
        "version": "0.1.0", "connector": "mysql", "name": "test", "ts_ms": 1_700_000_000_000,
        "snapshot": snapshot, "db": "shop", "table": "t", "server_id": 1, "gtid": None,
        "file": "mysql-bin.000001", "pos": pos, "row": row, "thread": None, "query": None,
    }


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
          pos: int) -> dict[str, Any]:
    """One change row."""
    return {"op": op, "before": before, "after": after,
            "source": source(pos, snapshot="true" if op == "r" else "false"),
            "ts_ms": 1_700_000_000_000 + pos}


def batch(schema: TableSchema, events: list[dict[str, Any]]) -> pa.Table:
    """A change batch of ``events`` for ``schema``'s table."""
    return pa.Table.from_pylist(events, schema=change_schema(schema))


def row(schema: TableSchema, key: tuple[Any, ...], **values: Any) -> dict[str, Any]:
    """A full row: ``key`` values for the key columns, ``values`` (default None) for the rest."""
    out: dict[str, Any] = dict.fromkeys(schema.column_names)
    out.update(zip(schema.primary_key, key, strict=True))
    out.update(values)
    return out


def key_of(schema: TableSchema, image: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(image[k] for k in schema.primary_key)


def apply(model: dict[tuple[Any, ...], dict[str, Any]], schema: TableSchema,
          events: list[dict[str, Any]]) -> None:
    """Apply ``events`` in order to ``model`` (key -> row)."""
    for e in events:
        if e["op"] in ("u", "d"):
            model.pop(key_of(schema, e["before"]), None)
        if e["op"] in ("c", "u", "r"):
            model[key_of(schema, e["after"])] = e["after"]


def freeze(value: Any) -> Any:
    """A hashable, storage-equal form: TIME as int64 micros, dicts as tuples, UTC-aware stays."""
    if isinstance(value, dict):
        return tuple((k, freeze(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dt.timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    return value


def frozen_rows(rows: list[dict[str, Any]]) -> Counter[Any]:
    """A multiset of frozen rows (order-free comparison)."""
    return Counter(freeze(r) for r in rows)


def model_rows(model: dict[tuple[Any, ...], dict[str, Any]]) -> Counter[Any]:
    return frozen_rows(list(model.values()))


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write_batch` did: False where a table already held the batch."""

    table: str
    batch_id: int
    mirror_written: bool
    changelog_written: bool
    events: int


def write_batch(tables: DeltaTables, schema: TableSchema, changes: pa.Table, batch_id: int, *,
                snapshot_append: bool = False) -> WriteResult:
    """One batch of one table into the mirror, then the changelog (the engines' two writes)."""
    mirror = tables.write_mirror(schema, changes, batch_id, snapshot_append=snapshot_append)
    changelog = tables.write_changelog(schema, changes, batch_id)
    return WriteResult(str(schema.table_id), batch_id, mirror, changelog, normalize(changes, schema).num_rows)


def duckdb_delta() -> Any:
    """A DuckDB connection with the delta extension loaded from its PyPI package (offline)."""
    import duckdb_extension_delta

    folder = os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions")
    (path,) = glob.glob(os.path.join(folder, "*", "delta.duckdb_extension"))
    con = duckdb.connect()
    con.execute(f"LOAD '{path}'")
    return con


def read_with_every_reader(uri: str, spark: Any | None = None) -> dict[str, list[dict[str, Any]]]:
    """The Delta table at ``uri`` as rows, read by delta-rs, DuckDB's delta extension, Polars and
    (given a session) Spark; each applies deletion vectors where the table has them."""
    seen = {
        "delta-rs": read_table(uri).to_pylist(),
        "duckdb": duckdb_delta().sql(f"SELECT * FROM delta_scan('{uri}')").to_arrow_table().to_pylist(),
        "polars": pl.read_delta(uri).to_dicts(),
    }
    if spark is not None:
        seen["spark"] = spark.read.format("delta").load(uri).toArrow().to_pylist()
    return seen


def random_batches(n: int, seed: int = 7) -> list[list[dict[str, Any]]]:
    """``n`` batches of c/u/d events over a few keys, each valid against the state before it."""
    rng, live, pos, out = random.Random(seed), {}, 0, []
    for _ in range(n):
        events = []
        for _ in range(rng.randint(1, 12)):
            pos += 1
            key = rng.randint(0, 15)
            image = row(SINGLE_KEY, (key,), c_int=rng.randint(0, 10**6), c_str=f"v{pos}")
            if key not in live:
                events.append(event("c", None, image, pos))
                live[key] = image
            elif rng.random() < 0.3:
                events.append(event("d", live.pop(key), None, pos))
            else:
                events.append(event("u", live[key], image, pos))
                live[key] = image
        out.append(events)
    return out


def mirror_rows(sink: DeltaTables, schema: TableSchema) -> Any:
    """The mirror's rows, comparable with :func:`model_rows`."""
    return frozen_rows(read_table(sink.config.uri(schema.table_id, "mirror")).to_pylist())  # type: ignore[arg-type]
