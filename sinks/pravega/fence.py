"""A transaction's outcome and the fence of an open one, through Pravega's Java client.

Driver side, only while a restart resolves a batch left ``prepared`` (:mod:`sinks.pravega.sink`).
The Python client (``pravega`` 0.3.8) can only ask whether a transaction is open, and cannot abort
one another writer began (``get_txn(id).abort()`` raises ``TxnFailedException``). Pravega's Java
client (``io.pravega:pravega-client`` 0.13, in ``jars/pravega``) can do both, through the
controller: ``TransactionalEventStreamWriter.getTxn(id).checkStatus()`` says ``OPEN``,
``COMMITTING``, ``COMMITTED``, ``ABORTING`` or ``ABORTED`` (``NOT_FOUND`` for a transaction the
controller no longer keeps), and ``abort()`` aborts any open one. Once aborted, the dead driver's
commit of it fails and writes nothing (seen on 0.13: the Python writer's ``commit`` raises, the
stream stays empty).

:class:`JavaTransactions` starts a JVM with ``jars/pravega/*`` only (not Spark's jars) and py4j's
gateway (py4j ships with PySpark) and calls the Java client through it. The gateway is up in about
1 s and the client's first answers take 1.5-3 s more (2 loaded cores); the JVM exits when the driver does
(py4j's ``die_on_exit``: it watches its stdin). Each call waits at most ``operation_timeout_s``
(py4j's read timeout); one that does not answer in time stops the JVM and raises
:class:`JavaClientTimeout`, as the control streams' helper does (:mod:`sinks.pravega.control`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from sinks.base import SinkError
from sinks.pravega.config import PravegaSinkConfig

Status = Literal["OPEN", "COMMITTING", "COMMITTED", "ABORTING", "ABORTED"]
DONE: tuple[Status, ...] = ("COMMITTING", "COMMITTED")  # the controller commits it, whatever comes next
# (ABORTING and ABORTED never commit)
COMMIT_WAIT_S = 120.0  # how long a restart waits for a COMMITTING transaction to be COMMITTED
log = logging.getLogger(__name__)
_JVM_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]  # a few calls: start fast, stay small
_WRITER_ID = "spark-cdc-fence"  # the Java writers only look transactions up and abort them


class PravegaJavaClientMissing(SinkError):
    """Java or the Pravega Java client's jars (``jars/pravega``) are not there."""


class JavaClientTimeout(Exception):
    """The Java client did not answer within ``operation_timeout_s`` (the JVM was stopped)."""


class JavaClientError(Exception):
    """The Java client raised: its exception's first line (``NOT_FOUND`` for a transaction the
    controller does not know)."""


def java_client_jars() -> Path:
    """The folder of the Java client's jars: ``$SPARK_CDC_JARS/pravega``, else the project's
    ``jars/pravega`` (both from ``make setup``; the same rule as :mod:`cdc.spark.jars`)."""
    root = os.environ.get("SPARK_CDC_JARS") or Path(__file__).resolve().parents[2] / "jars"
    return Path(root) / "pravega"


def _java() -> str | None:
    """``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else the ``java`` on PATH (None: none)."""
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java", path=os.path.join(home, "bin")) if home else shutil.which("java")


class JavaTransactions:
    """Pravega's Java client in a JVM of its own, for the transactions of one scope (driver side).

    Args:
        config: the sink's config (controller, scope, auth, TLS, ``operation_timeout_s``).

    Raises:
        PravegaJavaClientMissing: no ``java`` or no jars; the message names the fix.
    """

    def __init__(self, config: PravegaSinkConfig) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway  # type: ignore[import-untyped]

        jars, java = java_client_jars(), _java()
        if java is None or not any(jars.glob("pravega-client-*.jar")):
            raise PravegaJavaClientMissing(
                f"resolving a half-committed batch needs Pravega's Java client: "
                f"{'no `java` on PATH or in JAVA_HOME' if java is None else f'no pravega-client jar in {jars}'}; "
                f"install a JDK 17+ and run `make setup` (it resolves jars/pravega), or point "
                f"SPARK_CDC_JARS at a folder holding pravega/")
        self.timeout_s = config.operation_timeout_s
        port, token, self.proc = launch_gateway(classpath=str(jars / "*"), javaopts=_JVM_OPTIONS,
                                                die_on_exit=True, return_proc=True, java_path=java,
                                                enable_auth=True)
        self.tmp = tempfile.mkdtemp(prefix="spark-cdc-pravega-java-")
        self.gateway = JavaGateway(gateway_parameters=GatewayParameters(
            port=port, auth_token=token, auto_convert=True, read_timeout=self.timeout_s))
        self.jvm = self.gateway.jvm
        self.writers: dict[str, Any] = {}
        try:
            self.factory = self._call("open a client", self._factory, config)
        except BaseException:
            self.close()
            raise

    def _factory(self, config: PravegaSinkConfig) -> Any:
        pravega = self.jvm.io.pravega
        builder = pravega.client.ClientConfig.builder().controllerURI(
            self.jvm.java.net.URI.create(config.controller_uri))
        if config.username is not None:
            secret = config.password.get_secret_value() if config.password is not None else ""
            builder = builder.credentials(pravega.shared.security.auth.DefaultCredentials(secret, config.username))
        if config.tls_cert_path:
            builder = builder.trustStore(self._trust_store(Path(config.tls_cert_path)))
        return pravega.client.EventStreamClientFactory.withScope(config.scope, builder.build())

    def _trust_store(self, certs: Path) -> str:
        """The Java client takes one PEM file of certificates; the Python client's setting is a
        folder of them, so they are joined into one file."""
        if certs.is_file():
            return str(certs)
        joined = Path(self.tmp) / "ca.pem"
        joined.write_bytes(b"\n".join(p.read_bytes() for p in sorted(certs.iterdir()) if p.is_file()))
        return str(joined)

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        """A call into the JVM, answered within ``operation_timeout_s`` or the JVM stopped."""
        from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]

        try:
            return fn(*args)
        except Py4JJavaError as exc:  # the Java client raised (a Py4JError too: caught first)
            raise JavaClientError(f"{what}: {str(exc.java_exception).splitlines()[0]}") from None
        except Py4JError as exc:  # no answer within the read timeout, or the JVM is gone
            self.close()
            raise JavaClientTimeout(f"{what}: no answer from Pravega's Java client in operation_timeout_s="
                                    f"{self.timeout_s:g} s ({str(exc).splitlines()[0]})") from None

    def _writer(self, stream: str) -> Any:
        if stream not in self.writers:
            pravega = self.jvm.io.pravega.client
            self.writers[stream] = self._call(
                f"open a transactional writer of {stream}", self.factory.createTransactionalEventWriter,
                _WRITER_ID, stream, pravega.stream.impl.ByteArraySerializer(),
                pravega.stream.EventWriterConfig.builder().build())
        return self.writers[stream]

    def _txn(self, stream: str, txn_id: int) -> Any | None:
        """The Java client's handle of transaction ``txn_id`` (the Python client's 128-bit id is
        the UUID's bits); None when the controller does not know it (``NOT_FOUND``)."""
        java_id = self.jvm.java.util.UUID.fromString(str(uuid.UUID(int=txn_id)))
        try:
            return self._call(f"look up transaction {txn_id} of {stream}", self._writer(stream).getTxn, java_id)
        except JavaClientError as exc:
            if "NOT_FOUND" in str(exc):
                return None
            raise

    def status(self, stream: str, txn_id: int) -> Status | None:
        """Transaction ``txn_id`` of ``stream``'s state at the controller (None: not known to it)."""
        txn = self._txn(stream, txn_id)
        return None if txn is None else self._status(stream, txn)

    def _status(self, stream: str, txn: Any) -> Status:
        state: Status = self._call(f"check a transaction of {stream}", lambda: txn.checkStatus().toString())
        return state

    def fence(self, stream: str, txn_id: int) -> Status | None:
        """Abort transaction ``txn_id`` of ``stream`` if it is open, and wait until the controller
        has decided it: its state then, ``ABORTING``/``ABORTED`` or, when a commit came first,
        ``COMMITTED`` (None: not known to the controller). A ``COMMITTING`` one is waited for
        until ``COMMITTED`` (:meth:`_until_committed`)."""
        txn = self._txn(stream, txn_id)
        if txn is None:
            return None
        state = self._status(stream, txn)
        if state == "COMMITTING":
            return self._until_committed(stream, txn, txn_id)
        if state != "OPEN":
            return state
        log.info("pravega: transaction %d of %s is open: aborting it (the fence against a late commit)",
                 txn_id, stream)
        with contextlib.suppress(JavaClientError):  # a commit got there first: the status says so
            self._call(f"abort transaction {txn_id} of {stream}", txn.abort)
        deadline = time.monotonic() + self.timeout_s
        while (state := self._status(stream, txn)) == "OPEN":
            if time.monotonic() > deadline:
                raise JavaClientTimeout(f"transaction {txn_id} of {stream} is still open after aborting "
                                        f"it for operation_timeout_s={self.timeout_s:g} s")
            time.sleep(0.2)
        return self._until_committed(stream, txn, txn_id) if state == "COMMITTING" else state

    def _until_committed(self, stream: str, txn: Any, txn_id: int) -> Status:
        """Wait until a ``COMMITTING`` transaction is ``COMMITTED``: until then its events are not
        in the stream, and a transaction of the replay committed first would put the next batch's
        events before them (one key's changes out of order). A controller restarted in the middle
        of a commit resumes it on its own (13 s after its restart in a test here, loaded). Waits at
        most :data:`COMMIT_WAIT_S` (or ``operation_timeout_s`` if longer)."""
        started = time.monotonic()
        deadline = started + max(self.timeout_s, COMMIT_WAIT_S)
        log.info("pravega: transaction %d of %s is committing: waiting until it is committed, so that the "
                 "replay's events come after its own", txn_id, stream)
        while (state := self._status(stream, txn)) == "COMMITTING":
            if time.monotonic() > deadline:
                raise JavaClientTimeout(f"transaction {txn_id} of {stream} is still committing after "
                                        f"{time.monotonic() - started:.0f} s: check the controller's log; a restart "
                                        f"waits for it again")
            time.sleep(0.2)
        log.info("pravega: transaction %d of %s is %s after %.1f s", txn_id, stream, state, time.monotonic() - started)
        return state

    def close(self) -> None:
        """Stop the JVM (never raises)."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        with contextlib.suppress(Exception):
            self.gateway.close()
            # py4j would still tell the JVM about each Java object Python frees, and log an error
            # for each refused connection
            self.gateway._gateway_client.is_connected = False
        shutil.rmtree(self.tmp, ignore_errors=True)
