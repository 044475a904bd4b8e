"""``python -m cdc demo --sink kafka|pulsar|pravega [--source postgres]``: the demo into a throwaway stream store.

The first test runs the Delta demo as `make demo` does: ``python -m cdc demo``, in a process of
its own, whose Spark session is the one a job starts (:func:`cdc.app.runner.job_session`). The others run the same demo at 1,000 customers with the
Kafka sink, from MariaDB and from PostgreSQL: the demo starts its own servers and checks, with
a plain read_committed consumer, that the newest message of each key equals the source.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdc.app.cli import build_parser


def test_the_demo_runs_as_make_demo_runs_it(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "cdc", "demo", "--scale", "0.01"], cwd=tmp_path,
                         env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "tpcds.customer: 1000 rows" in out.stdout
    assert "mirror equals the source (999 rows) and holds every change" in out.stdout
    assert "spark-sql> SELECT count(*) FROM tpcds.customer\n    999\n" in out.stdout
    assert (tmp_path / ".demo" / "checkpoints" / "tpcds_state" / "catalog" / "metastore_db").is_dir()


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
def test_demo_into_pulsar_runs_end_to_end_at_a_small_scale(spark: Any, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m cdc demo --sink pulsar``: its own broker, the job twice, the topic read back."""
    from cdc.app.demo import run_demo

    assert run_demo(scale=0.01, workdir=tmp_path / "demo", spark=spark, sink="pulsar") == 0
    out = capsys.readouterr().out
    assert "starting a throwaway Pulsar broker" in out and "tpcds.customer: 1000 rows" in out
    assert "persistent://public/default/demo.tpcds.customer: 1013 messages (c 2, d 3, r 1000, tombstone 3, u 5)" in out
    assert "the newest message of every key equals the source (999 rows), deletes end in tombstones" in out


@pytest.mark.slow
def test_demo_into_pravega_runs_end_to_end_at_a_small_scale(spark: Any, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m cdc demo --sink pravega``: its own server, the job twice, the stream read back by a
    reader group (an event has no key and no tombstone: 1,000 reads, 5 updates, 3 deletes, 2 inserts)."""
    pytest.importorskip("pravega_client", reason="the Pravega client (`pravega`) has wheels for CPython 3.10 and 3.11 only")
    from cdc.app.demo import run_demo

    assert run_demo(scale=0.01, workdir=tmp_path / "demo", spark=spark, sink="pravega") == 0
    out = capsys.readouterr().out
    assert "starting a throwaway Pravega" in out and "tpcds.customer: 1000 rows" in out
    assert "spark-cdc/demo.tpcds.customer: 1010 events (c 2, d 3, r 1000, u 5)" in out
    assert "the newest message of every key equals the source (999 rows), deleted keys end with their delete" in out


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
    assert build_parser().parse_args(["demo", "--sink", "pravega"]).sink == "pravega"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--sink", "nope"])
