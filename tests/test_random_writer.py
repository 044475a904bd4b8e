"""The exactly-once suites' random writer (``tests/pipeline.py``): a statement the server rolls
back is skipped as an application would retry it, and any other failure fails the test that ran
the writer, naming its cause (a writer that died quietly left a test failing later on changes
that were missing, with the cause in a warning)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from pipeline import RandomWriter, writing

from cdc.app.sandbox.mysql import Sandbox


def test_rolled_back_statements_are_skipped_and_other_failures_fail_the_test(
    mysql_server: Sandbox, database: str, admin: Any,
) -> None:
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v', 0)" for i in range(50)))
    writer = RandomWriter(mysql_server, database, "t", seed=1, key_space=50, pause_s=0.002)
    with writer.conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    with contextlib.closing(mysql_server.admin.connect(database)) as holder, writing(writer):
        with holder.cursor() as cur:  # every row locked until a statement of the writer timed out
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM t FOR UPDATE")
            wait_until(lambda: writer.rolled_back > 0 or writer.failure is not None)
            cur.execute("COMMIT")
        done = writer.statements
        wait_until(lambda: writer.statements > done or writer.failure is not None)  # and it goes on
    assert writer.rolled_back >= 1 and writer.statements > done, (writer.rolled_back, writer.statements)

    broken = RandomWriter(mysql_server, database, "t", seed=2, key_space=50, pause_s=0.002)
    with pytest.raises(AssertionError, match=r"the random writer of t failed after \d+ statements: .*1146"), \
            writing(broken):
        with admin.cursor() as cur:
            cur.execute("DROP TABLE t")
        wait_until(lambda: not broken.thread.is_alive())


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
