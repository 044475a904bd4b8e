"""The Pravega sink beyond the contract suite: its configuration, and its exactly-once protocol
at the crash points the contract's single fault does not reach (every stream committed but the
batch not recorded; a batch half committed across two streams, its open transaction fenced
against the dead driver's late commit; a restart after the transaction lease, told committed from
aborted by the controller).

The sink contract (tests/test_sink_contract.py) runs it too; these cases need the real Pravega of
the session (tests/pravega_server.py) but no database and no Spark.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from change_batches import COMPOSITE_KEY, SINGLE_KEY, event, row
from faults import FileFaults, InjectedFault
from pravega_server import read_stream
from test_sink_contract import stage

from cdc.app.config import parse_config
from cdc.app.sandbox.pravega import PravegaSandbox
from cdc.model.debezium.codec import decode_value
from cdc.model.errors import ConfigError
from cdc.model.schema import TableId, TableSchema
from sinks.pravega.config import PravegaSinkConfig
from sinks.pravega.sink import PravegaSink

_SOURCE = {"type": "mysql", "hostname": "h", "username": "u", "tables": ["d.t"]}


def _config(server: PravegaSandbox, tmp: Path, **over: Any) -> PravegaSinkConfig:
    return PravegaSinkConfig(controller_uri=server.controller_uri, topic_prefix=f"t{abs(hash(str(tmp))) % 10**8}",
                             segments=2, staging_path=str(tmp / "staging"), **over)


# --- configuration (no server) ----------------------------------------------------------------


def test_names_pravega_refuses_are_replaced_and_secrets_never_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRAVEGA_PASSWORD", "s3cr3t-pw")
    raw = {"checkpoint": "/tmp/c", "source": _SOURCE,
           "sink": {"type": "pravega", "controller_uri": "tcp://h:9090", "topic_prefix": "my_app",
                    "username": "admin", "password": "${PRAVEGA_PASSWORD}", "streams": {"d.orders": "orders-v2"}}}
    config = parse_config(raw)
    sink = config.sink[0]
    assert isinstance(sink, PravegaSinkConfig) and sink.password is not None
    assert sink.password.get_secret_value() == "s3cr3t-pw"
    assert "s3cr3t" not in repr(sink) and "s3cr3t" not in str(config)
    assert sink.topic(TableId("shop_db", "order_lines")) == "my-app.shop-db.order-lines"
    assert sink.topic(TableId("d", "orders")) == "orders-v2"
    assert sink.schema_changes_topic() == "my-app"
    with pytest.raises(ConfigError, match=r"sink\.controller_uri.*tcp://host:port"):
        parse_config({**raw, "sink": {**raw["sink"], "controller_uri": "http://h:9090"}})
    with pytest.raises(ConfigError, match=r"sink\.tombstones_on_delete.*no key"):
        parse_config({**raw, "sink": {**raw["sink"], "tombstones_on_delete": True}})
    with pytest.raises(ConfigError, match=r"sink\.scope.*refuses `_`"):
        parse_config({**raw, "sink": {**raw["sink"], "scope": "my_scope"}})


def test_without_the_client_package_the_error_names_the_fix() -> None:
    """Python 3.12+ has no wheel of the client: the sink says what to install and where it runs."""
    code = ("import sys; sys.modules['pravega_client'] = None\n"
            "from sinks.pravega.client import client_module, PravegaClientMissing\n"
            "try:\n    client_module()\nexcept PravegaClientMissing as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'spark-cdc[pravega]'" in out and "3.10 and 3.11" in out


def test_the_java_client_names_its_fix_when_missing_and_gives_up_on_a_silent_controller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fence's Java client (no Pravega needed): without its jars the error names `make setup`;
    against a controller that takes connections and never answers, a call fails after
    ``operation_timeout_s`` and the JVM is stopped."""
    from sinks.pravega.fence import JavaClientTimeout, JavaTransactions, PravegaJavaClientMissing

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        config = PravegaSinkConfig(controller_uri=f"tcp://127.0.0.1:{silent.getsockname()[1]}", topic_prefix="t",
                                   staging_path=str(tmp_path), operation_timeout_s=2)
        with monkeypatch.context() as env:
            env.setenv("SPARK_CDC_JARS", str(tmp_path))
            with pytest.raises(PravegaJavaClientMissing, match=r"make setup.*SPARK_CDC_JARS"):
                JavaTransactions(config)
        java = JavaTransactions(config)
        try:
            with pytest.raises(JavaClientTimeout, match=r"operation_timeout_s=2 s"):
                java.status("s", 1)
            assert java.proc.poll() is not None, "the JVM still runs"
        finally:
            java.close()


# --- against the session's server -----------------------------------------------------------------


def _values(config: PravegaSinkConfig, schema: TableSchema) -> list[tuple[str, Any]]:
    """(op, key) of every event of ``schema``'s stream, by a plain reader group."""
    out = []
    for value in read_stream(config.controller_uri, config.scope, config.topic(schema.table_id)):
        record = decode_value(value, schema, options=config.debezium_options())
        assert record is not None
        image = record.before if record.op == "d" else record.after
        assert image is not None
        out.append((record.op, tuple(image[k] for k in schema.primary_key)))
    return out


def _two_table_batch(sink: PravegaSink) -> list[Any]:
    a = stage(sink, SINGLE_KEY, [event("c", None, row(SINGLE_KEY, (k,)), 10 + k) for k in range(4)])
    b = stage(sink, COMPOSITE_KEY, [event("c", None, row(COMPOSITE_KEY, (k, "x")), 20 + k) for k in range(3)])
    return [a, b]


def _opened(config: PravegaSinkConfig, faults: FileFaults) -> PravegaSink:
    sink = PravegaSink(config, "job-1", hooks=faults)
    sink.open({SINGLE_KEY.table_id: SINGLE_KEY, COMPOSITE_KEY.table_id: COMPOSITE_KEY})
    return sink


@pytest.mark.slow
def test_a_batch_committed_in_every_stream_but_not_recorded_is_recorded_and_not_written_again(
        pravega_server: PravegaSandbox, tmp_path: Path) -> None:
    """The sink passes its fault point after writing each stream's transaction and after
    committing each: a crash after the third pass leaves the ``prepared`` record with both
    transactions committed; the restart only records the batch, and each change is in its stream
    once (one stream committed and the other open: the next test)."""
    faults = FileFaults(tmp_path / "faults")
    config = _config(pravega_server, tmp_path)
    sink = _opened(config, faults)
    faults.arm("sink_commit", after=3)
    with pytest.raises(InjectedFault):
        sink.commit(0, _two_table_batch(sink))
    assert len(_values(config, SINGLE_KEY)) + len(_values(config, COMPOSITE_KEY)) == 7
    again = _opened(config, faults)
    assert not any(c.changes for c in again.commit(0, _two_table_batch(again)))  # Spark replays batch 0
    assert sorted(_values(config, SINGLE_KEY)) == [("c", (k,)) for k in range(4)]
    assert sorted(_values(config, COMPOSITE_KEY)) == [("c", (k, "x")) for k in range(3)]


def _crash_keeping_the_writers(sink: PravegaSink, faults: FileFaults, config: PravegaSinkConfig
                               ) -> tuple[dict[str, Any], list[Any]]:
    """Batch 0 of :func:`_two_table_batch`, crashed after the ``prepared`` record and the first
    stream's commit; the dead driver's transaction objects by stream (its ``_publish`` frame's,
    kept by the traceback) and their client and writers (the sink drops its own after a failure,
    which stops their transactions: hold them while the transactions act as that driver's)."""
    writers = [sink.manager, *(sink._txn_writer(config.topic(t.table_id)) for t in (SINGLE_KEY, COMPOSITE_KEY))]
    faults.arm("sink_commit", after=2)  # both written, `prepared`, the first committed
    with pytest.raises(InjectedFault) as crash:
        sink.commit(0, _two_table_batch(sink))
    for entry in crash.traceback:
        if entry.name == "_publish":
            txns: dict[str, Any] = entry.frame.f_locals["txns"]
            return txns, writers
    raise AssertionError("the crash did not come from PravegaSink._publish")


@pytest.mark.slow  # ~70 s: the dead driver's commit of the fenced transaction fails after the client's 60 s of retries
def test_an_open_transaction_is_fenced_so_the_dead_drivers_late_commit_writes_nothing(
        pravega_server: PravegaSandbox, tmp_path: Path) -> None:
    """Crash after the ``prepared`` record and the first stream's commit: the second stream's
    transaction is still open. The restart fences it (aborts it through the Java client); the
    dead driver's commit of it, arriving after that, fails and writes nothing; the replay writes
    that stream once, and the next batch lands once."""
    faults = FileFaults(tmp_path / "faults")
    config = _config(pravega_server, tmp_path)
    txns, _writers = _crash_keeping_the_writers(_opened(config, faults), faults, config)
    open_txn = txns[config.topic(COMPOSITE_KEY.table_id)]
    assert open_txn.is_open()
    assert (len(_values(config, SINGLE_KEY)), len(_values(config, COMPOSITE_KEY))) == (4, 0)
    again = _opened(config, faults)  # the restart resolves batch 0
    try:
        open_txn.commit()  # the dead driver's commit request, arriving late
        late_commit_failed = False
    except Exception:
        late_commit_failed = True
    assert any(c.changes for c in again.commit(0, _two_table_batch(again)))  # Spark replays batch 0
    assert sorted(_values(config, SINGLE_KEY)) == [("c", (k,)) for k in range(4)]
    assert sorted(_values(config, COMPOSITE_KEY)) == [("c", (k, "x")) for k in range(3)]
    assert late_commit_failed, "the fenced transaction's commit went through"
    again.commit(1, [stage(again, SINGLE_KEY, [event("u", row(SINGLE_KEY, (0,)), row(SINGLE_KEY, (0,), c_int=5), 40)])])
    assert _values(config, SINGLE_KEY).count(("u", (0,))) == 1, "the next batch lands once after the recovery"


def test_after_the_lease_the_controller_tells_a_committed_transaction_from_an_aborted_one(
        pravega_server: PravegaSandbox, tmp_path: Path) -> None:
    """A restart later than ``transaction_lease_s``: one stream's transaction committed, the
    other's aborted (as Pravega aborts one whose lease ran out). The controller's answer, not the
    clock, decides: the replay writes only the aborted one's stream, and each change is there once."""
    from sinks.pravega.fence import JavaTransactions

    faults = FileFaults(tmp_path / "faults")
    config = _config(pravega_server, tmp_path)
    txns, _writers = _crash_keeping_the_writers(_opened(config, faults), faults, config)
    committed, aborted = config.topic(SINGLE_KEY.table_id), config.topic(COMPOSITE_KEY.table_id)
    txns[aborted].abort()
    java = JavaTransactions(config)
    try:
        assert java.status(committed, int(txns[committed].get_txn_id())) == "COMMITTED"
        assert java.status(aborted, int(txns[aborted].get_txn_id())) == "ABORTED"
        assert java.status(aborted, 2**100 + 7) is None, "a transaction the controller never had"
    finally:
        java.close()
    late = _opened(config.model_copy(update={"transaction_lease_s": 1e-9}), faults)
    assert any(c.changes for c in late.commit(0, _two_table_batch(late)))
    assert sorted(_values(config, SINGLE_KEY)) == [("c", (k,)) for k in range(4)]
    assert sorted(_values(config, COMPOSITE_KEY)) == [("c", (k, "x")) for k in range(3)]
