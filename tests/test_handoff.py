"""The snapshot hand-off's options and the contiguous split of a batch's chunks (no server)."""

from __future__ import annotations

import pytest

from cdc.model.errors import ConfigError
from cdc.spark.handoff import SECRET_OPTION, WRITER_OPTION, SnapshotHandoff, options_for
from cdc.spark.source import _runs
from sinks.delta.files import HANDOFF_WRITER, handoff_options
from sinks.delta.sink import DeltaSinkConfig


def test_no_option_means_no_handoff() -> None:
    assert SnapshotHandoff.from_options({}) is None


def test_options_round_trip_and_secrets_stay_out_of_repr_and_the_public_option() -> None:
    config = DeltaSinkConfig(path="/lake", storage_options={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    options = handoff_options(config)
    assert "s3cr3t" not in options[WRITER_OPTION] and "s3cr3t" in options[SECRET_OPTION]
    handoff = SnapshotHandoff.from_options(options)
    assert handoff is not None and handoff.writer == HANDOFF_WRITER
    assert DeltaSinkConfig(**handoff.config) == config
    assert "s3cr3t" not in repr(handoff)


@pytest.mark.parametrize("raw", ["not json", '{"config": {}}', '{"writer": "no_colon"}', "[1]"])
def test_malformed_option_names_the_option(raw: str) -> None:
    with pytest.raises(ConfigError, match=WRITER_OPTION):
        SnapshotHandoff.from_options({WRITER_OPTION: raw})


def test_a_writer_that_cannot_be_imported_says_where_to_install() -> None:
    handoff = SnapshotHandoff.from_options(options_for("no_such_module:write", {}))
    assert handoff is not None
    with pytest.raises(ConfigError, match="install the project"):
        handoff.write(None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("n,k", [(0, 2), (1, 2), (5, 2), (32, 2), (7, 3), (3, 8)])
def test_runs_are_contiguous_near_equal_and_cover_everything(n: int, k: int) -> None:
    items = list(range(n))
    runs = _runs(items, k)
    assert [i for run in runs for i in run] == items
    assert all(runs) and len(runs) == min(n, k)
    assert max(map(len, runs), default=0) - min(map(len, runs), default=0) <= 1
