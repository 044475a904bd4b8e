"""Staging rows on executors: the manifest format, the contiguous split of a batch's chunks, and
a sink writer's trip to the executors (no server)."""

from __future__ import annotations

import pickle

import pytest

from cdc.spark.source import _runs
from sinks.base import Staged
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.sink import DeltaSink


def test_staged_round_trips_through_json_shapes() -> None:
    staged = Staged(1, "db.t", "changes", (3, 154, 0), 42, [{"path": "part-0.parquet"}])
    assert Staged.from_dict(staged.to_dict()) == staged


def test_a_writer_pickles_with_its_config_and_keeps_secrets_out_of_repr() -> None:
    config = DeltaSinkConfig(path="/lake", storage_options={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    writer = DeltaSink(config, "job").writer()
    assert "s3cr3t" not in repr(writer) and "s3cr3t" not in repr(config)
    clone = pickle.loads(pickle.dumps(writer))
    assert clone.config == config  # type: ignore[attr-defined]


@pytest.mark.parametrize("n,k", [(0, 2), (1, 2), (5, 2), (32, 2), (7, 3), (3, 8)])
def test_runs_are_contiguous_near_equal_and_cover_everything(n: int, k: int) -> None:
    items = list(range(n))
    runs = _runs(items, k)
    assert [i for run in runs for i in run] == items
    assert all(runs) and len(runs) == min(n, k)
    assert max(map(len, runs), default=0) - min(map(len, runs), default=0) <= 1
