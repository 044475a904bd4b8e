"""The lake is shared, at random: the job (``python -m cdc run``) SIGKILLed and restarted under
random writers on MariaDB, while another process loops a platform's maintenance over the sink
tables (docs/operating/maintenance.md, "Other writers"; the deterministic cases of each conflict:
tests/test_shared_lake.py).

The other writer is a process of its own (tests/platform_maintenance.py), as a platform's
scheduled job is: each loop it picks the mirror or the changelog and one of
delta-rs ``optimize.compact()``, ``optimize.z_order(key)``, ``vacuum()`` (no retention on the
mirror; on the changelog the hour the docs ask for) or ``alter.set_table_properties`` (a property
of its own), and it counts what committed and what lost a race. The job's own maintenance is off, as the docs
ask of a lake that delta-rs compacts (the job's compaction against another's, deterministically:
tests/test_shared_lake.py). Afterwards the mirror equals the source (no
key twice), the changelog holds each change once (tests/pipeline.py's checks), and delta-rs,
DuckDB, Polars and Spark read the same mirror.

CI runs the default engine (delta-rs with deletion vectors). The copy-on-write mirror and the
delta-spark engine run by hand: ``SPARK_CDC_SOAK_ENGINES=all pytest tests/test_shared_lake_soak.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import change_batches as cb
import pytest
import yaml
from pipeline import PACE_S, Pipeline, RandomWriter, writing
from platform_maintenance import OPERATIONS
from test_pipeline import check_all, create_table

from binlog.mysql.reader import current_offset
from cdc.app.sandbox.mysql import Sandbox
from sinks.delta.tables import read_table

ROOT = Path(__file__).resolve().parent.parent
PASSWORD_ENV = "SOAK_SOURCE_PASSWORD"
KILLS = 3
STARTED_S = 300.0  # the longest a fresh job may take to commit its next batches on 2 busy cores


# ---- the test's side ----------------------------------------------------------------------------



class OtherWriter:
    """The maintenance loop's process over a database's sink tables (tests/platform_maintenance.py)."""

    def __init__(self, database_dir: Path, workdir: Path, seed: int, pause_s: float) -> None:
        self.stop_file, self.report = workdir / "maintenance.stop", workdir / "maintenance.json"
        self.err = workdir / "maintenance.err"
        with open(self.err, "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("platform_maintenance.py")), str(database_dir),
                 str(self.stop_file), str(self.report), str(seed), str(pause_s)], stderr=err, start_new_session=True)

    def stop(self) -> dict[str, Any]:
        """Stop it after its current operation; what it did."""
        self.stop_file.write_text("")
        try:
            self.process.wait(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        assert self.process.returncode == 0, f"the other writer died: {self.err.read_text()[-3000:]}"
        return dict(json.loads(self.report.read_text()))


class JobProcess:
    """``python -m cdc run`` on a job file: its committed batches (progress lines), its SIGKILL."""

    def __init__(self, config: Path, workdir: Path) -> None:
        n = len(list(workdir.glob("job-*.err")))
        self.err = workdir / f"job-{n}.err"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_CDC_SPARK_LOG_LEVEL": "WARN"}
        with open(self.err, "w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "cdc", "run", "--config", str(config)], cwd=ROOT,
                                            env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def batches(self) -> int:
        return len(re.findall(r"cdc.spark.commit: batch \d+: ", self.err.read_text(errors="replace")))

    def wait_for_batches(self, n: int) -> None:
        deadline = time.monotonic() + STARTED_S
        while self.batches() < n:
            assert self.process.poll() is None, f"the job exited with {self.process.returncode}: {self.why()}"
            assert time.monotonic() < deadline, f"the job committed no {n} batches: {self.why()}"
            time.sleep(0.1)

    def why(self) -> str:
        """The job's error lines (its log's, then Python's and the JVM's exceptions), else its log's end."""
        text = self.err.read_text(errors="replace")
        lines = text.splitlines()
        final = [line for line in lines if line.startswith("error:")]  # the job's one line
        raised = [line for line in lines if re.match(r"\s*(\w+\.)+\w*(Error|Exception|Conflict)\w*: ", line)]
        logged = [line for line in lines if re.search(r"ERROR|^Caused by|\[[A-Z_]+\]", line)]
        return "\n".join(dict.fromkeys(line[:1000] for line in [*final, *raised[-5:], *logged[:10]])) or text[-3000:]

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and its Python workers at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)


def job_file(p: Pipeline) -> Path:
    """The pipeline's job as a YAML file for ``cdc run`` (the password from the environment)."""
    raw = p.raw_config()
    raw["source"]["password"] = "${" + PASSWORD_ENV + "}"
    path = p.workdir / "job.yaml"
    path.write_text(yaml.safe_dump({**raw, "trigger_interval": "200ms"}))
    return path


_RS, _COW, _SPARK = "delta-rs", "copy-on-write", "delta-spark"
BY_HAND = pytest.mark.skipif(os.environ.get("SPARK_CDC_SOAK_ENGINES") != "all",
                             reason="run by hand (SPARK_CDC_SOAK_ENGINES=all): CI runs the default engine")


@pytest.fixture
def pipeline(request: pytest.FixtureRequest, spark: Any, mysql_server: Sandbox, database: str,
             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    monkeypatch.setenv(PASSWORD_ENV, mysql_server.cdc.password)
    p = Pipeline(spark, mysql_server, database, tmp_path)
    p.engine = _SPARK if request.param == _SPARK else _RS
    p.deletion_vectors = False if request.param == _COW else "auto"
    # The platform compacts with delta-rs: the job's own maintenance is off, as the docs ask
    # (docs/operating/maintenance.md): delta-rs's compaction planned before the job's compaction or
    # purge commits over it, every row of those files twice (delta-io/delta-rs#3982; the job's side
    # of that race: tests/test_shared_lake.py)
    p.maintenance = {"every": 0}
    yield p
    p.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", [_RS, pytest.param(_COW, marks=BY_HAND), pytest.param(_SPARK, marks=BY_HAND)],
                         indirect=True)
def test_job_killed_at_random_while_another_process_maintains_the_tables_is_exact(
        pipeline: Pipeline, admin: Any, mysql_server: Sandbox) -> None:
    create_table(admin, rows=1500)
    config = job_file(pipeline)
    with contextlib.closing(mysql_server.admin.connect()) as conn:
        pipeline.started_at = current_offset(conn)  # the checks read the binlog from here
    rng = random.Random(65)
    # a delta-spark MERGE takes seconds here: a platform committing several times a second outruns
    # each of its attempts, and the job stops with one line saying so (docs/sinks/delta.md)
    pause_s = 2.0 if pipeline.engine == _SPARK else 0.3
    other = OtherWriter(pipeline.lake / pipeline.database, pipeline.workdir, seed=65, pause_s=pause_s)
    try:
        writer = RandomWriter(mysql_server, pipeline.database, "t", seed=17, pause_s=PACE_S)
        with writing(writer):
            for _ in range(KILLS):
                job = JobProcess(config, pipeline.workdir)
                try:
                    job.wait_for_batches(rng.randint(2, 5))
                    time.sleep(rng.uniform(0, 1.5))  # anywhere in a batch: planning, tasks, commits, MERGE
                finally:
                    job.kill()
        pipeline.run()  # restart from the checkpoint and catch up, the other writer still going
    finally:
        report = other.stop()
    counts = report["counts"]
    logs = "".join(f.read_text(errors="replace") for f in pipeline.workdir.glob("job-*.err"))
    print(f"other writer: {json.dumps(counts, sort_keys=True)}; the job planned a commit again "
          f"{logs.count('planned again')} times")
    assert not report["failures"], f"the other writer failed otherwise than by losing a race: {report}"
    for operation in OPERATIONS:
        assert any(counts.get(f"{operation} {kind} committed") for kind in ("mirror", "changelog")), \
            f"the other writer's {operation} never committed: {counts}"
    check_all(pipeline)
    for name, rows_of in (("t", cb.frozen_rows), ("t_changelog", _changes)):
        uri = str(pipeline.lake / pipeline.database / name)
        expected = rows_of(read_table(uri).to_pylist())
        for reader, rows in cb.read_with_every_reader(uri, pipeline.spark).items():
            assert rows_of(rows) == expected, f"{reader} reads {name} differently"


def _changes(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Changelog rows by what identifies a change (the readers differ in how they give timestamps)."""
    return Counter((r["op"], r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["ts_ms"]) for r in rows)
