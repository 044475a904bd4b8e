"""Shared fixtures: one real CDC-configured server per test session, one database per test.

No mocks: every integration test talks to a real MariaDB (or MySQL 8 through testcontainers when
a Docker engine answers; see cdc/sandbox.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from cdc.sandbox import Endpoint, MariaDbSandbox, Sandbox, start_sandbox


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[Sandbox]:
    """A server with binlog ROW/FULL/FULL metadata, GTIDs, server_id and a least-privilege CDC user."""
    box = start_sandbox()
    try:
        yield box
    finally:
        box.stop()


@pytest.fixture(scope="session")
def india_server() -> Iterator[Sandbox]:
    """A second server whose default time zone is +05:30 (time-zone tests)."""
    box = MariaDbSandbox(extra_args=["--default-time-zone=+05:30"]).start()
    try:
        yield box
    finally:
        box.stop()


@pytest.fixture
def database(mysql_server: Sandbox) -> Iterator[str]:
    """A fresh, empty database for one test; dropped afterwards."""
    name = mysql_server.create_database()
    try:
        yield name
    finally:
        mysql_server.drop_database(name)


@pytest.fixture
def admin(mysql_server: Sandbox, database: str) -> Iterator[pymysql.connections.Connection]:
    """An autocommit admin connection using the test's database (for DDL and test DML)."""
    with contextlib.closing(mysql_server.admin.connect(database)) as conn:
        yield conn


@pytest.fixture
def cdc_endpoint(mysql_server: Sandbox) -> Endpoint:
    """Credentials of the least-privilege CDC user (SELECT, REPLICATION SLAVE/CLIENT only)."""
    return mysql_server.cdc


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session (2 threads) for the whole test run, with `mysql-cdc` registered."""
    from cdc.source import MySqlCdcDataSource
    from cdc.spark import local_session

    session = local_session("spark-cdc-tests", parallelism=2)
    session.dataSource.register(MySqlCdcDataSource)
    try:
        yield session
    finally:
        session.stop()
