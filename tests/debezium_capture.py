"""Debezium 3.5 itself, run beside our job by tests/test_debezium_differential.py.

:class:`DebeziumCapture` starts the capture harness (jvm/debezium, compiled into jars/debezium by
``make setup``) in its own JVM and classpath: Debezium's embedded engine runs one connector
against a test server, and every record is written as a Kafka Connect worker would write it
(JsonConverter for keys and values, schemas on and off; SimpleHeaderConverter for headers). The
run ends after the record of a sentinel table (``until_topic``), which the test writes last.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
JARS = Path(os.environ.get("SPARK_CDC_JARS", REPO / "jars")) / "debezium"
MAIN = "dev.sparkcdc.debezium.DebeziumCapture"


@dataclass(frozen=True)
class Captured:
    """One record as a Kafka consumer of Debezium's topics would read it: per JsonConverter mode
    (``schemas``: on, ``plain``: off) the key and value bytes (None: no key, or a tombstone)."""

    topic: str
    key: dict[str, bytes | None]
    value: dict[str, bytes | None]
    headers: tuple[tuple[str, bytes], ...]


def available() -> str | None:
    """Why the harness cannot run here (None: it can)."""
    if shutil.which("java") is None:
        return "java is missing (make setup installs a JDK)"
    if not (JARS / "spark-cdc-debezium.jar").exists():
        return f"{JARS}/spark-cdc-debezium.jar is missing: run `make setup` (scripts/jars.sh builds it)"
    return None


class DebeziumCapture:
    """One run of one Debezium connector (its own JVM), from its snapshot until ``until_topic``.

    Args:
        properties: the connector's properties (``database.password`` travels in the
            environment, never in the file).
        password: the database password.
        workdir: a folder for the properties, offsets, schema history, output and log.
        until_topic: the topic of the sentinel record that ends the run.
    """

    def __init__(self, properties: dict[str, str], password: str, workdir: Path, until_topic: str) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.out, self.ready, self.log = workdir / "records.jsonl", workdir / "ready", workdir / "debezium.log"
        base = {"offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
                "offset.storage.file.filename": str(workdir / "offsets.dat"), "offset.flush.interval.ms": "0",
                "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
                "schema.history.internal.file.filename": str(workdir / "history.dat")}
        props = workdir / "connector.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in {**base, **properties}.items()))
        cmd = ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", f"{JARS}/*", MAIN,
               "--properties", str(props), "--out", str(self.out), "--ready", str(self.ready),
               "--until-topic", until_topic, "--timeout", "300"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "DEBEZIUM_PASSWORD": password})

    def wait_streaming(self, timeout: float = 300.0) -> None:
        """Block until the connector's snapshot is over and it streams (its ``ready`` file)."""
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"Debezium exited ({self.proc.returncode}) before streaming:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"Debezium did not stream within {timeout}s:\n{self.tail()}")
            time.sleep(0.1)

    def records(self, timeout: float = 300.0) -> list[Captured]:
        """Wait for the run to end (the sentinel's record), then every record, in the engine's order."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"Debezium did not reach the sentinel within {timeout}s:\n{self.tail()}") from None
        assert code == 0, f"Debezium failed ({code}):\n{self.tail()}"
        return [_captured(json.loads(line)) for line in self.out.read_text().splitlines()]

    def stop(self) -> None:
        """End the harness's JVM if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _captured(line: dict[str, Any]) -> Captured:
    return Captured(line["topic"], {"schemas": _bytes(line["key"]), "plain": _bytes(line["key_plain"])},
                    {"schemas": _bytes(line["value"]), "plain": _bytes(line["value_plain"])},
                    tuple((name, base64.b64decode(v)) for name, v in line["headers"]))
