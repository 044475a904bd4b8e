"""The Delta tables' driver-side writes (mirror MERGE, changelog appends), checked against a
reference model, on both engines: delta-rs, and delta-spark (skipped when its jars are not on
the classpath). No database needed. The Sink contract itself is tests/test_sink_contract.py.

* random sequences of c/u/d/r batches over single, composite and "lossy statistics" keys leave
  the mirror equal to a dict model, batch after batch;
* the changelog holds each event exactly once;
* replaying a batch (again, after a restart, an older one, or after a crash between the mirror's
  and the changelog's commits) changes nothing;
* the tables open with delta-rs, DuckDB and Polars, and all three read the same rows.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Callable, Iterator
from decimal import Decimal
from itertools import product
from typing import Any

import pyarrow as pa
import pytest
from change_batches import (
    COMPOSITE_KEY,
    KEY_VALUES,
    SINGLE_KEY,
    UTC,
    WIDE_KEY,
    apply,
    batch,
    event,
    frozen_rows,
    key_of,
    model_rows,
    read_with_every_reader,
    row,
    write_batch,
)
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc.model.schema import TableSchema
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.engines import DeltaTables
from sinks.delta.tables import TableKind, read_table

SinkFactory = Callable[[str, str], Any]


def _delta_rs(root: str, query_id: str) -> DeltaTables:
    return DeltaTables(DeltaSinkConfig(path=root, engine="delta-rs"), query_id)


def _delta_spark(root: str, query_id: str) -> DeltaTables:
    from spark_session import run_session

    spark = run_session()  # the session of the test run
    return DeltaTables(DeltaSinkConfig(path=root, engine="delta-spark"), query_id, spark=spark)


SINKS = [
    pytest.param(_delta_rs, id="delta-rs"),
    pytest.param(_delta_spark, id="delta-spark"),
]


@pytest.fixture(params=SINKS)
def make_sink(request: pytest.FixtureRequest) -> SinkFactory:
    """A factory ``(root, query_id) -> sink``: a new sink object is a restarted job."""
    factory: SinkFactory = request.param
    return factory


@pytest.fixture
def root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="sink-contract-") as d:
        yield d


KINDS: tuple[TableKind, ...] = ("mirror", "changelog")


def read(root: str, schema: TableSchema, kind: TableKind) -> list[dict[str, Any]]:
    uri = DeltaSinkConfig(path=root).uri(schema.table_id, kind)
    rows: list[dict[str, Any]] = read_table(uri).to_pylist()
    return rows


def versions(root: str, schema: TableSchema) -> tuple[int | None, ...]:
    out = []
    for kind in KINDS:
        uri = DeltaSinkConfig(path=root).uri(schema.table_id, kind)
        out.append(DeltaTable(uri).version() if DeltaTable.is_deltatable(uri) else None)
    return tuple(out)


# ---------------------------------------------------------------- random sequences vs the model

def _values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_integer(t):
        bits = t.bit_width
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if pa.types.is_decimal(t):
        if t.scale == 0:
            return st.integers(0, 2**64 - 1).map(Decimal)
        bound, scale = 10**t.precision - 1, t.scale
        return st.integers(-bound, bound).map(lambda i: Decimal(f"{i}e-{scale}"))
    if pa.types.is_float32(t):
        return st.floats(width=32, allow_nan=False)
    if pa.types.is_float64(t):
        return st.floats(allow_nan=False)
    if pa.types.is_string(t):
        return st.text(max_size=12)
    if pa.types.is_binary(t):
        return st.binary(max_size=12)
    if pa.types.is_date32(t):
        return st.dates()
    if pa.types.is_timestamp(t) and t.tz:
        return st.datetimes(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7),
                            timezones=st.just(UTC))
    if pa.types.is_timestamp(t):
        return st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59))
    if pa.types.is_duration(t):
        limit = dt.timedelta(hours=838, minutes=59, seconds=59)
        return st.timedeltas(-limit, limit)
    raise AssertionError(f"no strategy for {t}")


def _row_values(schema: TableSchema) -> st.SearchStrategy[dict[str, Any]]:
    arrow = schema.arrow_schema()
    return st.fixed_dictionaries({
        f.name: st.none() | _values(f.type) for f in arrow if f.name not in schema.primary_key
    })


def _draw_events(data: st.DataObject, schema: TableSchema,
                 state: dict[tuple[Any, ...], dict[str, Any]], pos: int) -> list[dict[str, Any]]:
    """A valid batch: r only for keys absent from the mirror, and never with c/u/d on one key."""
    keys = list(product(*(KEY_VALUES[k] for k in schema.primary_key)))
    values = _row_values(schema)
    state = dict(state)
    snapshot_only = data.draw(st.booleans(), label="snapshot_only")
    r_keys: set[tuple[Any, ...]] = set()
    cud_keys: set[tuple[Any, ...]] = set()
    events: list[dict[str, Any]] = []
    for _ in range(data.draw(st.integers(0, 7), label="events")):
        present = [k for k in state if k not in r_keys]
        absent = [k for k in keys if k not in state and k not in r_keys]
        fresh = [k for k in absent if k not in cud_keys]
        kinds = ["r"] if fresh else []
        if not snapshot_only:
            kinds += (["c"] if absent else []) + (["u", "d"] if present else [])
            kinds += ["pk"] if present and absent else []
        if not kinds:
            break
        kind = data.draw(st.sampled_from(kinds), label="kind")
        pool = fresh if kind == "r" else absent if kind == "c" else present
        key = data.draw(st.sampled_from(pool), label="key")
        new_key = data.draw(st.sampled_from(absent), label="new_key") if kind == "pk" else key
        after = row(schema, new_key, **data.draw(values, label="values"))
        op = {"r": "r", "c": "c", "u": "u", "pk": "u", "d": "d"}[kind]
        e = event(op, state.get(key) if op in ("u", "d") else None,
                  None if op == "d" else after, pos + len(events))
        events.append(e)
        (r_keys if op == "r" else cud_keys).update({key, new_key})
        apply(state, schema, [e])
    return events


@pytest.mark.parametrize("schema", [SINGLE_KEY, COMPOSITE_KEY, WIDE_KEY],
                         ids=["single-key", "composite-key", "wide-key"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_batches_match_model_delta_rs(schema: TableSchema, data: st.DataObject) -> None:
    random_batches_match_model(_delta_rs, schema, data)


# delta-spark runs each MERGE as a Spark job (about a second here): fewer examples keep it short, and
# only the wide key, the shape tests/test_sink_contract.py does not draw (its delta-spark kind draws
# single and composite keys through the whole sink: staging, commits, faults, replays).
@pytest.mark.slow
@pytest.mark.parametrize("schema", [WIDE_KEY], ids=["wide-key"])
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_batches_match_model_delta_spark(schema: TableSchema, data: st.DataObject) -> None:
    random_batches_match_model(_delta_spark, schema, data)


def random_batches_match_model(make_sink: SinkFactory, schema: TableSchema, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(prefix="sink-model-") as root:
        sink = make_sink(root, "query-1")
        model: dict[tuple[Any, ...], dict[str, Any]] = {}
        sent: list[dict[str, Any]] = []
        batches: list[pa.Table] = []
        for batch_id in range(data.draw(st.integers(1, 4), label="batches")):
            events = _draw_events(data, schema, model, pos=1000 * (batch_id + 1))
            changes = batch(schema, events)
            pure_r = bool(events) and all(e["op"] == "r" for e in events)
            append = pure_r and data.draw(st.booleans(), label="append")
            crash = data.draw(st.sampled_from(["none", "after-mirror", "after-changelog"]),
                              label="crash")
            if crash == "after-mirror":
                make_sink(root, "query-1").write_mirror(schema, changes, batch_id,
                                                        snapshot_append=append)
            elif crash == "after-changelog":
                make_sink(root, "query-1").write_changelog(schema, changes, batch_id)
            result = write_batch(sink, schema, changes, batch_id, snapshot_append=append)
            if events:
                assert result.mirror_written == (crash != "after-mirror")
                assert result.changelog_written == (crash != "after-changelog")
            apply(model, schema, events)
            sent += events
            batches.append(changes)
            _replay(data, make_sink, root, schema, batches)
            if sent:
                assert frozen_rows(read(root, schema, "mirror")) == model_rows(model)
        if sent:
            changelog = read(root, schema, "changelog")
            assert {r.pop("schema_version") for r in changelog} <= {0}  # no DDL: version 0
            assert frozen_rows(changelog) == frozen_rows(sent)


def _replay(data: st.DataObject, make_sink: SinkFactory, root: str, schema: TableSchema,
            batches: list[pa.Table]) -> None:
    """Replay the last or an older batch, on the same or a restarted sink: nothing may change."""
    which = data.draw(st.sampled_from(["none", "last", "older"]), label="replay")
    if which == "none" or not any(b.num_rows for b in batches):
        return
    batch_id = len(batches) - 1 if which == "last" else data.draw(
        st.integers(0, len(batches) - 1), label="older_id")
    before = versions(root, schema)
    result = write_batch(make_sink(root, "query-1"), schema, batches[batch_id], batch_id)
    assert (result.mirror_written, result.changelog_written) == (False, False)
    assert versions(root, schema) == before


# ---------------------------------------------------------------- fixed cases

def test_primary_key_update_and_delete_reinsert_in_one_batch(
    make_sink: SinkFactory, root: str
) -> None:
    s = COMPOSITE_KEY
    a, b, c = row(s, (0, "a"), c_int=1), row(s, (0, "b"), c_int=2), row(s, (2**40, "a"), c_int=3)
    sink = make_sink(root, "q")
    write_batch(sink, s, batch(s, [event("r", None, a, 1), event("r", None, b, 1)]), 0,
                     snapshot_append=True)
    moved = row(s, (-1, "é"), c_int=1)
    b2 = row(s, (0, "b"), c_int=20)
    events = [
        event("u", a, moved, 10),  # key change: (0,a) -> (-1,é)
        event("d", b, None, 11),  # delete ...
        event("c", None, b2, 12),  # ... then re-insert the same key
        event("c", None, c, 13),
        event("u", c, row(s, (0, "a"), c_int=4), 14),  # a new row takes the freed old key
    ]
    write_batch(sink, s, batch(s, events), 1)
    mirror = {key_of(s, r): r["c_int"] for r in read(root, s, "mirror")}
    assert mirror == {(-1, "é"): 1, (0, "b"): 20, (0, "a"): 4}
    assert len(read(root, s, "changelog")) == 7


def test_merge_applies_snapshot_rows_over_existing_keys(make_sink: SinkFactory, root: str) -> None:
    s = SINGLE_KEY
    sink = make_sink(root, "q")
    write_batch(sink, s, batch(s, [event("c", None, row(s, (1,), c_str="old"), 5)]), 0)
    write_batch(sink, s, batch(s, [event("r", None, row(s, (1,), c_str="new"), 9),
                                  event("r", None, row(s, (2,), c_str="two"), 9)]), 1)
    assert sorted((r["id"], r["c_str"]) for r in read(root, s, "mirror")) == [(1, "new"), (2, "two")]


def test_a_batch_that_cancels_out_is_still_recorded(make_sink: SinkFactory, root: str) -> None:
    """Insert then delete of one key changes no mirror row (delta-rs then makes no MERGE commit),
    yet a replay must still be recognised."""
    s = SINGLE_KEY
    changes = batch(s, [event("c", None, row(s, (1,)), 1), event("d", row(s, (1,)), None, 2)])
    first = write_batch(make_sink(root, "q"), s, changes, 0)
    assert (first.mirror_written, first.changelog_written) == (True, True)
    before = versions(root, s)
    again = write_batch(make_sink(root, "q"), s, changes, 0)
    assert (again.mirror_written, again.changelog_written) == (False, False)
    assert versions(root, s) == before
    assert read(root, s, "mirror") == [] and len(read(root, s, "changelog")) == 2


def test_empty_batch_writes_nothing(make_sink: SinkFactory, root: str) -> None:
    result = write_batch(make_sink(root, "q"), SINGLE_KEY, batch(SINGLE_KEY, []), 0)
    assert (result.mirror_written, result.changelog_written, result.events) == (False, False, 0)
    assert versions(root, SINGLE_KEY) == (None, None)


def test_batches_of_another_query_id_are_not_skipped(make_sink: SinkFactory, root: str) -> None:
    s = SINGLE_KEY
    changes = batch(s, [event("c", None, row(s, (1,)), 5)])
    write_batch(make_sink(root, "first-checkpoint"), s, changes, 7)
    result = write_batch(make_sink(root, "second-checkpoint"), s, changes, 0)
    assert result.changelog_written
    assert len(read(root, s, "changelog")) == 2


# ---------------------------------------------------------------- readers agree

EXTREMES = {
    "c_tiny": -32768, "c_int": 2**31 - 1, "c_big": -(2**63), "c_ubig": Decimal(2**64 - 1),
    "c_dec": Decimal("-9999999999999999999999999999.9999999999"), "c_float": 3.4028234663852886e38,
    "c_double": -1.7976931348623157e308, "c_str": "naïve 😀 \u00a0", "c_bin": b"\x00\xff",
    "c_bool": 0, "c_date": dt.date(1000, 1, 1), "c_dt": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "c_ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
    "c_time": -dt.timedelta(hours=838, minutes=59, seconds=59),
}
ORDINARY = {
    "c_tiny": 7, "c_int": 0, "c_big": 42, "c_ubig": Decimal(2**63), "c_dec": Decimal("0.0000000001"),
    "c_float": 1.5, "c_double": 2.25, "c_str": "", "c_bin": b"", "c_bool": 1,
    "c_date": dt.date(2024, 2, 29), "c_dt": dt.datetime(2024, 2, 29, 12, 0, 0, 123456),
    "c_ts": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
    "c_time": dt.timedelta(hours=838, minutes=59, seconds=59),
}


def test_tables_read_the_same_with_delta_rs_duckdb_polars_and_spark(
    make_sink: SinkFactory, root: str
) -> None:
    s = SINGLE_KEY
    sink = make_sink(root, "q")
    rows = [row(s, (1,), **EXTREMES), row(s, (2,), **ORDINARY), row(s, (3,))]
    write_batch(sink, s, batch(s, [event("r", None, r, 1) for r in rows]), 0, snapshot_append=True)
    write_batch(sink, s, batch(s, [
        event("u", rows[1], row(s, (2,), **{**ORDINARY, "c_str": "changed", "c_time": None}), 10),
        event("c", None, row(s, (4,), **ORDINARY), 11),
        event("d", rows[2], None, 12),
    ]), 1)
    config = DeltaSinkConfig(path=root)
    if sink.engine_name == "delta-spark":  # the readers below must apply deletion vectors
        features = DeltaTable(config.uri(s.table_id, "mirror")).protocol().reader_features or []
        assert "deletionVectors" in features
    from spark_session import run_session

    spark = run_session()  # the test run's session
    for kind in KINDS:
        seen = read_with_every_reader(config.uri(s.table_id, kind), spark)
        reference = frozen_rows(seen["delta-rs"])
        for reader, rows_read in seen.items():
            assert frozen_rows(rows_read) == reference, f"{reader} reads the {kind} differently"
    mirror = {r["id"]: r for r in read(root, s, "mirror")}
    assert sorted(mirror) == [1, 2, 4]
    assert mirror[1]["c_time"] == -(838 * 3600 + 59 * 60 + 59) * 1_000_000
    assert mirror[1]["c_ubig"] == Decimal(2**64 - 1)
    assert mirror[2]["c_str"] == "changed" and mirror[2]["c_time"] is None
