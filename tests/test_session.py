"""The job's local session: a light driver JVM, unless a sink merges in the JVM."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from cdc.app.config import parse_config
from cdc.app.runner import jvm_merges
from cdc.spark.session import LIGHT_JVM_OPTIONS, jvm_archive, light_jvm_options

SOURCE = {"username": "cdc", "password": "pw", "tables": ["shop\\..*"]}


def _config(*sinks: dict[str, Any]) -> Any:
    return parse_config({"source": SOURCE, "sink": list(sinks), "checkpoint": "./cp"}, warn_plain_password=False)


def test_only_a_delta_spark_mirror_keeps_the_jvm_defaults() -> None:
    assert not jvm_merges(_config({"type": "delta", "path": "./lake"}))  # delta-rs, the default engine
    assert not jvm_merges(_config({"type": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topic_prefix": "t"}))
    assert jvm_merges(_config({"type": "kafka", "bootstrap_servers": "127.0.0.1:9092", "topic_prefix": "t"},
                              {"type": "delta", "path": "./lake", "engine": "delta-spark"}))


@pytest.mark.parametrize("light, catalog", [(True, True), (False, True), (True, False)])
def test_the_light_jvm_options_reach_the_driver_jvm(light: bool, catalog: bool, tmp_path: Any) -> None:
    """The options go through spark-submit's launch of the JVM, not only into the conf, and they
    share the setting with the catalog's Derby properties (a job's session has both)."""
    where = repr(str(tmp_path / "catalog")) if catalog else None
    code = ("from cdc.spark.session import local_session\n"
            f"s = local_session('t', parallelism=1, light_jvm={light}, catalog_dir={where})\n"
            "print(' '.join(s._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))\n"
            "s.stop()\n")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}  # the tests' own JVM flags
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    args = out.stdout.split()
    assert all(flag in args for flag in LIGHT_JVM_OPTIONS.split()) == light, args
    if jvm_archive() is not None:  # `make setup` built it: the light JVM maps it
        assert (f"-XX:SharedArchiveFile={jvm_archive()}" in args) == light, args
    assert (f"-Dderby.system.home={tmp_path / 'catalog'}" in args) == catalog, args


def test_the_light_jvm_maps_the_environments_class_archive_when_there_is_one(tmp_path: Any) -> None:
    assert light_jvm_options(tmp_path) == LIGHT_JVM_OPTIONS
    (tmp_path / "spark-classes.jsa").write_bytes(b"")
    assert light_jvm_options(tmp_path).split() == [*LIGHT_JVM_OPTIONS.split(),
                                                   f"-XX:SharedArchiveFile={tmp_path / 'spark-classes.jsa'}",
                                                   "-Xlog:cds=off,cds+dynamic=off"]
    blank = tmp_path / "a b"
    blank.mkdir()
    (blank / "spark-classes.jsa").write_bytes(b"")
    assert light_jvm_options(blank) == LIGHT_JVM_OPTIONS  # Spark would cut the path at the blank
