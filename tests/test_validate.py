"""``python -m cdc validate --check-connection`` (cdc/app/validate.py, binlog/*/checks.py): every
missing prerequisite on the source, printed with the exact statement that fixes it; running
those statements makes the source pass.

Against the real MariaDB and PostgreSQL fixtures, with users that lack grants and a server whose
settings are wrong (restored afterwards).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mariadb_replica import replica_pair
from test_job import PASSWORD_ENV, raw_config, write_config

from cdc.app.cli import main
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.postgres import PostgresSandbox

MISSING = re.compile(r"^  MISSING  (?P<item>[^:]+): (?P<found>[^;]+); fix: (?P<fix>.*)$")


def validate(path: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str], str, list[str]]:
    """Exit code, the missing items with their fixes, stdout, the error lines."""
    capsys.readouterr()
    code = main(["validate", "--config", path, "--check-connection"])
    out, err = capsys.readouterr()
    missing = {m["item"]: m["fix"] for m in map(MISSING.match, out.splitlines()) if m}
    return code, missing, out, [line for line in err.splitlines() if line.startswith("error: ")]


def first_statement(fix: str) -> str:
    """The SQL of a fix (its text up to the first ``;``)."""
    return fix.split(";", 1)[0] + ";"


@pytest.fixture
def partial_user(mysql_server: Sandbox, database: str, admin: Any) -> Iterator[str]:
    """A user with REPLICATION CLIENT and SELECT on table ``a``; on ``b`` only INSERT (so it sees
    the table but cannot read it); no REPLICATION SLAVE."""
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY)")
        cur.execute("CREATE USER 'partial'@'%' IDENTIFIED BY 'partial-pw-3'")
        cur.execute("GRANT REPLICATION CLIENT ON *.* TO 'partial'@'%'")
        cur.execute(f"GRANT SELECT ON `{database}`.`a` TO 'partial'@'%'")
        cur.execute(f"GRANT INSERT ON `{database}`.`b` TO 'partial'@'%'")
    yield "partial"
    with admin.cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'partial'@'%'")


@pytest.fixture
def wrong_binlog_settings(mysql_server: Sandbox) -> Iterator[None]:
    """binlog_row_image MINIMAL and binlogs kept one hour (global settings, restored after)."""
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.binlog_expire_logs_seconds")
        kept = cur.fetchone()[0]
        cur.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
        cur.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
        try:
            yield
        finally:
            cur.execute("SET GLOBAL binlog_row_image = 'FULL'")
            cur.execute("SET GLOBAL binlog_expire_logs_seconds = %s", (kept,))


def test_mysql_lists_every_missing_grant_and_setting_with_its_fix(
    mysql_server: Sandbox, database: str, admin: Any, partial_user: str, wrong_binlog_settings: None,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "partial-pw-3")
    path = write_config(tmp_path / "job.yaml", raw_config(mysql_server, database, tmp_path, username=partial_user))
    code, missing, out, errors = validate(path, capsys)
    assert code == 2 and errors == ["error: 4 prerequisite(s) missing on 127.0.0.1:"
                                    f"{mysql_server.cdc.port}: apply the fixes listed above, then run validate again"]
    assert missing == {
        "REPLICATION SLAVE": "GRANT REPLICATION SLAVE ON *.* TO 'partial'@'%';",
        f"SELECT on {database}.b": f"GRANT SELECT ON `{database}`.`b` TO 'partial'@'%';",
        "binlog_row_image": "SET GLOBAL binlog_row_image = 'FULL'; and in my.cnf [mysqld]: binlog_row_image = FULL",
        "binlog retention": "SET GLOBAL binlog_expire_logs_seconds = 604800; and in my.cnf [mysqld]: "
                            "binlog_expire_logs_seconds = 604800 (longer than the job may ever be stopped, "
                            "or it cannot resume)",
    }, out
    for ok in ("REPLICATION CLIENT: granted", f"SELECT on {database}.a: granted", "binlog_format: ROW",
               "log_bin: ON", "binlog_row_metadata: FULL", "GTIDs: recorded (gtid_binlog_pos = ",
               "replica binlog: not a replica"):
        assert f"  ok       {ok}" in out, out

    with admin.cursor() as cur:  # what validate printed, as an admin runs it
        for fix in missing.values():
            cur.execute(first_statement(fix))
    code, missing, out, errors = validate(path, capsys)
    assert (code, missing, errors) == (0, {}, []), out
    assert "2 table(s)" in out and sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


@pytest.mark.slow  # two pairs of MariaDB servers (about 10 s each)
@pytest.mark.parametrize("log_slave_updates", ["ON", "OFF"])
def test_a_replica_must_log_the_changes_it_replicates(
    log_slave_updates: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A job pointed at a replica reads the replica's own binlog: without log_slave_updates it
    holds none of the primary's changes, and validate says so with the setting to apply."""
    with replica_pair((f"--log-slave-updates={log_slave_updates}",)) as pair:
        with contextlib.closing(pair.primary.admin.connect()) as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY)")
        pair.wait_caught_up(applied="gtid_slave_pos")
        monkeypatch.setenv(PASSWORD_ENV, pair.replica.cdc.password)
        path = write_config(tmp_path / "job.yaml", raw_config(pair.replica, "shop", tmp_path))
        code, missing, out, errors = validate(path, capsys)
    if log_slave_updates == "ON":
        assert (code, missing, errors) == (0, {}, []), out
        assert "  ok       replica binlog: log_slave_updates = ON" in out, out
    else:
        assert code == 2 and missing == {
            "replica binlog": "in my.cnf [mysqld]: log_slave_updates = ON, then restart the replica"}, out
        assert "log_slave_updates = OFF: its binlog lacks the replicated changes" in out, out


@pytest.fixture
def weak_role(postgres_server: PostgresSandbox) -> Iterator[tuple[str, str, str]]:
    """A database without a publication, tables ``a`` and ``b`` (the admin's), and a LOGIN role
    without REPLICATION that may read ``a`` only: (database, role, password)."""
    database = postgres_server.create_database(publication=None)
    role, password = f"weak_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:12]}"
    with contextlib.closing(postgres_server.admin.connect(database)) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute("CREATE TABLE public.a (id INT PRIMARY KEY)")
        conn.execute("CREATE TABLE public.b (id INT PRIMARY KEY)")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(f"GRANT SELECT ON public.a TO {role}")
        conn.execute(f"REVOKE CREATE ON DATABASE \"{database}\" FROM PUBLIC")
    try:
        yield database, role, password
    finally:
        postgres_server.drop_database(database)
        with contextlib.closing(postgres_server.admin.connect()) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_postgres_lists_every_missing_grant_and_setting_with_its_fix(
    postgres_server: PostgresSandbox, weak_role: tuple[str, str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    database, role, password = weak_role
    monkeypatch.setenv("PG_VALIDATE_PASSWORD", password)
    raw = {"source": {"type": "postgres", "hostname": postgres_server.cdc.host, "port": postgres_server.cdc.port,
                      "username": role, "password": "${PG_VALIDATE_PASSWORD}", "database": database,
                      "tables": ["public\\..*"]},
           "sink": {"path": str(tmp_path / "lake")}, "checkpoint": str(tmp_path / "checkpoint")}
    path = write_config(tmp_path / "job.yaml", raw)
    code, missing, out, errors = validate(path, capsys)
    assert code == 2 and len(errors) == 1 and "3 prerequisite(s) missing" in errors[0], (out, errors)
    assert missing == {
        "REPLICATION role attribute": f'ALTER ROLE "{role}" REPLICATION;',
        "SELECT on public.b": f'GRANT SELECT ON "public"."b" TO "{role}";',
        "publication 'spark_cdc'": 'CREATE PUBLICATION "spark_cdc" FOR TABLE "public"."a", "public"."b"; '
                                   "(as the tables' owner or a superuser)",
    }, out
    assert "  ok       wal_level: logical" in out and "  ok       SELECT on public.a: granted" in out
    assert re.search(r"  ok       max_replication_slots: \d+ of \d+ used", out), out

    with contextlib.closing(postgres_server.admin.connect(database)) as conn:
        for fix in missing.values():
            conn.execute(first_statement(fix))
    code, missing, out, errors = validate(path, capsys)
    assert (code, missing, errors) == (0, {}, []), (out, errors)
    assert "2 table(s)" in out


def test_postgres_a_role_that_owns_its_tables_needs_create_on_the_database(
    postgres_server: PostgresSandbox, weak_role: tuple[str, str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    database, role, password = weak_role
    with contextlib.closing(postgres_server.admin.connect(database)) as conn:
        conn.execute(f"ALTER ROLE {role} REPLICATION")
        conn.execute(f"ALTER TABLE public.a OWNER TO {role}")
    monkeypatch.setenv("PG_VALIDATE_PASSWORD", password)
    raw = {"source": {"type": "postgres", "hostname": postgres_server.cdc.host, "port": postgres_server.cdc.port,
                      "username": role, "password": "${PG_VALIDATE_PASSWORD}", "database": database,
                      "tables": ["public\\.a"]},
           "sink": {"path": str(tmp_path / "lake")}, "checkpoint": str(tmp_path / "checkpoint")}
    path = write_config(tmp_path / "job.yaml", raw)
    code, missing, out, _ = validate(path, capsys)
    assert code == 2 and missing == {f"CREATE on database {database} (for publication 'spark_cdc')":
                                     f'GRANT CREATE ON DATABASE "{database}" TO "{role}";'}, out
    with contextlib.closing(postgres_server.admin.connect(database)) as conn:
        conn.execute(first_statement(next(iter(missing.values()))))
    code, missing, out, errors = validate(path, capsys)
    assert (code, missing, errors) == (0, {}, []), (out, errors)
    assert "publication 'spark_cdc': absent; the job creates it" in out and "1 table(s)" in out
