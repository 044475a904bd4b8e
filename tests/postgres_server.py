"""Postgres fixtures (a pytest plugin, registered in conftest.py): one real server per session,
one fresh database per test. No mocks: a real PostgreSQL from the machine's packages."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from binlog.postgres.config import PostgresSourceConfig
from binlog.postgres.dialect import PostgresDialect
from cdc.app.sandbox.postgres import PostgresSandbox, start_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresSandbox]:
    """A server with wal_level=logical, a superuser ``admin`` and a ``cdc`` role (LOGIN REPLICATION)."""
    box = start_postgres()
    try:
        yield box
    finally:
        box.stop()


@pytest.fixture
def pg_database(postgres_server: PostgresSandbox) -> Iterator[str]:
    """A fresh database for one test (the CDC role may SELECT its public tables; publication
    ``spark_cdc`` FOR ALL TABLES); dropped afterwards with its slots."""
    name = postgres_server.create_database()
    try:
        yield name
    finally:
        postgres_server.drop_database(name)


@pytest.fixture
def pg_admin(postgres_server: PostgresSandbox, pg_database: str) -> Iterator[Any]:
    """An autocommit superuser connection to the test's database (DDL and test DML)."""
    with contextlib.closing(postgres_server.admin.connect(pg_database)) as conn:
        yield conn


def pg_dialect(box: PostgresSandbox, database: str, **source: Any) -> PostgresDialect:
    """The dialect as the job builds it: the CDC role, the database's public tables."""
    c = box.cdc
    options: dict[str, Any] = {"hostname": c.host, "port": c.port, "username": c.user, "password": c.password,
                               "database": database, "tables": ["public\\..*"], **source}
    return PostgresDialect(PostgresSourceConfig(**options))
