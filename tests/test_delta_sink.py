"""Delta-specific behaviour of the sink: table metadata, statistics, the bulk snapshot path,
schema checks, configuration and engine choice. No database needed."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import pickle
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from change_batches import (
    COMPOSITE_KEY,
    SINGLE_KEY,
    UTC,
    VALUE_COLUMNS,
    WIDE_KEY,
    batch,
    event,
    freeze,
    frozen_rows,
    read_with_every_reader,
    row,
    write_batch,
)
from deltalake import DeltaTable, QueryBuilder
from pydantic import ValidationError

from binlog.mysql.types import mysql_column, mysql_table
from cdc.model.errors import ConfigError
from cdc.model.schema import TableId, TableSchema
from sinks.base import InvalidChangeBatch, SinkSchemaMismatch
from sinks.changes import DELETE_FLAG, mirror_changes, mirror_schema, normalize
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.files import (
    MIRROR_DICTIONARY_BYTES,
    StagedFile,
    commit_snapshot_files,
    file_stats,
    write_snapshot_files,
)
from sinks.delta.tables import TableKind, stats_columns

VALUES = {
    "c_tiny": -5, "c_int": 123456, "c_big": 2**40, "c_ubig": Decimal(2**64 - 1),
    "c_dec": Decimal("12.5"), "c_float": 0.5, "c_double": -1.25, "c_str": "x" * 40 + "z",
    "c_bin": b"\x01", "c_bool": 1, "c_date": dt.date(2001, 2, 3),
    "c_dt": dt.datetime(2020, 1, 1, 1, 2, 3, 456789),
    "c_ts": dt.datetime(2021, 6, 1, 0, 0, 0, 1, tzinfo=UTC), "c_time": dt.timedelta(seconds=-1),
}


@pytest.fixture
def config(tmp_path: Path) -> DeltaSinkConfig:
    return DeltaSinkConfig(path=str(tmp_path / "lake"), engine="delta-rs")


def table(config: DeltaSinkConfig, schema: TableSchema, kind: TableKind) -> DeltaTable:
    return DeltaTable(config.uri(schema.table_id, kind))


def snapshot_chunk(schema: TableSchema, ids: range, pos: int = 100) -> pa.Table:
    return batch(schema, [event("r", None, row(schema, (i,), **{**VALUES, "c_int": i}), pos) for i in ids])


# ---------------------------------------------------------------- table metadata

def test_tables_record_key_kind_and_safe_statistics_columns(config: DeltaSinkConfig) -> None:
    write_batch(DeltaTables(config, "q"),
        COMPOSITE_KEY, batch(COMPOSITE_KEY, [event("c", None, row(COMPOSITE_KEY, (1, "a")), 1)]), 0
    )
    mirror = table(config, COMPOSITE_KEY, "mirror")
    conf = mirror.metadata().configuration
    assert json.loads(conf["spark_cdc.primaryKey"]) == ["k1", "k2"]
    assert (conf["spark_cdc.kind"], conf["spark_cdc.sourceTable"]) == ("mirror", "shop.order_lines")
    stats = conf["delta.dataSkippingStatsColumns"].split(",")
    assert {"k1", "k2", "c_int", "c_str", "c_dt", "c_ts", "c_time", "c_date"} <= set(stats)
    # Lossy in delta-rs statistics (float64, int64 clamp) or not comparable: no min/max kept.
    assert not {"c_ubig", "c_dec", "c_float", "c_double", "c_bin"} & set(stats)
    assert "delta.appendOnly" not in conf

    changelog = table(config, COMPOSITE_KEY, "changelog")
    conf = changelog.metadata().configuration
    assert conf["delta.appendOnly"] == "true"
    assert "appendOnly" in (changelog.protocol().writer_features or [])
    assert "before.c_int" in conf["delta.dataSkippingStatsColumns"].split(",")
    assert "after.c_ubig" not in conf["delta.dataSkippingStatsColumns"].split(",")


def test_time_columns_are_int64_microseconds_tagged_in_the_schema(config: DeltaSinkConfig) -> None:
    write_batch(DeltaTables(config, "q"),
        SINGLE_KEY, batch(SINGLE_KEY, [event("c", None, row(SINGLE_KEY, (1,), **VALUES), 1)]), 0
    )
    field = next(f for f in table(config, SINGLE_KEY, "mirror").schema().fields
                 if f.name == "c_time")
    assert str(field.type) == 'PrimitiveType("long")'
    assert field.metadata["spark_cdc.arrow_type"] == "duration[us]"
    mirror = table(config, SINGLE_KEY, "mirror").to_pyarrow_table().to_pylist()
    assert mirror[0]["c_time"] == -1_000_000


def test_names_that_need_quoting_work_as_keys(config: DeltaSinkConfig) -> None:
    schema = mysql_table(TableId("db", "odd"), (mysql_column("my key", "int", "int", False),
                                                mysql_column("v.x", "int", "int", True)), ("my key",))
    sink = DeltaTables(config, "q")
    write_batch(sink, schema, batch(schema, [event("c", None, {"my key": 1, "v.x": 1}, 1)]), 0)
    write_batch(sink, schema, batch(schema, [
        event("u", {"my key": 1, "v.x": 1}, {"my key": 1, "v.x": 2}, 2)]), 1)
    assert table(config, schema, "mirror").to_pyarrow_table().to_pylist() == [{"my key": 1, "v.x": 2}]


# ---------------------------------------------------------------- lossy statistics

@pytest.mark.parametrize("snapshot_append", [True, False], ids=["append", "merge"])
def test_readers_find_keys_whose_statistics_delta_rs_would_clamp(
    config: DeltaSinkConfig, snapshot_append: bool
) -> None:
    """delta-rs clamps decimal(20,0) max statistics to the int64 range; pruning on them would
    hide rows above 2**63. The sink keeps no statistics for such columns."""
    s, top = WIDE_KEY, Decimal(2**64 - 1)
    t = dt.datetime(2020, 1, 1, 0, 0, 0, 999)
    events = [event("r", None, row(s, (top, t)), 1), event("r", None, row(s, (Decimal(1), t)), 1)]
    sink = DeltaTables(config, "q")
    write_batch(sink, s, batch(s, events), 0, snapshot_append=snapshot_append)
    write_batch(sink, s, batch(s, [event("u", row(s, (top, t)), row(s, (top, t), c_int=9), 5)]), 1)
    uri = config.uri(s.table_id, "mirror")
    assert pl.scan_delta(uri).filter(pl.col("u") == top).collect()["c_int"].to_list() == [9]
    found = DeltaTable(uri).to_pyarrow_dataset().to_table(
        filter=ds.field("u") == pa.scalar(top, pa.decimal128(20, 0)))
    assert found.num_rows == 1


# ---------------------------------------------------------------- append vs merge

def test_snapshot_append_appends_and_merge_merges(config: DeltaSinkConfig) -> None:
    sink = DeltaTables(config, "q")
    write_batch(sink, SINGLE_KEY, snapshot_chunk(SINGLE_KEY, range(3)), 0, snapshot_append=True)
    write_batch(sink, SINGLE_KEY, snapshot_chunk(SINGLE_KEY, range(3, 6)), 1)
    mixed = batch(SINGLE_KEY, [event("r", None, row(SINGLE_KEY, (7,)), 5),
                               event("c", None, row(SINGLE_KEY, (8,)), 6)])
    write_batch(sink, SINGLE_KEY, mixed, 2, snapshot_append=True)  # not all r: merged
    operations = [h["operation"] for h in table(config, SINGLE_KEY, "mirror").history()]
    assert operations == ["MERGE", "MERGE", "WRITE", "CREATE TABLE"]
    assert table(config, SINGLE_KEY, "mirror").count() == 8


# ---------------------------------------------------------------- bulk snapshot files

def _staged_chunks(config: DeltaSinkConfig, schema: TableSchema) -> list[StagedFile]:
    """What executors return for two chunks, shipped back to the driver by pickling."""
    staged = write_snapshot_files(config, schema, snapshot_chunk(schema, range(0, 50)))
    staged += write_snapshot_files(config, schema, snapshot_chunk(schema, range(50, 120)))
    result: list[StagedFile] = pickle.loads(pickle.dumps(staged))
    return result


def _parquet_files(config: DeltaSinkConfig, schema: TableSchema, kind: TableKind) -> set[str]:
    root = config.uri(schema.table_id, kind).removeprefix("file://")
    return {f for f in os.listdir(root) if f.endswith(".parquet")}


def test_staged_files_stay_invisible_until_one_commit_per_table(config: DeltaSinkConfig) -> None:
    s = SINGLE_KEY
    sink = DeltaTables(config, "q")
    write_batch(sink, s, batch(s, [event("c", None, row(s, (1000,)), 1)]), 0)
    before = {k: table(config, s, k).version() for k in ("mirror", "changelog")}

    crashed = _staged_chunks(config, s)  # the driver dies before committing these
    assert {f.path for f in crashed if f.kind == "mirror"} <= _parquet_files(config, s, "mirror")
    assert table(config, s, "mirror").count() == 1
    assert len(table(config, s, "changelog").to_pyarrow_table()) == 1

    replayed = _staged_chunks(config, s)  # the batch runs again after the restart
    assert commit_snapshot_files(config, s, replayed, "q", 1) == {"mirror": True, "changelog": True}
    for kind in ("mirror", "changelog"):
        assert table(config, s, kind).version() == before[kind] + 1
    mirror = table(config, s, "mirror").to_pyarrow_table()
    assert sorted(mirror["id"].to_pylist()) == [*range(120), 1000]
    assert len(table(config, s, "changelog").to_pyarrow_table()) == 121
    for kind in ("mirror", "changelog"):
        seen = read_with_every_reader(config.uri(s.table_id, kind))  # type: ignore[arg-type]
        assert frozen_rows(seen["duckdb"]) == frozen_rows(seen["polars"]) \
            == frozen_rows(seen["delta-rs"])

    again = _staged_chunks(config, s)  # and once more: already committed, nothing changes
    assert commit_snapshot_files(config, s, again, "q", 1) == {"mirror": False, "changelog": False}
    assert table(config, s, "mirror").count() == 121
    live = {Path(u).name for u in table(config, s, "mirror").file_uris()}
    orphans = {f.path for f in crashed + again if f.kind == "mirror"}
    assert orphans <= _parquet_files(config, s, "mirror") and not orphans & live


def test_snapshot_files_and_batch_writes_share_a_batch_id(config: DeltaSinkConfig) -> None:
    s = SINGLE_KEY
    commit_snapshot_files(config, s, _staged_chunks(config, s), "q", 4)
    write_batch(DeltaTables(config, "q"), s, batch(s, [event("c", None, row(s, (500,)), 9)]), 4)
    assert table(config, s, "mirror").count() == 121


def test_bulk_path_on_a_file_uri(tmp_path: Path) -> None:
    config = DeltaSinkConfig(path=f"file://{tmp_path}/lake", engine="delta-rs")
    commit_snapshot_files(config, SINGLE_KEY, _staged_chunks(config, SINGLE_KEY), "q", 0)
    assert table(config, SINGLE_KEY, "mirror").count() == 120


def test_staged_file_statistics_are_true_bounds(config: DeltaSinkConfig) -> None:
    """Filters on each column's min and max find the rows through delta-rs's and Polars'
    statistics-based pruning, and numRecords/nullCount agree with delta-rs's own writer."""
    s = SINGLE_KEY
    low = row(s, (1,), **{**VALUES, "c_int": 1, "c_str": "a",
                          "c_dt": dt.datetime(1000, 1, 1, 0, 0, 0, 1)})
    high = row(s, (2,), **VALUES)
    chunk = batch(s, [event("r", None, r, 7) for r in (low, high, row(s, (3,)))])
    commit_snapshot_files(config, s, write_snapshot_files(config, s, chunk), "q", 0)
    write_batch(DeltaTables(config, "q"),   # the same rows through delta-rs's writer, for reference
        mysql_table(TableId("shop", "ref"), s.columns, s.primary_key), chunk, 0,
        snapshot_append=True)
    ours = json.loads(_stats(config, s.table_id))
    theirs = json.loads(_stats(config, TableId("shop", "ref")))
    assert ours["numRecords"] == theirs["numRecords"] == 3
    assert ours["nullCount"] == theirs["nullCount"]
    assert ours["minValues"]["c_int"] == 1 and ours["maxValues"]["c_int"] == 123456
    assert ours["maxValues"]["c_str"] == "x" * 31 + "y"  # 41 characters: a raised 32-prefix
    uri = config.uri(s.table_id, "mirror")
    storage = mirror_schema(s)
    for column in stats_columns(storage):
        for image in (low, high):
            value = pa.scalar(freeze(image[column]), storage.field(column).type)
            hits = DeltaTable(uri).to_pyarrow_dataset().to_table(filter=ds.field(column) == value)
            assert hits.num_rows >= 1, f"{column} = {value} pruned away"
            frame = pl.scan_delta(uri).filter(pl.col(column) == pl.lit(value.as_py())).collect()
            assert frame.height >= 1, f"polars prunes {column} = {value}"
    qb = QueryBuilder().register("m", DeltaTable(uri))
    result = qb.execute("SELECT count(*) AS n FROM m WHERE c_dt = '2020-01-01T01:02:03.456789'")
    assert pa.table(result.read_all())["n"][0].as_py() == 1


def test_mirror_files_keep_small_dictionaries_and_read_back(config: DeltaSinkConfig) -> None:
    """A high-cardinality column of a snapshot file falls back from dictionary to plain encoding
    at MIRROR_DICTIONARY_BYTES (pyarrow's default keeps building to 1 MiB, a third slower for
    TPC-DS customer), a low-cardinality one stays dictionary-encoded, and every reader reads
    the rows."""
    s = SINGLE_KEY
    n = 20_000
    chunk = batch(s, [event("r", None, row(s, (i,), **{**VALUES, "c_int": i, "c_str": _digest(i)}), 7)
                      for i in range(n)])
    commit_snapshot_files(config, s, write_snapshot_files(config, s, chunk), "q", 0)
    uri = config.uri(s.table_id, "mirror")
    (name,) = [f for f in os.listdir(uri) if f.endswith(".parquet")]
    meta = pq.ParquetFile(os.path.join(uri, name)).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}

    def dictionary_bytes(column: str) -> int:
        c = columns[column]
        return int(c.data_page_offset - c.dictionary_page_offset)

    assert all(c.has_dictionary_page for c in columns.values())
    assert dictionary_bytes("c_str") <= MIRROR_DICTIONARY_BYTES + 1024 < columns["c_str"].total_compressed_size / 4
    assert dictionary_bytes("c_date") < 1024
    for reader, rows in read_with_every_reader(uri).items():
        assert len(rows) == n, reader
        assert sorted(r["c_str"] for r in rows) == sorted(_digest(i) for i in range(n)), reader


def _digest(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _stats(config: DeltaSinkConfig, table_id: TableId) -> str:
    """The statistics of the first file added to ``table_id``'s mirror."""
    log = Path(config.uri(table_id, "mirror")) / "_delta_log"
    for name in sorted(os.listdir(log)):
        for line in (log / name).read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                stats: str = action["add"]["stats"]
                return stats
    raise AssertionError("no add action")


def test_bulk_path_refuses_non_snapshot_rows_and_other_tables(config: DeltaSinkConfig) -> None:
    with pytest.raises(InvalidChangeBatch, match="op 'r'"):
        write_snapshot_files(config, SINGLE_KEY, batch(SINGLE_KEY, [
            event("c", None, row(SINGLE_KEY, (1,)), 1)]))
    staged = _staged_chunks(config, SINGLE_KEY)
    with pytest.raises(ValueError, match=r"belongs to shop\.items"):
        commit_snapshot_files(config, COMPOSITE_KEY, staged, "q", 0)
    assert write_snapshot_files(config, SINGLE_KEY, batch(SINGLE_KEY, [])) == []


# ---------------------------------------------------------------- schema checks

def test_a_changed_schema_or_key_is_refused_with_the_fix(config: DeltaSinkConfig) -> None:
    s = SINGLE_KEY
    write_batch(DeltaTables(config, "q"), s, batch(s, [event("c", None, row(s, (1,)), 1)]), 0)
    wider = mysql_table(s.table_id, (*s.columns, mysql_column("extra", "int", "int", True)), ("id",))
    write_batch(DeltaTables(config, "q"), wider, batch(wider, [event("c", None, row(wider, (2,)), 2)]), 1)
    assert "extra" in table(config, s, "mirror").schema().to_arrow().names  # an added column evolves
    narrower = mysql_table(s.table_id, s.columns[:-1], ("id",))  # a column fewer: not a growth
    with pytest.raises(SinkSchemaMismatch, match="not an added column or a widened type") as info:
        write_batch(DeltaTables(config, "q"), narrower, batch(narrower, [
            event("c", None, row(narrower, (3,)), 3)]), 2)
    assert pickle.loads(pickle.dumps(info.value)).context["table"] == "shop.items"
    rekeyed = mysql_table(s.table_id, wider.columns, ("id", "c_int"))
    with pytest.raises(SinkSchemaMismatch, match="keyed on"):
        write_batch(DeltaTables(config, "q"), rekeyed, batch(rekeyed, [
            event("c", None, row(rekeyed, (2, 3)), 2)]), 1)


@pytest.mark.parametrize(("events", "message"), [
    ([{"op": "x", "before": None, "after": {"id": 1}}], "outside c/u/d/r"),
    ([{"op": "u", "before": None, "after": {"id": 1}}], "'before' image"),
    ([{"op": "c", "before": None, "after": None}], "'after' image"),
])
def test_invalid_batches_are_refused(
    config: DeltaSinkConfig, events: list[dict[str, Any]], message: str
) -> None:
    full = [{**event("c", None, None, 1), **e} for e in events]
    with pytest.raises(InvalidChangeBatch, match=message):
        write_batch(DeltaTables(config, "q"), SINGLE_KEY, batch(SINGLE_KEY, full), 0)


def test_batches_with_wrong_columns_are_refused(config: DeltaSinkConfig) -> None:
    changes = batch(SINGLE_KEY, [event("c", None, row(SINGLE_KEY, (1,)), 1)])
    with pytest.raises(InvalidChangeBatch, match="lacks columns"):
        write_batch(DeltaTables(config, "q"), SINGLE_KEY, changes.drop_columns(["source"]), 0)
    with pytest.raises(InvalidChangeBatch, match="does not match"):
        write_batch(DeltaTables(config, "q"), COMPOSITE_KEY, changes, 0)
    reserved = mysql_table(TableId("db", "r"), (mysql_column(DELETE_FLAG, "int", "int", False),),
                           (DELETE_FLAG,))
    with pytest.raises(InvalidChangeBatch, match="reserved"):
        write_batch(DeltaTables(config, "q"), reserved, batch(reserved, []), 0)


# ---------------------------------------------------------------- the reduction

def test_mirror_changes_keeps_the_last_effect_per_composite_key() -> None:
    s = COMPOSITE_KEY
    a, b = row(s, (1, "a"), c_int=1), row(s, (1, "b"), c_int=2)
    events = [
        event("c", None, a, 1), event("u", a, row(s, (1, "a"), c_int=5), 2),
        event("u", row(s, (1, "a"), c_int=5), b, 3),  # key (1,a) -> (1,b)
        event("d", b, None, 4), event("c", None, row(s, (1, "b"), c_int=7), 5),
        event("c", None, row(s, (2, "a"), c_int=8), 6), event("d", row(s, (2, "a")), None, 7),
    ]
    reduced = mirror_changes(normalize(batch(s, events), s), s.primary_key, mirror_schema(s))
    got = {(r["k1"], r["k2"]): (r[DELETE_FLAG], r["c_int"]) for r in reduced.to_pylist()}
    assert got == {(1, "a"): (True, 5), (1, "b"): (False, 7), (2, "a"): (True, None)}


# ---------------------------------------------------------------- configuration and engines

def test_config_validates_and_hides_storage_options() -> None:
    config = DeltaSinkConfig(path="s3://bucket/cdc", storage_options={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    assert "s3cr3t" not in repr(config) and config.engine == "delta-rs"
    assert pickle.loads(pickle.dumps(config)) == config  # shipped to executors
    assert config.uri(TableId("db", "t"), "changelog") == "s3://bucket/cdc/db/t_changelog"
    with pytest.raises(ValidationError, match="extra"):
        DeltaSinkConfig(path="/x", mode="merge")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match=r"sink\.path"):
        DeltaSinkConfig(path=" ")
    with pytest.raises(ValidationError):
        DeltaSinkConfig(path="/x", engine="spark")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="query id"):
        DeltaTables(DeltaSinkConfig(path="/x"), "")


_WITHOUT_DELTA = """
import sys
from pyspark.sql import SparkSession
from cdc.model.errors import ConfigError
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.spark_engine import DELTA_CLASS, jvm_has_class

spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate())
auto = DeltaSinkConfig(path=sys.argv[1], engine="auto")
assert DeltaTables(auto, "q", spark=spark).engine_name == "delta-rs"
assert DeltaTables(auto, "q").engine_name == "delta-rs"  # the active session, same answer
try:
    DeltaTables(auto.model_copy(update={"engine": "delta-spark"}), "q", spark=spark)
    raise SystemExit("delta-spark was accepted without its classes")
except ConfigError as exc:
    assert exc.context["key"] == "sink.engine", exc.context
    assert "delta-spark" in str(exc)
assert not jvm_has_class(spark, DELTA_CLASS)
assert jvm_has_class(spark, "org.apache.spark.sql.SparkSession")
print("ok")
"""


def test_engine_auto_falls_back_to_delta_rs_without_delta_classes(tmp_path: Path) -> None:
    # A JVM started without the project's jars keeps that classpath for the rest of its process,
    # so this session lives in a process of its own.
    done = subprocess.run([sys.executable, "-c", _WITHOUT_DELTA, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parents[1])
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_long_string_statistics_are_true_bounds() -> None:
    top = "\U0010ffff"
    rows = pa.table({"s": ["b" * 40, "a" * 33, None],
                     "t": [top * 40, top * 40, None], "u": ["x" * 31 + "\ud7ff" + "z", "x", "x"]})
    stats = json.loads(file_stats(rows))
    assert stats["minValues"]["s"] == "a" * 32 and stats["maxValues"]["s"] == "b" * 31 + "c"
    assert "t" not in stats["minValues"] and "t" not in stats["maxValues"]  # no bound exists
    assert stats["maxValues"]["u"] == "x" * 31 + "\ue000"  # skips the surrogate range
    assert stats["nullCount"] == {"s": 1, "t": 1, "u": 0}


def test_value_columns_cover_every_mapped_type() -> None:
    types = {str(c.arrow_type()) for c in VALUE_COLUMNS}
    assert types == {"int16", "int32", "int64", "decimal128(20, 0)", "decimal128(38, 10)", "float",
                     "double", "string", "binary", "date32[day]", "timestamp[us]",
                     "timestamp[us, tz=UTC]", "duration[us]"}


def test_sink_modules_import_no_database_driver() -> None:
    code = ("import sys, sinks.delta.sink, sinks.delta.files, sinks.delta.spark_engine; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pymysql', 'pymysqlreplication', 'psycopg', 'MySQLdb', 'mysql')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
