"""The durable Pravega sandbox's start-up errors (cdc/app/sandbox/pravega_durable.py). Its data
surviving a SIGKILL is tested with the sink: tests/test_pipeline.py, the Pravega server killed
after a commit."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cdc.app.sandbox.mysql import SandboxError
from cdc.app.sandbox.pravega_durable import PORTS, DurablePravegaSandbox


def test_a_part_that_does_not_come_up_is_named_with_its_log_and_a_given_folder_is_kept(tmp_path: Path) -> None:
    """ZooKeeper's port (from the folder's ``ports.json``, as a second start reads it) is taken:
    ZooKeeper exits, and the error names it and its log file; stop keeps a folder the caller gave."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers, and no one else can bind
        port = taken.getsockname()[1]
        (tmp_path / "ports.json").write_text(json.dumps({name: port for name in PORTS}))
        box = DurablePravegaSandbox(folder=str(tmp_path))
        try:
            with pytest.raises(SandboxError, match=r"(?s)Pravega's zookeeper on 127\.0\.0\.1:\d+ did not come up: "
                                                   r"zookeeper exited .*its log: .*zookeeper/stdout\.log"):
                box.start(timeout=60)
        finally:
            box.stop()
    assert (tmp_path / "ports.json").exists() and (tmp_path / "zookeeper" / "stdout.log").exists()
    assert box.pgids() == [], "nothing left running"


def test_durable_is_refused_for_a_sandbox_other_than_pravega(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cdc.app.cli import main

    assert main(["sandbox", "kafka", "--durable", str(tmp_path)]) == 2
    assert "--durable is for `sandbox pravega` only, not kafka" in capsys.readouterr().err
