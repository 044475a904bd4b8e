"""The Pravega data source of ``follow-topic`` alone (sinks/pravega/source.py), against the
session's real Pravega, without Spark: the driver's calls as Spark makes them. Each micro-batch
reads exactly the events after the previous one's end (a read limit cuts a slice in its middle:
nothing lost, nothing twice), a replay reads the same staged file, ``commit`` removes what earlier
micro-batches left, and a reader group holding a position that is gone stops the source. The
Pravega client has wheels for Python < 3.12 only, so the module is skipped on newer ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 12):
    pytest.skip("the Pravega client (pravega 0.3.8) has wheels for CPython 3.10 and 3.11 only",
                allow_module_level=True)

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from cdc.app.sandbox.pravega import PravegaSandbox
from sinks.pravega.client import client_module, stream_manager
from sinks.pravega.config import PravegaSinkConfig
from sinks.pravega.source import (
    STAGED,
    PositionLost,
    PravegaStreamsReader,
    StagedStream,
    streams_source,
)


def _write(config: PravegaSinkConfig, stream: str, values: range) -> None:
    """One committed transaction of events ``e<i>``, routed over 7 keys (so over both segments)."""
    manager = stream_manager(config)
    writer = manager.create_transaction_writer(config.scope, stream, 3)
    txn = writer.begin_txn()
    for i in values:
        txn.write_event_bytes(f"e{i}".encode(), f"k{i % 7}")
    txn.commit()


def _read(reader: PravegaStreamsReader, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    out = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            out += batch.column("value").to_pylist()
    return out


@pytest.mark.slow  # each micro-batch's read ends at an empty slice, about a second
def test_micro_batches_read_each_event_once_and_a_lost_position_stops_the_source(
        pravega_server: PravegaSandbox, tmp_path: Path) -> None:
    config = PravegaSinkConfig(controller_uri=pravega_server.controller_uri,
                               topic_prefix=f"src{abs(hash(str(tmp_path))) % 10**8}", staging_path=str(tmp_path / "s"))
    manager = stream_manager(config)
    manager.create_scope(config.scope)
    stream = f"{config.topic_prefix}.d.t"
    module = client_module()
    manager.create_stream_with_policy(config.scope, stream, module.StreamScalingPolicy.fixed_scaling_policy(2),
                                      module.StreamRetentionPolicy.none(), [])
    source = streams_source(config, [stream, f"{config.topic_prefix}.d.missing"], str(tmp_path / "checkpoint"))
    reader = source({}).streamReader(None)
    assert isinstance(reader, PravegaStreamsReader)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start, "an empty stream: no batch"

    _write(config, stream, range(300))
    first = reader.latestOffset(start, ReadMaxRows(120))  # cuts a slice in its middle
    assert first["streams"][stream]["events"] == 120 and set(first["streams"]) == {stream}
    second = reader.latestOffset(first, ReadAllAvailable())
    got = _read(reader, start, first) + _read(reader, first, second)
    assert sorted(got) == sorted(f"e{i}".encode() for i in range(300)), "each event once"
    assert _read(reader, first, second) == _read(reader, first, second), "a replay reads the same file"
    assert next(p for p in reader.partitions(first, second) if isinstance(p, StagedStream)).topic == stream

    reader.commit(first)  # the micro-batch after `first` is planned: what came before it goes
    staged = sorted(p.name for p in (tmp_path / "checkpoint" / STAGED).iterdir())
    assert len(staged) == 2 and not list((tmp_path / "checkpoint" / STAGED / staged[0]).glob("*.arrow"))

    _write(config, stream, range(300, 310))
    manager.delete_reader_group(second["streams"][stream]["group"], config.scope)
    with pytest.raises(PositionLost, match=f"reader group {second['streams'][stream]['group']} should hold"):
        reader.latestOffset(second, ReadAllAvailable())
