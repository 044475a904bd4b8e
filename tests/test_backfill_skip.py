"""``source.backfill_skip``: chunks read and emitted in one batch, without the watermark merge.

The guarantee is weaker during the snapshot (at-least-once: a change made while its chunk is
read reaches the changelog although the chunk's rows already hold it), so these tests check what
still holds: the mirror equals the source, every change after a chunk's emit position is in the
changelog exactly once, the changes before it are absorbed by the chunk's rows, and crashes lose
nothing. Real MariaDB and PostgreSQL, real Spark, real Delta tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pipeline_pg
import pytest
import test_pipeline_postgres
from faults import InjectedFault
from pipeline import (
    PACE_S,
    Pipeline,
    RandomWriter,
    writing,
)
from test_pipeline import check_all, create_table

from cdc.app.runner import JobFailed
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.postgres import PostgresSandbox


@pytest.fixture
def pipeline(spark: Any, mysql_server: Sandbox, database: str, tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(spark, mysql_server, database, tmp_path, source={"backfill_skip": True})
    yield p
    p.cleanup()


def test_snapshot_under_writers_reads_and_emits_each_chunk_in_one_batch(pipeline: Pipeline, admin: Any,
                                                                       mysql_server: Sandbox) -> None:
    create_table(admin)
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=23, pause_s=PACE_S)
    with writing(writer):
        first = pipeline.run()
    pipeline.run()
    assert writer.statements > 50
    assert first[0].snapshot_rows > 0, "the first batch emits the chunks it reads"
    assert not (pipeline.state_dir / "staged").exists(), "no chunk is staged between batches"
    check_all(pipeline)


@pytest.mark.parametrize(("point", "after"), [("emit", 1), ("after_sink_commit", 1), ("stream", 0)])
def test_crash_and_restart_loses_nothing(point: str, after: int, pipeline: Pipeline, admin: Any,
                                         mysql_server: Sandbox) -> None:
    create_table(admin)
    writer = RandomWriter(mysql_server, pipeline.database, "t", seed=len(point), pause_s=PACE_S)
    pipeline.arm(point, after=after)
    with writing(writer):
        with pytest.raises((JobFailed, InjectedFault), match=f"injected fault at {point}"):
            pipeline.run()
        pipeline.run()
    pipeline.run()
    check_all(pipeline)


def test_postgres_snapshot_under_writers_and_a_crash_loses_nothing(spark: Any, postgres_server: PostgresSandbox,
                                                                   pg_database: str, tmp_path: Path) -> None:
    p = pipeline_pg.PgPipeline(spark, postgres_server, pg_database, tmp_path, source={"backfill_skip": True})
    with contextlib.closing(p.admin()) as admin:
        test_pipeline_postgres.create_table(admin)
    writer = pipeline_pg.PgRandomWriter(p, "t", seed=3, pause_s=PACE_S)
    p.arm("emit", after=1)
    with writing(writer):  # type: ignore[arg-type]
        with pytest.raises((JobFailed, InjectedFault), match="injected fault at emit"):
            p.run()
        p.run()
    p.run()
    assert not (p.state_dir / "staged").exists(), "no chunk is staged between batches"
    test_pipeline_postgres.check_all(p)
    p.cleanup()
