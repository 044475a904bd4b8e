"""Unit tests (no server): boundary codec, predicates, chunk-key choice, mode choice, ordering."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from decimal import Decimal

import pytest

from binlog.mysql.keys import KeyOrder, PaddedWeight, chunkable, range_predicate, sql_param
from binlog.mysql.types import mysql_column, mysql_table
from cdc.model.errors import ConfigError, NoChunkKey
from cdc.model.schema import TableId
from chunking.chunks import SnapshotSplit, decode_value, encode_value
from chunking.splitter import (
    SplitterOptions,
    SplitterState,
    choose_mode,
    distribution_factor,
    select_chunk_key,
)

TID = TableId("shop", "orders")
INT = mysql_column("id", "int", "int(11)", nullable=False)
BIGU = mysql_column("id", "bigint", "bigint(20) unsigned", nullable=False)
DEC = mysql_column("amount", "decimal", "decimal(12,2)", nullable=False, precision=12, scale=2)
VARCHAR = mysql_column("name", "varchar", "varchar(20)", True, charset="utf8mb4",
                 collation="utf8mb4_general_ci")
TS = mysql_column("ts", "timestamp", "timestamp(6)", nullable=False, datetime_precision=6)
BLOB = mysql_column("b", "varbinary", "varbinary(16)", nullable=False)

VALUES = [
    0, -1, 2**64 - 1, -(2**63), Decimal("123.45"), Decimal("-0.000000000000000000000000000001"),
    Decimal("12345678901234567890123456789012345678901234567890.123"), Decimal("1E+3"), 0.1,
    "", "a b ", "ÄÖü 😀 '\"\\", b"", b"\x00\xff\x80 ", dt.date(1, 1, 1), dt.date(9999, 12, 31),
    dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.datetime(1970, 1, 1),
    dt.datetime(2024, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.timedelta(0), dt.timedelta(hours=-838, microseconds=1), dt.timedelta(minutes=-30),
    dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{type(v).__name__}:{v!r}"[:40])
def test_boundary_values_survive_json_exactly(value: object) -> None:
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    assert back == value and type(back) is type(value)
    if isinstance(value, Decimal):
        assert str(back) == str(value)  # same digits and exponent, not only equal


def test_codec_rejects_unknown_values() -> None:
    with pytest.raises(TypeError, match="cannot encode"):
        encode_value(object())
    with pytest.raises(ValueError, match="unknown chunk boundary type"):
        decode_value({"uuid": "x"})
    with pytest.raises(ValueError, match="not an encoded"):
        decode_value(5)


def test_split_round_trips_through_json_and_pickle() -> None:
    split = SnapshotSplit(TID, 7, "id", Decimal("1.50"), dt.datetime(2024, 1, 1))
    assert split.split_name == "shop.orders:7"
    assert SnapshotSplit.from_dict(json.loads(json.dumps(split.to_dict()))) == split
    assert pickle.loads(pickle.dumps(split)) == split
    with pytest.raises(ValueError, match="lacks field 'end'"):
        SnapshotSplit.from_dict({k: v for k, v in split.to_dict().items() if k != "end"})


def test_range_predicates_are_half_open_and_hold_nulls_in_the_first_chunk() -> None:
    assert range_predicate("id", None, None) == ("TRUE", ())
    assert range_predicate("id", None, 10) == ("(`id` < %s OR `id` IS NULL)", (10,))
    assert range_predicate("id", 10, None) == ("`id` >= %s", (10,))
    assert range_predicate("id", 10, 20) == ("`id` >= %s AND `id` < %s", (10, 20))
    # Backticks are doubled and % escaped for pymysql's %-formatting.
    assert range_predicate("a`b%c", 1, None)[0] == "`a``b%%c` >= %s"


def test_time_parameters_are_exact_for_negative_values() -> None:
    assert sql_param(dt.timedelta(minutes=-30)) == "-00:30:00.000000"
    assert sql_param(dt.timedelta(hours=-838, microseconds=1)) == "-837:59:59.999999"
    assert sql_param(dt.timedelta(hours=25, microseconds=5)) == "25:00:00.000005"
    assert sql_param("x") == "x"


def test_chunk_key_is_configured_column_else_first_primary_key_column() -> None:
    composite = mysql_table(TID, (VARCHAR, INT), ("name", "id"))
    assert select_chunk_key(composite, None, chunkable).name == "name"
    assert select_chunk_key(composite, "ID", chunkable).name == "id"
    with pytest.raises(ConfigError, match=r"source\.chunk_key_columns.*no column 'nope'") as info:
        select_chunk_key(composite, "nope", chunkable)
    assert info.value.context == {"table": "shop.orders", "column": "nope"}


def test_table_without_key_names_the_option_to_set() -> None:
    keyless = mysql_table(TID, (INT,), ())
    with pytest.raises(NoChunkKey) as info:
        select_chunk_key(keyless, None, chunkable)
    assert 'source.chunk_key_columns: {"shop.orders": "<column>"}' in str(info.value)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is NoChunkKey and again.context["table"] == "shop.orders"
    enum_pk = mysql_table(TID, (mysql_column("e", "enum", "enum('a','b')", False),), ("e",))
    with pytest.raises(NoChunkKey, match="type enum"):
        select_chunk_key(enum_pk, None, chunkable)
    with pytest.raises(ConfigError, match="type float"):
        select_chunk_key(mysql_table(TID, (mysql_column("f", "float", "float", False), INT), ()), "f", chunkable)


def test_options_name_the_bad_setting() -> None:
    with pytest.raises(ConfigError, match=r"source\.chunk_size"):
        SplitterOptions(chunk_size=0)
    with pytest.raises(ConfigError, match=r"source\.distribution_factor_lower"):
        SplitterOptions(distribution_factor_lower=-1.0)
    with pytest.raises(ConfigError, match=r"source\.distribution_factor_upper \(0\.5\)"):
        SplitterOptions(distribution_factor_lower=2.0, distribution_factor_upper=0.5)


def test_mode_choice_follows_the_distribution_factor() -> None:
    opts = SplitterOptions(chunk_size=100)
    assert distribution_factor(1, 1000, 1000) == 1
    assert choose_mode(INT, 1, 1000, 1000, opts) == ("even", 100)
    assert choose_mode(INT, 1, 1000, 100_000, opts) == ("uneven", None)  # too dense: stale stats
    assert choose_mode(INT, 1, 10**9, 1000, opts) == ("uneven", None)  # sparse
    assert choose_mode(INT, 1, 1000, 0, opts) == ("uneven", None)  # unknown row count
    assert choose_mode(INT, None, None, 50, opts) == ("uneven", None)  # no keys
    assert choose_mode(VARCHAR, "a", "z", 50, opts) == ("uneven", None)  # not numeric
    assert choose_mode(BIGU, 0, 2**64 - 1, 2**60, opts) == ("even", 1600)
    mode, step = choose_mode(DEC, Decimal("0.50"), Decimal("1500.00"), 3000, opts)
    assert mode == "even" and step == Decimal("50.01")  # (1500 - 0.5 + 1) / 3000 * 100, floored
    assert choose_mode(DEC, Decimal("0.01"), Decimal("0.02"), 1, opts) == ("even", Decimal("101.00"))
    assert choose_mode(DEC, Decimal("5"), Decimal("5"), 30, opts) == ("uneven", None)  # 1/30 < 0.05
    tiny = SplitterOptions(chunk_size=1, distribution_factor_lower=0.0)
    assert choose_mode(DEC, Decimal("0.00"), Decimal("0.00"), 1000, tiny) == ("even", Decimal("0.01"))
    assert choose_mode(INT, 1, 1, 1000, tiny) == ("even", 1)  # at least 1


def test_splitter_state_round_trips_and_rejects_garbage() -> None:
    state = SplitterState("shop.orders", "amount", "even", Decimal("0.50"), Decimal("9.99"), 30,
                          Decimal("1.25"), Decimal("3.00"), 2, False)
    assert SplitterState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    with pytest.raises(ValueError, match="unknown mode"):
        SplitterState.from_dict({**state.to_dict(), "mode": "random"})
    with pytest.raises(ValueError, match="lacks field 'next_id'"):
        SplitterState.from_dict({k: v for k, v in state.to_dict().items() if k != "next_id"})


def test_padded_weights_compare_like_pad_space() -> None:
    sp = b"\x00\x20"
    a, a_sp, a_tab, b = (PaddedWeight(w, sp) for w in
                         (b"\x00A", b"\x00A\x00\x20\x00\x20", b"\x00A\x00\x09", b"\x00B"))
    assert a == a_sp and hash(a) == hash(a_sp)
    assert a_tab < a < b and a_tab < a_sp and not a_sp < a
    assert sorted([b, a_sp, a_tab]) == [a_tab, a_sp, b]
    assert pickle.loads(pickle.dumps(a_tab)) == a_tab


def test_local_key_order_puts_null_first_and_normalizes_timestamps() -> None:
    order = KeyOrder(TS)
    utc = dt.datetime(2024, 1, 1, 0, 0)
    aware = dt.datetime(2024, 1, 1, 5, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    assert order.sort_key(aware) == order.sort_key(utc)
    assert order.sort_key(None) < order.sort_key(dt.datetime(1, 1, 1))
    assert KeyOrder(BLOB).sort_keys([b"\x00", bytearray(b"\xff")]) == [(1, b"\x00"), (1, b"\xff")]
    assert KeyOrder(DEC).sort_key("10.5") > KeyOrder(DEC).sort_key(Decimal("9.75"))
    with pytest.raises(ValueError, match="needs a connection"):
        KeyOrder(VARCHAR)


def test_a_split_contains_the_keys_of_its_range() -> None:
    bounds = [None, 10, 20, 30, None]
    splits = [SnapshotSplit(TID, i, "id", bounds[i], bounds[i + 1]) for i in range(4)]
    order = KeyOrder(INT)
    for value, index in [(None, 0), (-5, 0), (9, 0), (10, 1), (19, 1), (20, 2), (30, 3), (10**12, 3)]:
        assert [s.contains(order.sort_key(value), order) for s in splits] == [i == index for i in range(4)]

