"""``python -m cdc demo --sink kafka [--source postgres]``: the demo into a throwaway Kafka broker.

The Delta demo's test lives in tests/test_job.py. These run the same demo at 1,000 customers with
the Kafka sink, from MariaDB and from PostgreSQL: the demo starts its own servers and checks, with
a plain read_committed consumer, that the newest message of each key equals the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.app.cli import build_parser


@pytest.mark.slow
def test_demo_into_kafka_runs_end_to_end_at_a_small_scale(spark: Any, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from cdc.app.demo import run_demo

    assert run_demo(scale=0.01, workdir=tmp_path / "demo", spark=spark, sink="kafka") == 0
    out = capsys.readouterr().out
    assert "tpcds.customer: 1000 rows" in out
    assert "starting a throwaway Kafka broker" in out
    # 1,000 snapshot reads, 5 updates, 3 deletes + 3 tombstones, 2 inserts
    assert "demo.tpcds.customer: 1013 messages (c 2, d 3, r 1000, tombstone 3, u 5)" in out
    assert "demo.__spark_cdc_commits: " in out and " batch markers" in out
    assert "key {'c_customer_sk': 1} op u c_email_address 'changed-1@example.com'" in out
    assert "the newest message of every key equals the source (999 rows)" in out


@pytest.mark.slow
def test_demo_from_postgres_into_kafka(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cdc.app.demo import run_demo

    assert run_demo(scale=0.01, workdir=tmp_path / "demo", spark=spark, sink="kafka", source="postgres") == 0
    out = capsys.readouterr().out
    assert "starting a throwaway PostgreSQL" in out and "tpcds.customer: 1000 rows" in out
    assert "demo.tpcds.customer: 1013 messages (c 2, d 3, r 1000, tombstone 3, u 5)" in out
    assert "the newest message of every key equals the source (999 rows)" in out


def test_demo_sink_flag() -> None:
    args = build_parser().parse_args(["demo", "--sink", "kafka", "--source", "postgres", "--scale", "0.01"])
    assert (args.sink, args.source, args.scale) == ("kafka", "postgres", 0.01)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--sink", "nope"])
