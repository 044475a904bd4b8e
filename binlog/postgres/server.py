"""Server facts and start-up checks: connections, LSNs, the slot and the publication (driver,
except :func:`borrowed`, :func:`copy_out`, :func:`flush_lsn`, :func:`wait_for_committing` and
:func:`with_slot`, which executors use too)."""

from __future__ import annotations

import contextlib
import io
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import errors as pgerrors

from binlog.postgres.pgoutput import Begin, decode
from binlog.postgres.positions import LsnOffset, format_lsn, parse_lsn
from binlog.postgres.types import SESSION_SETTINGS, quote_ident, sql_table
from cdc.model.config import TlsSettings
from cdc.model.errors import (
    AuthenticationFailed,
    BinlogNotConfigured,
    BinlogPurged,
    CdcError,
    ConfigError,
    MissingPrivilege,
    SourceUnreachable,
    Terminal,
    Transient,
)
from cdc.model.schema import TableId

T = TypeVar("T")
S = TypeVar("S")  # a session kept by IdleSessions
log = logging.getLogger(__name__)


class SlotBusy(CdcError, Transient):
    """The replication slot stayed in use by another session longer than ``source.slot_wait_s``."""


class SlotInUse(CdcError, Terminal):
    """The job's replication slot is held by another consumer at start-up."""


class PgConnection(psycopg.Connection[Any]):
    """A psycopg connection that answers the planner's ``ping`` (driver)."""

    def ping(self, reconnect: bool = False) -> None:
        self.execute("SELECT 1")


@dataclass(frozen=True)
class PgSettings:
    """Where and as whom the CDC role connects.

    Attributes:
        host: host name or address.
        port: TCP port.
        user: the CDC role.
        password: its password (never in ``repr``).
        database: the captured database.
        connect_timeout: seconds.
        tls: ``source.ssl_*``; libpq takes them as they are (:meth:`tls_conninfo`).
    """

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    connect_timeout: float = 10.0
    tls: TlsSettings = field(default_factory=TlsSettings)

    def tls_conninfo(self) -> dict[str, str]:
        """libpq's ``sslmode``, ``sslrootcert``, ``sslcert`` and ``sslkey`` for ``tls``.

        The modes have libpq's names and meaning; with ``sslrootcert`` libpq makes ``require``
        verify the chain (as ``verify-ca``).
        """
        params: dict[str, str] = {"sslmode": self.tls.mode}
        for key, value in (("sslrootcert", self.tls.ca), ("sslcert", self.tls.cert), ("sslkey", self.tls.key)):
            if value is not None and self.tls.mode != "disable":
                params[key] = value
        return params

    def conninfo_params(self) -> dict[str, str]:
        """libpq's connection parameters: the address, role and password (never log them), the
        database, :data:`SESSION_SETTINGS` as ``options``, and :meth:`tls_conninfo` (psycopg's
        sessions and the ADBC driver's, ``copy_binary.py``, connect with the same)."""
        options = " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_SETTINGS.items())
        return {"host": self.host, "port": str(self.port), "user": self.user, "password": self.password,
                "dbname": self.database, "connect_timeout": str(max(1, int(self.connect_timeout))),
                "application_name": "spark-cdc", "options": options, **self.tls_conninfo()}

    def connect(self) -> PgConnection:
        """An autocommit connection with :data:`SESSION_SETTINGS` (driver or executor).

        Raises:
            SourceUnreachable: nothing answers at the address.
            AuthenticationFailed: the server refused the role or password.
            ConfigError: the TLS handshake failed, or the server refuses this ``ssl_mode`` (the
                message names the ``source.ssl_*`` key).
        """
        try:
            return PgConnection.connect(autocommit=True, **self.conninfo_params())  # type: ignore[arg-type]
        except psycopg.OperationalError as exc:
            raise _connect_error(exc, self) from None


class IdleSessions(Generic[S]):
    """One idle session per key, per process, kept between an executor's pieces of work (Spark
    reuses its Python workers): a new session forks a server backend and authenticates, 20 ms of
    a worker's time per snapshot chunk (py-spy, issue #16), a tenth of what it spends on a chunk.

    A kept session is checked with ``alive`` first (the server may have restarted, or a DBA ended
    the session): a dead one is replaced. A session is kept only when the work returned normally
    and ``reusable`` says so; one that saw an error is closed.
    """

    def __init__(self, close: Callable[[S], None]) -> None:
        self._idle: dict[Any, S] = {}
        self._lock = threading.Lock()
        self._close = close

    @contextlib.contextmanager
    def borrowed(self, key: Any, connect: Callable[[], S], alive: Callable[[S], bool],
                 reusable: Callable[[S], bool] = lambda _: True) -> Iterator[S]:
        with self._lock:
            conn = self._idle.pop(key, None)
        if conn is not None and not alive(conn):
            self._close(conn)
            conn = None
        if conn is None:
            conn = connect()
        try:
            yield conn
        except BaseException:
            self._close(conn)
            raise
        if not reusable(conn):
            self._close(conn)
            return
        with self._lock:
            other, self._idle[key] = self._idle.get(key), conn
        if other is not None:
            self._close(other)  # another thread's, returned meanwhile


def _answers(conn: PgConnection) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def _idle_in_no_transaction(conn: PgConnection) -> bool:
    return not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


_SESSIONS: IdleSessions[PgConnection] = IdleSessions(lambda conn: conn.close())


def borrowed(settings: PgSettings) -> contextlib.AbstractContextManager[PgConnection]:
    """A psycopg connection for one piece of executor work (a chunk read), reused by the next one
    in this process (:class:`IdleSessions`); kept only with no transaction open."""
    key = (settings.host, settings.port, settings.user, settings.password, settings.database,
           tuple(sorted(settings.tls_conninfo().items())))
    return _SESSIONS.borrowed(key, settings.connect, _answers, _idle_in_no_transaction)


def _connect_error(exc: psycopg.OperationalError, s: PgSettings) -> CdcError:
    text = _scrub(str(exc), s.password)
    where = f"{s.host}:{s.port}"
    tls = _tls_problem(text, s)
    if tls is not None:
        return ConfigError(f"TLS to PostgreSQL at {where} failed: {tls}", key=tls.split(":")[0], address=where)
    if "password authentication failed" in text or "no password supplied" in text or \
            "pg_hba.conf" in text or ("role" in text and "does not exist" in text):
        return AuthenticationFailed(f"PostgreSQL at {where} refused role {s.user!r}: {text.strip()}. Check "
                                    "source.username and source.password (or password_file)", address=where)
    if "database" in text and "does not exist" in text:
        return ConfigError(f"source.database: {s.database!r} does not exist on {where}", key="source.database")
    return SourceUnreachable(f"cannot reach PostgreSQL at {where}: {text.strip()}. Check source.hostname and "
                             "source.port, and that the server listens there", address=where)


# libpq messages that mean "TLS failed" (matched lower-case; never the host name alone).
_TLS_MARKERS = ("ssl error", "ssl syscall error", "ssl connection has been closed", "certificate", "private key",
                "sslmode value", "ssl negotiation")


def _tls_problem(text: str, s: PgSettings) -> str | None:
    """``"source.<key>: what is wrong"`` when libpq's message is about TLS, else None."""
    lowered = text.lower()
    if "no encryption" in lowered and "pg_hba.conf" in lowered:
        return (f"source.ssl_mode: the server accepts role {s.user!r} only over TLS (pg_hba.conf hostssl), and "
                f"ssl_mode is {s.tls.mode!r}: set source.ssl_mode to verify-full (with source.ssl_ca) or require")
    if "certificate verify failed" in lowered:
        return (f"source.ssl_ca: the server's certificate is not signed by {s.tls.ca or 'a trusted CA'}: give "
                "the CA that signed it")
    if "does not match host name" in lowered or "server certificate for" in lowered:
        return ("source.hostname: the server's certificate does not name this host (ssl_mode verify-full "
                "checks it): connect by a name the certificate lists, or use ssl_mode verify-ca")
    if "server does not support ssl" in lowered:
        return (f"source.ssl_mode: {s.tls.mode!r} needs TLS, but the server does not offer it: turn ssl on in "
                "postgresql.conf, or set ssl_mode to prefer or disable")
    if any(marker in lowered for marker in _TLS_MARKERS):
        return f"source.ssl_mode: the TLS handshake failed ({text.strip()}): check source.ssl_mode, ssl_ca, " \
               "ssl_cert and ssl_key"
    return None


def _scrub(text: str, password: str) -> str:
    return text.replace(password, "***") if password else text


def copy_out(conn: Any, statement: str) -> bytes:
    """All the data of one ``COPY ... TO STDOUT`` (executor: a chunk read).

    Read through psycopg's libpq layer (``psycopg.pq``), one ``PQgetCopyData`` per row into one
    buffer: psycopg's ``Copy`` iteration runs a Python generator and its wait loop per row,
    which took 2.5x the CPU (243 against 96 ms for 131,072 rows of TPC-DS customer). The
    connection must be idle (an autocommit one, as :func:`borrowed` lends); it is idle again
    on return.

    Raises:
        psycopg.Error: the server refused or ended the COPY (the class psycopg raises for it:
            ``InsufficientPrivilege``, ``QueryCanceled``, ...), or the connection broke.
    """
    pg = conn.pgconn
    pg.send_query(statement.encode())
    while pg.flush():  # a non-blocking connection (psycopg's): the statement may not be sent yet
        readable, _, _ = select.select([pg.socket], [pg.socket], [])
        if readable:
            pg.consume_input()
    started = _next_result(pg)
    if started is None or started.status != psycopg.pq.ExecStatus.COPY_OUT:
        _drain(pg)
        raise _result_error(started, conn)
    buf, get = io.BytesIO(), pg.get_copy_data
    while True:
        n, data = get(1)
        if n > 0:
            buf.write(data)
        elif n == 0:  # nothing buffered: wait for the socket
            _readable(pg)
            pg.consume_input()
        else:  # -1: the COPY's data has ended; its outcome follows
            break
    done = _next_result(pg)
    _drain(pg)
    if done is None or done.status != psycopg.pq.ExecStatus.COMMAND_OK:
        raise _result_error(done, conn)
    return buf.getvalue()


def _readable(pg: Any) -> None:
    select.select([pg.socket], [], [])


def _next_result(pg: Any) -> Any:
    while pg.is_busy():
        _readable(pg)
        pg.consume_input()
    return pg.get_result()


def _drain(pg: Any) -> None:
    while _next_result(pg) is not None:
        pass


def _result_error(result: Any, conn: Any) -> psycopg.Error:
    if result is None:
        return psycopg.OperationalError(f"the server ended the COPY without a result: {conn.pgconn.error_message!r}")
    return pgerrors.error_from_result(result, encoding=conn.info.encoding)


def flush_lsn(conn: Any) -> LsnOffset:
    """The WAL flush position: every transaction committed before it is decodable."""
    row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    return LsnOffset(parse_lsn(row[0]))


def wait_for_committing(conn: Any, timeout_s: float) -> None:
    """Wait until the transactions running now have ended (executor).

    A transaction's commit record reaches the WAL a moment before other sessions see it as
    committed. A chunk read records its LW, then calls this, then SELECTs: every transaction
    that committed before the LW is then visible to the SELECT, so none falls between the rows
    and the log after the LW.

    Raises:
        SlotBusy: they still run after ``timeout_s`` (the message names their pids).
    """
    row = conn.execute("SELECT coalesce(array_agg(x::text), '{}') FROM pg_snapshot_xip(pg_current_snapshot()) x"
                       ).fetchone()
    running: list[str] = list(row[0]) if row else []
    if not running:
        return
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while True:
        row = conn.execute("SELECT count(*) FROM unnest(%s::xid8[]) x "
                           "WHERE NOT pg_visible_in_snapshot(x, pg_current_snapshot())", (running,)).fetchone()
        if not row or row[0] == 0:
            return
        if time.monotonic() > deadline:
            pids = conn.execute("SELECT string_agg(pid::text, ', ') FROM pg_stat_activity "
                                "WHERE backend_xid::text = ANY(%s)", (running,)).fetchone()
            raise SlotBusy(f"a snapshot chunk waited {timeout_s:.0f}s for transactions that were running when it "
                           f"took its low watermark (backend pids: {pids[0] if pids else '?'}); end them or raise "
                           "source.snapshot_wait_s")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def with_slot(action: Callable[[], T], slot: str, wait_s: float) -> T:
    """Run ``action`` (which uses the slot), retrying while another session holds the slot:
    PostgreSQL serves a slot to one session at a time (executor or driver).

    Raises:
        SlotBusy: the slot stayed busy for ``wait_s``.
    """
    deadline, pause = time.monotonic() + wait_s, 0.005
    while True:
        try:
            return action()
        except pgerrors.ObjectInUse as exc:
            if time.monotonic() > deadline:
                raise SlotBusy(f"replication slot {slot!r} stayed in use by another session for {wait_s:.0f}s: "
                               f"{str(exc).strip()}", slot=slot) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


# --- start-up checks (driver) -----------------------------------------------------------------

def check_wal_level(conn: Any) -> None:
    """Raises BinlogNotConfigured unless ``wal_level = logical``."""
    (level,) = conn.execute("SHOW wal_level").fetchone()
    if level != "logical":
        raise BinlogNotConfigured(f"wal_level is {level!r}, CDC needs 'logical'. Run as a superuser: "
                                  "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL "
                                  "(max_replication_slots and max_wal_senders must be at least 1)")


def check_role(conn: Any) -> None:
    """Raises MissingPrivilege unless the role may use replication slots."""
    user, replication, superuser = conn.execute(
        "SELECT current_user, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (replication or superuser):
        raise MissingPrivilege(f"role {user!r} lacks REPLICATION (needed to read a logical replication slot). "
                               f"Run as a superuser: ALTER ROLE {quote_ident(user)} REPLICATION;", role=user)


def check_tables(conn: Any, tables: Sequence[TableId]) -> None:
    """Raises MissingPrivilege when the role cannot SELECT a table (one GRANT per table), and
    warns about tables that publish no usable old row (no key, replica identity DEFAULT or
    NOTHING: PostgreSQL then refuses their updates and deletes)."""
    user = conn.execute("SELECT current_user").fetchone()[0]
    missing, no_identity = [], []
    for t in tables:
        row = conn.execute(
            "SELECT has_schema_privilege(n.oid, 'USAGE'), has_table_privilege(c.oid, 'SELECT'), c.relreplident, "
            "EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
            (t.db, t.table)).fetchone()
        if row is None:
            continue
        usage, select, identity, keyed = row
        if not usage:
            missing.append(f"GRANT USAGE ON SCHEMA {quote_ident(t.db)} TO {quote_ident(user)};")
        if not select:
            missing.append(f"GRANT SELECT ON {sql_table(t)} TO {quote_ident(user)};")
        if identity == "n" or (identity in ("d", "i") and not keyed):
            no_identity.append(f"ALTER TABLE {sql_table(t)} REPLICA IDENTITY FULL;")
    if missing:
        raise MissingPrivilege(f"role {user!r} cannot read {len(missing)} of the configured table(s). Run: "
                               + " ".join(dict.fromkeys(missing)), role=user)
    if no_identity:
        log.warning("table(s) without a primary key or replica identity: PostgreSQL refuses their updates and "
                    "deletes while they are published. Run: %s", " ".join(no_identity))


def ensure_publication(conn: Any, name: str, tables: Sequence[TableId]) -> None:
    """Create the publication (FOR TABLE ...) or add missing tables to it, when the role may;
    otherwise raise MissingPrivilege/ConfigError with the exact statement to run."""
    row = conn.execute("SELECT puballtables, pubinsert AND pubupdate AND pubdelete FROM pg_publication "
                       "WHERE pubname = %s", (name,)).fetchone()
    if row is None and not tables:
        return  # nothing to publish yet (discovery says so next)
    listed = ", ".join(sql_table(t) for t in tables)
    if row is None:
        statement = f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE {listed};"
        _run_or_explain(conn, statement, f"publication {name!r} does not exist and the CDC role may not create it")
        return
    alltables, all_ops = row
    if not all_ops:
        raise ConfigError(f"publication {name!r} does not publish inserts, updates and deletes. Run: "
                          f"ALTER PUBLICATION {quote_ident(name)} SET (publish = 'insert, update, delete, truncate');",
                          key="source.publication_name")
    if alltables:
        return
    published = {TableId(s, t) for s, t in conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,)).fetchall()}
    absent = [t for t in tables if t not in published]
    if absent:
        statement = f"ALTER PUBLICATION {quote_ident(name)} ADD TABLE {', '.join(sql_table(t) for t in absent)};"
        _run_or_explain(conn, statement, f"publication {name!r} misses table(s) "
                        f"{', '.join(map(str, absent))} and the CDC role may not add them")


def _run_or_explain(conn: Any, statement: str, problem: str) -> None:
    try:
        conn.execute(statement)
    except (pgerrors.InsufficientPrivilege, pgerrors.ObjectNotInPrerequisiteState) as exc:
        raise MissingPrivilege(f"{problem} ({str(exc).strip()}). Run as the tables' owner or a superuser: "
                               f"{statement}", statement=statement) from None


@dataclass(frozen=True)
class SlotInfo:
    """A replication slot as ``pg_replication_slots`` shows it."""

    plugin: str
    database: str
    active_pid: int | None
    confirmed: LsnOffset | None


def slot_info(conn: Any, slot: str) -> SlotInfo | None:
    row = conn.execute("SELECT plugin, database, active_pid, confirmed_flush_lsn::text FROM pg_replication_slots "
                       "WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    plugin, database, pid, confirmed = row
    return SlotInfo(plugin or "", database or "", pid, LsnOffset(parse_lsn(confirmed)) if confirmed else None)


def ensure_slot(conn: Any, slot: str, database: str, wait_s: float = 120.0) -> SlotInfo:
    """Create the pgoutput slot when missing; check it belongs to this database and is free.

    A slot held by a walsender (a streaming replication client) is refused at once. One held by
    a SQL session (the reader of a job that was just killed, finishing its peek) is waited for
    up to ``wait_s`` (``source.slot_wait_s``).

    Raises:
        SlotInUse: another consumer holds it.
        ConfigError: it has another plugin or database.
    """
    info = slot_info(conn, slot)
    if info is None:
        try:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        except pgerrors.DuplicateObject:
            pass  # created by a racing job start: checked below
        except pgerrors.InsufficientPrivilege as exc:
            raise MissingPrivilege(f"cannot create replication slot {slot!r}: {str(exc).strip()}. Run: "
                                   f"ALTER ROLE {quote_ident(conn.info.user)} REPLICATION;") from None
        info = slot_info(conn, slot)
        assert info is not None
    if info.plugin != "pgoutput" or info.database != database:
        raise ConfigError(f"replication slot {slot!r} uses plugin {info.plugin!r} on database {info.database!r}, "
                          f"not pgoutput on {database!r}: set source.slot_name to another name",
                          key="source.slot_name")
    deadline, pause = time.monotonic() + wait_s, 0.01
    while info is not None and info.active_pid is not None:
        streaming = _is_walsender(conn, info.active_pid)
        if streaming or time.monotonic() > deadline:
            raise SlotInUse(_slot_in_use(conn, slot, info.active_pid, streaming, wait_s), slot=slot)
        time.sleep(pause)  # a SQL session's peek ends by itself
        pause = min(pause * 2, 0.2)
        info = slot_info(conn, slot)
    assert info is not None
    return info


def _is_walsender(conn: Any, pid: int) -> bool:
    """True when ``pid`` is a walsender. ``pg_stat_get_wal_senders()`` lists every walsender's
    pid to any role; ``pg_stat_activity`` hides other roles' ``backend_type``."""
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_stat_get_wal_senders() WHERE pid = %s)", (pid,)).fetchone()
    return bool(row and row[0])


def _slot_in_use(conn: Any, slot: str, pid: int, streaming: bool, wait_s: float) -> str:
    app = conn.execute("SELECT application_name, client_addr::text FROM pg_stat_activity WHERE pid = %s",
                       (pid,)).fetchone()
    who = f"{(app[0] if app else '') or 'no application name'} from {(app[1] if app else '') or 'local'}"
    held = (f"a walsender (a streaming replication client: {who})" if streaming else
            f"a SQL session ({who}) for longer than source.slot_wait_s={wait_s:g}s")
    return (f"replication slot {slot!r} is active for another consumer, pid {pid}, {held}: another job or "
            "replication client reads it. Stop that consumer, or give this job its own source.slot_name "
            f"(to free it: SELECT pg_terminate_backend({pid});)")


def check_start(conn: Any, slot: str, start: LsnOffset) -> None:
    """Raises BinlogPurged when the slot was advanced past ``start`` (by another job): the
    changes before its confirmed position are gone."""
    info = slot_info(conn, slot)
    if info is None:
        raise BinlogPurged(f"replication slot {slot!r} no longer exists: the changes since {start} are lost. "
                           "Start again with a new checkpoint (a new snapshot)", slot=slot)
    if info.confirmed is not None and start.is_before(info.confirmed):
        raise BinlogPurged(f"replication slot {slot!r} was advanced to {info.confirmed}, past this job's position "
                           f"{start}: another job shares the slot. Give each job its own source.slot_name, and "
                           "start this one again with a new checkpoint", slot=slot)


def first_commit_at_or_after(conn: Any, slot: str, publication: str, ts_ms: int, upto: LsnOffset,
                             wait_s: float) -> LsnOffset | None:
    """The commit position of the first transaction the slot holds (up to ``upto``) that committed
    at or after ``ts_ms``; None when there is none yet (``startup_mode: timestamp``, driver).

    Peeks the slot without consuming it; only the Begin messages (``B``) leave the server.
    """
    rows = with_slot(lambda: conn.execute(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', "
        "'publication_names', %s) WHERE get_byte(data, 0) = 66", (slot, format_lsn(upto.lsn), publication),
    ).fetchall(), slot, wait_s)
    for (data,) in rows:
        begin = decode(data)
        if isinstance(begin, Begin) and begin.ts_ms >= ts_ms:
            return LsnOffset(begin.final_lsn)
    return None


def advance_slot(conn: Any, slot: str, to: LsnOffset, wait_s: float) -> None:
    """Move the slot's confirmed position forward to ``to`` (never back): WAL before it may
    then be removed (driver; only after the batch ending there is committed)."""
    info = slot_info(conn, slot)
    if info is None or (info.confirmed is not None and not info.confirmed.is_before(to)):
        return
    with_slot(lambda: conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(to.lsn))),
              slot, wait_s)


def copy_slot(conn: Any, slot: str) -> str | None:
    """A temporary copy of ``slot`` for this session (executor): the same confirmed and restart
    positions, no wait for running transactions (a new slot waits for them), dropped by the
    server when the session ends, and free for this session alone (the job's slot serves one
    session at a time). Its name is ``slot``'s, cut, plus the backend's pid. None when every
    one of the server's ``max_replication_slots`` is taken.

    Raises:
        BinlogPurged: ``slot`` no longer exists.
    """
    name = f"{slot[:40]}_piece_{conn.info.backend_pid}"
    drop_slot(conn, name)  # this session's copy from a read that failed before it dropped it
    try:
        conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)", (slot, name))
    except pgerrors.ConfigurationLimitExceeded:
        return None
    except pgerrors.UndefinedObject:
        raise BinlogPurged(f"replication slot {slot!r} no longer exists: start again with a new checkpoint",
                           slot=slot) from None
    return name


def drop_slot(conn: Any, name: str) -> None:
    """Drop this session's slot ``name`` if it exists."""
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE slot_name = %s AND active_pid = pg_backend_pid()", (name,))


def close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.close()
