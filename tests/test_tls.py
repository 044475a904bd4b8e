"""TLS to the sources (``source.ssl_mode``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``): docs/operating/security.md.

Unit tests check how the settings map onto each driver. Integration tests start a MariaDB and a
PostgreSQL with TLS (a CA, server and client certificates made in a temp folder), whose CDC users
may connect only over TLS (MariaDB ``REQUIRE SSL`` / ``REQUIRE X509``; PostgreSQL ``hostssl``
and ``hostnossl ... reject``). A job that finishes its snapshot and streams changes from such a
server therefore used TLS on every connection it opened: the driver's, the chunk reads' and the
log readers' (MariaDB's binlog dump connection authenticates as the same user).
"""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import yaml
from tls_certs import TlsFiles, make_tls_files, other_ca

from binlog.mysql.config import MySqlSourceConfig
from binlog.mysql.connection import Endpoint, pymysql_tls
from binlog.mysql.fetch import choose_backend
from binlog.mysql.fetch_backends import connectorx_uri, mysqlclient_tls
from binlog.postgres.server import PgSettings
from cdc.app.cli import main
from cdc.app.config import parse_config
from cdc.app.runner import JobRunner
from cdc.app.sandbox.mysql import MariaDbSandbox, Sandbox
from cdc.app.sandbox.postgres import PgEndpoint, PostgresSandbox, ServerTls, start_postgres
from cdc.model.config import TlsSettings, parse_section
from cdc.model.errors import ConfigError
from cdc.model.schema import Column, TableId, TableSchema
from sinks.delta.tables import read_table

CERT_USER = "cdcx"  # the user that must present a client certificate (its CN)
CDC_GRANTS = "SELECT, REPLICATION SLAVE, REPLICATION CLIENT"
PASSWORD_ENV = "TEST_TLS_PASSWORD"


# --- the mapping onto each driver (no server) ----------------------------------------------------

def test_config_needs_a_ca_to_verify_and_names_the_key(tmp_path: Path) -> None:
    base = {"username": "u", "tables": ["d\\.t"]}
    with pytest.raises(ConfigError, match=r"source\.ssl_ca: required when ssl_mode is 'verify-full'"):
        parse_section(MySqlSourceConfig, {**base, "ssl_mode": "verify-full"}, "source")
    with pytest.raises(ConfigError, match=r"source\.ssl_ca: .*nothing\.pem' is not a file"):
        parse_section(MySqlSourceConfig, {**base, "ssl_mode": "verify-ca", "ssl_ca": str(tmp_path / "nothing.pem")},
                      "source")
    pem = tmp_path / "x.pem"
    pem.write_text("x")
    with pytest.raises(ConfigError, match=r"source\.ssl_key: ssl_cert and ssl_key go together"):
        parse_section(MySqlSourceConfig, {**base, "ssl_cert": str(pem)}, "source")
    with pytest.raises(ConfigError, match=r"ssl_mode 'disable' uses no TLS"):
        parse_section(MySqlSourceConfig, {**base, "ssl_mode": "disable", "ssl_ca": str(pem)}, "source")
    with pytest.raises(ConfigError, match=r"fetch_backend 'connectorx' cannot present the client certificate"):
        parse_section(MySqlSourceConfig, {**base, "fetch_backend": "connectorx", "ssl_cert": str(pem),
                                          "ssl_key": str(pem)}, "source")
    config = parse_section(MySqlSourceConfig, base, "source")
    assert config.tls == TlsSettings("prefer")  # the default: both clients' own default


def test_pymysql_mapping() -> None:
    assert pymysql_tls(TlsSettings("disable")) == {"ssl_disabled": True}
    assert pymysql_tls(TlsSettings("prefer")) == {}  # pymysql's own preferred mode
    ctx = pymysql_tls(TlsSettings("require"))["ssl"]
    assert not ctx.check_hostname and ctx.verify_mode.name == "CERT_NONE"


def test_connectorx_and_mysqlclient_mapping() -> None:
    def uri(tls: TlsSettings) -> str:
        return connectorx_uri(Endpoint("127.0.0.1", 3306, "u", "p w", tls=tls))

    assert uri(TlsSettings("disable")).endswith("&ssl-mode=DISABLED")
    assert uri(TlsSettings("require", ca="/c a.pem")).endswith("&ssl-mode=VERIFY_CA&ssl-ca=/c%20a.pem")
    assert uri(TlsSettings("verify-full", ca="/c.pem")).endswith("&ssl-mode=VERIFY_IDENTITY&ssl-ca=/c.pem")
    with pytest.raises(ConfigError, match=r"source\.fetch_backend: connectorx cannot present"):
        uri(TlsSettings("verify-full", ca="/c.pem", cert="/x.pem", key="/x.key"))
    assert mysqlclient_tls(TlsSettings("verify-full", ca="/c.pem", cert="/x.pem", key="/x.key")) == {
        "ssl_mode": "VERIFY_IDENTITY", "ssl": {"ca": "/c.pem", "cert": "/x.pem", "key": "/x.key"}}
    assert mysqlclient_tls(TlsSettings("disable")) == {"ssl_mode": "DISABLED"}


def test_auto_backend_skips_connectorx_for_a_client_certificate() -> None:
    schema = TableSchema(TableId("d", "t"), (Column("id", "int", "int", False, arrow=pa.int32()),), ("id",), "mysql")
    with_cert = TlsSettings("verify-full", ca="/c.pem", cert="/x.pem", key="/x.key")
    assert choose_backend(schema, "auto", TlsSettings("verify-full", ca="/c.pem")).name in ("connectorx", "mysqlclient",
                                                                                             "pymysql")
    assert choose_backend(schema, "auto", with_cert).name != "connectorx"
    with pytest.raises(ConfigError, match=r"source\.fetch_backend: connectorx cannot present"):
        choose_backend(schema, "connectorx", with_cert)


def test_postgres_conninfo_and_repr() -> None:
    settings = PgSettings("h", 5432, "u", "s3cr3t-pg", "db", 5.0,
                          TlsSettings("verify-full", ca="/c.pem", cert="/x.pem", key="/x.key"))
    assert settings.tls_conninfo() == {"sslmode": "verify-full", "sslrootcert": "/c.pem", "sslcert": "/x.pem",
                                       "sslkey": "/x.key"}
    assert PgSettings("h", 1, "u", "p", "db").tls_conninfo() == {"sslmode": "prefer"}
    assert "s3cr3t-pg" not in repr(settings)
    assert pickle.loads(pickle.dumps(settings)) == settings  # travels to executors


# --- servers with TLS ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"), client_cn=CERT_USER)


@pytest.fixture(scope="module")
def wrong_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return other_ca(tmp_path_factory.mktemp("other-ca"))


@pytest.fixture(scope="module")
def tls_mariadb(certs: TlsFiles) -> Iterator[Sandbox]:
    """MariaDB with TLS; ``cdc`` must use TLS (REQUIRE SSL), ``cdcx`` a client certificate (X509)."""
    box = MariaDbSandbox(extra_args=[f"--ssl-ca={certs.ca}", f"--ssl-cert={certs.server_cert}",
                                     f"--ssl-key={certs.server_key}"]).start()
    try:
        with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
            for host in ("localhost", "127.0.0.1", "%"):
                cur.execute("ALTER USER 'cdc'@%s REQUIRE SSL", (host,))
                cur.execute("CREATE USER %s@%s IDENTIFIED BY %s REQUIRE X509", (CERT_USER, host, box.cdc.password))
                cur.execute(f"GRANT {CDC_GRANTS} ON *.* TO %s@%s", (CERT_USER, host))
        yield box
    finally:
        box.stop()


@pytest.fixture(scope="module")
def tls_postgres(certs: TlsFiles) -> Iterator[PostgresSandbox]:
    """PostgreSQL with TLS; ``cdc`` only over TLS (password), ``cdcx`` only with a client certificate."""
    box = start_postgres(tls=ServerTls(certs.ca, certs.server_cert, certs.server_key), hba_lines=[
        "hostnossl all cdc,cdcx all reject",
        "hostssl all cdc all scram-sha-256",
        f"hostssl all {CERT_USER} all cert",
    ])
    try:
        with contextlib.closing(box.admin.connect()) as conn:
            conn.execute(f"CREATE ROLE {CERT_USER} LOGIN REPLICATION")
        yield box
    finally:
        box.stop()


def _mysql_source(box: Sandbox, database: str, certs: TlsFiles, user: str, **tls: Any) -> dict[str, Any]:
    return {"hostname": "127.0.0.1", "port": box.cdc.port, "username": user, "password": "${" + PASSWORD_ENV + "}",
            "tables": [f"{database}\\..*"], "chunk_size": 50, "server_id": "5400-5403",
            "ssl_mode": "verify-full", "ssl_ca": str(certs.ca), **tls}


def _job(source: dict[str, Any], workdir: Path) -> dict[str, Any]:
    return {"source": source, "sink": {"type": "delta", "path": str(workdir / "lake"), "register_tables": False},
            "checkpoint": str(workdir / "checkpoint"), "parallelism": 2}


@pytest.fixture
def tls_password(monkeypatch: pytest.MonkeyPatch, tls_mariadb: Sandbox) -> str:
    monkeypatch.setenv(PASSWORD_ENV, tls_mariadb.cdc.password)
    return tls_mariadb.cdc.password


def _ssl_accepts(box: Sandbox) -> int:
    with contextlib.closing(box.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
        return int(cur.fetchone()[1])


@pytest.mark.parametrize(("client_cert", "backend"), [(False, "connectorx"), (True, "mysqlclient"), (True, "pymysql")],
                         ids=["ca-connectorx", "client-cert-mysqlclient", "client-cert-pymysql"])
def test_mysql_job_over_verified_tls(client_cert: bool, backend: str, spark: Any, tls_mariadb: Sandbox,
                                     certs: TlsFiles, tls_password: str, tmp_path: Path) -> None:
    """The chunk reads go through each fetch backend that can use the TLS settings (connectorx
    cannot present a client certificate)."""
    database = tls_mariadb.create_database()
    with contextlib.closing(tls_mariadb.admin.connect(database)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(120)))
    extra: dict[str, Any] = {"fetch_backend": backend}
    if client_cert:
        extra.update(ssl_cert=str(certs.client_cert), ssl_key=str(certs.client_key))
    user = CERT_USER if client_cert else "cdc"
    config = parse_config(_job(_mysql_source(tls_mariadb, database, certs, user, **extra), tmp_path))
    endpoint = Endpoint("127.0.0.1", tls_mariadb.cdc.port, user, tls_password, tls=config.source.tls)
    with contextlib.closing(endpoint.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1], "the connection is not encrypted"
    accepts = _ssl_accepts(tls_mariadb)
    JobRunner(config, spark).run(once=True)  # snapshot (chunk reads on executors) + binlog
    with contextlib.closing(tls_mariadb.admin.connect(database)) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'changed' WHERE id < 5")
        cur.execute("DELETE FROM t WHERE id >= 100")
        cur.execute("INSERT INTO t VALUES (500, 'new')")
    JobRunner(config, spark).run(once=True)  # the changes come through the binlog stream
    rows = {r["id"]: r["v"] for r in read_table(str(tmp_path / "lake" / database / "t")).to_pylist()}
    assert len(rows) == 101 and rows[0] == "changed" and rows[500] == "new" and 100 not in rows
    # Every connection of the user is TLS (REQUIRE SSL/X509); the server counted the handshakes.
    assert _ssl_accepts(tls_mariadb) - accepts >= 4


def test_connectorx_prefer_follows_the_server(mysql_server: Sandbox, tls_mariadb: Sandbox) -> None:
    """connectorx's PREFERRED fails without TLS on the server: ``prefer`` asks the server first."""
    def uri(box: Sandbox) -> str:
        return connectorx_uri(Endpoint("127.0.0.1", box.admin.port, "root", "", tls=TlsSettings("prefer")))

    assert uri(tls_mariadb).endswith("&ssl-mode=REQUIRED")
    with contextlib.closing(mysql_server.admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'have_ssl'")
        offers = cur.fetchone()[1] == "YES"
    assert "ssl-mode" in uri(mysql_server) if offers else "ssl-mode" not in uri(mysql_server)


def _run_cli(raw: dict[str, Any], workdir: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    path = workdir / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", "--config", str(path), "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not any("Traceback" in line for line in err), err
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors


def test_mysql_without_tls_is_refused_naming_ssl_mode(tls_mariadb: Sandbox, certs: TlsFiles, tls_password: str,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _mysql_source(tls_mariadb, "db", certs, "cdc", ssl_mode="disable")
    del source["ssl_ca"]
    errors = _run_cli(_job(source, tmp_path), tmp_path, capsys)
    assert "source.ssl_mode" in errors[0] and tls_password not in errors[0]


def test_mysql_wrong_ca_is_refused_naming_ssl_ca(tls_mariadb: Sandbox, certs: TlsFiles, wrong_ca: Path,
                                                 tls_password: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    source = _mysql_source(tls_mariadb, "db", certs, "cdc", ssl_ca=str(wrong_ca))
    errors = _run_cli(_job(source, tmp_path), tmp_path, capsys)
    assert re.search(r"source\.ssl_ca: the server's certificate is not signed by .*other-ca\.pem", errors[0])


def _pg_source(box: PostgresSandbox, database: str, certs: TlsFiles, user: str, **tls: Any) -> dict[str, Any]:
    return {"type": "postgres", "hostname": "127.0.0.1", "port": box.cdc.port, "username": user,
            "password": "${" + PASSWORD_ENV + "}", "database": database, "tables": ["public\\..*"],
            "chunk_size": 50, "ssl_mode": "verify-full", "ssl_ca": str(certs.ca), **tls}


@pytest.fixture
def pg_tls_database(tls_postgres: PostgresSandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(PASSWORD_ENV, tls_postgres.cdc.password)
    name = tls_postgres.create_database()
    with contextlib.closing(tls_postgres.admin.connect(name)) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {CERT_USER}")
        conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {CERT_USER}")
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO t SELECT i, 'v' || i FROM generate_series(0, 119) i")
    try:
        yield name
    finally:
        tls_postgres.drop_database(name)


@pytest.mark.parametrize("client_cert", [False, True], ids=["ca", "client-cert"])
def test_postgres_job_over_verified_tls(client_cert: bool, spark: Any, tls_postgres: PostgresSandbox,
                                        pg_tls_database: str, certs: TlsFiles, tmp_path: Path) -> None:
    extra = {"ssl_cert": str(certs.client_cert), "ssl_key": str(certs.client_key)} if client_cert else {}
    user = CERT_USER if client_cert else "cdc"
    config = parse_config(_job(_pg_source(tls_postgres, pg_tls_database, certs, user, **extra), tmp_path))
    settings = PgSettings("127.0.0.1", tls_postgres.cdc.port, user, tls_postgres.cdc.password, pg_tls_database,
                          tls=config.source.tls)
    with contextlib.closing(settings.connect()) as conn:
        row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
        assert row == (True,)
    JobRunner(config, spark).run(once=True)
    admin = tls_postgres.admin
    with contextlib.closing(admin.connect(pg_tls_database)) as conn:
        conn.execute("UPDATE t SET v = 'changed' WHERE id < 5")
        conn.execute("DELETE FROM t WHERE id >= 100")
        conn.execute("INSERT INTO t VALUES (500, 'new')")
    JobRunner(config, spark).run(once=True)
    rows = {r["id"]: r["v"] for r in read_table(str(tmp_path / "lake" / "public" / "t")).to_pylist()}
    assert len(rows) == 101 and rows[0] == "changed" and rows[500] == "new" and 100 not in rows
    # No session of the CDC roles ever ran without TLS: pg_hba.conf rejects them (hostnossl reject).
    with contextlib.closing(admin.connect(pg_tls_database)) as conn:
        plain = conn.execute("SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                             "WHERE a.usename IN ('cdc', %s) AND NOT s.ssl", (CERT_USER,)).fetchone()
        assert plain == (0,)


def test_postgres_without_tls_is_refused_naming_ssl_mode(tls_postgres: PostgresSandbox, pg_tls_database: str,
                                                         certs: TlsFiles, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = _pg_source(tls_postgres, pg_tls_database, certs, "cdc", ssl_mode="disable")
    del source["ssl_ca"]
    errors = _run_cli(_job(source, tmp_path), tmp_path, capsys)
    assert "source.ssl_mode" in errors[0] and tls_postgres.cdc.password not in errors[0]


def test_postgres_wrong_ca_is_refused_naming_ssl_ca(tls_postgres: PostgresSandbox, pg_tls_database: str,
                                                    certs: TlsFiles, wrong_ca: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    source = _pg_source(tls_postgres, pg_tls_database, certs, "cdc", ssl_ca=str(wrong_ca))
    errors = _run_cli(_job(source, tmp_path), tmp_path, capsys)
    assert re.search(r"source\.ssl_ca: the server's certificate is not signed by .*other-ca\.pem", errors[0])


def test_admin_endpoint_still_connects(tls_postgres: PostgresSandbox) -> None:
    """The sandbox's own admin connections (psycopg's default prefer) keep working with TLS on."""
    admin: PgEndpoint = tls_postgres.admin
    with contextlib.closing(admin.connect()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.1", port=admin.port, user="cdc", password="x", dbname="postgres",
                        sslmode="disable", connect_timeout=5).close()
