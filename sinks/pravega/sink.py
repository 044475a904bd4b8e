"""The Pravega sink (``type: pravega``): Debezium JSON change events, each exactly once.

Executor side (:class:`~sinks.stream.messages.StreamStageWriter`, shared with Kafka and Pulsar):
change rows are encoded and staged as files of messages under the job's staging folder; nothing
reaches Pravega yet.

Driver side (:class:`PravegaSink`), once per batch. Pravega's transactions are per stream, so a
batch that touches several streams is made atomic by a record in the control stream
(:mod:`sinks.pravega.client`):

1. one transaction per stream the batch touches (the schema change stream first), every event
   of the batch written into it, routed by its Debezium key JSON (one key's changes stay in one
   segment, in order);
2. a ``prepared`` record: the batch id and each stream's transaction id;
3. every transaction committed;
4. a ``committed`` record.

A restart reads the job's newest record. ``committed``: that batch and all before are done.
``prepared``: the restart asks the controller the state of each transaction the record names,
through Pravega's Java client (:mod:`sinks.pravega.fence`, a JVM started only then): one
``COMMITTED`` is done, and its stream is skipped by the replay (the batch is replayed with the same
rows); one ``COMMITTING`` is waited for until ``COMMITTED`` (its events must be in the stream
before the replay's next batch commits), then skipped; one ``ABORTED`` or ``ABORTING`` is written again by the replay; one
still ``OPEN`` is fenced first (aborted, so that a commit request of the dead driver still on its
way fails), then written again, unless the abort lost to that commit (the state then says
``COMMITTING``/``COMMITTED``: done). A transaction the controller no longer knows was not open:
within ``transaction_lease_s`` of the record it counts as committed; after it, its outcome is
unknown and its stream is written again, with a warning (at least once for that batch).
docs/sinks/pravega.md has the crash table.

A server that goes away: each attempt first checks that the controller takes a connection
(within ``operation_timeout_s``), the control streams' calls have that deadline too
(:mod:`sinks.pravega.control`), and the client's own calls give up after 60-120 s; a batch gives
up after ``commit_retries`` more attempts with :class:`PravegaCommitFailed`, naming the controller.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from cdc.model.config import SinkConfig
from cdc.model.debezium.headers import new_run_id
from cdc.model.debezium.schema_change import schema_change_message
from cdc.model.errors import ConfigError
from cdc.model.history import SchemaChange
from cdc.model.hooks import NO_HOOKS, Hooks
from cdc.model.schema import TableId, TableSchema
from sinks.base import Committed, Sink, SinkError, SinkWriter, TableBatch
from sinks.pravega.client import (
    control_streams,
    next_control_stream,
    record_line,
    stream_manager,
    writer_id,
)
from sinks.pravega.config import PravegaSinkConfig
from sinks.pravega.control import ControlStreams
from sinks.pravega.fence import DONE, JavaTransactions
from sinks.stream.batches import batch_messages, clear_staging
from sinks.stream.commit import Retry, StreamCommitter
from sinks.stream.messages import StreamStageWriter

log = logging.getLogger(__name__)


class PravegaUnreachable(SinkError):
    """The controller or the segment store did not answer."""


class PravegaCommitFailed(SinkError):
    """A batch could not be committed to Pravega after the configured retries."""


class PravegaSink(StreamCommitter, Sink):
    """Debezium JSON in ``<scope>/<topic_prefix>.<db>.<table>`` streams, one transaction per stream
    and batch, tied together by the control stream."""

    name: ClassVar[str] = "pravega"
    config_class: ClassVar[type[SinkConfig]] = PravegaSinkConfig
    store: ClassVar[str] = "pravega"
    unreachable: ClassVar[tuple[type[Exception], ...]] = (PravegaUnreachable,)

    def __init__(self, config: SinkConfig, job_id: str, spark: Any | None = None,
                 hooks: Hooks = NO_HOOKS) -> None:
        if not isinstance(config, PravegaSinkConfig):
            raise ConfigError(f"the pravega sink needs a PravegaSinkConfig, not {type(config).__name__}")
        super().__init__(config, job_id, spark, hooks)
        self.pravega = self.stream = config
        self.staging = config.staging_root(job_id)
        self.run_id = new_run_id()
        self.manager: Any = None
        self.controls: ControlStreams | None = None  # the control streams' helper process
        self.control = ""  # this run's control stream
        self.writers: dict[str, Any] = {}  # stream -> its transactional writer
        self.streams: set[str] = set()  # streams known to exist
        self.last_batch: int | None = None  # None: unknown, read the control stream first
        self.schema_versions: dict[str, int] = {}
        self.done: dict[int, dict[str, int]] = {}  # a half-committed batch -> its committed transactions
        self.old_controls: list[str] = []  # earlier runs' control streams, removed after this run's first record

    def describe(self) -> str:
        return (f"pravega at {self.pravega.controller_uri} (streams {self.pravega.scope}/"
                f"{self.pravega.topic_prefix}.<db>.<table>)")

    def writer(self) -> SinkWriter:
        return StreamStageWriter(self.pravega, self.staging)

    # --- start-up --------------------------------------------------------------------------

    def open(self, schemas: dict[TableId, TableSchema]) -> None:
        clear_staging(self.staging)  # files of a crashed run: their batch will be staged again
        try:
            self._recover()
            self._ensure_streams(self.pravega.topic(t) for t in schemas)
        except Retry as exc:
            raise PravegaUnreachable(
                f"cannot reach Pravega at controller_uri={self.pravega.controller_uri} ({exc}): check "
                f"`controller_uri`, the network and the TLS and auth settings") from None

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        """A client call; its failure (the client raises plain errors) as :class:`Retry`."""
        try:
            return fn(*args)
        except SinkError:
            raise  # already names its fix (no Java client)
        except Exception as exc:
            raise Retry(f"{what}: {exc}") from None

    def _ensure_streams(self, streams: Any) -> None:
        """Create the missing streams (creating an existing one changes nothing)."""
        for stream in sorted(set(streams) - self.streams):
            self._call(f"create stream {stream}", self.manager.create_stream_with_policy,
                       self.pravega.scope, stream, self._scaling(), self._module().StreamRetentionPolicy.none(), [])
            self.streams.add(stream)

    def _module(self) -> Any:
        from sinks.pravega.client import client_module

        return client_module()

    def _scaling(self) -> Any:
        policy, c = self._module().StreamScalingPolicy, self.pravega
        if c.scaling == "events":
            return policy.auto_scaling_policy_by_event_rate(c.target_rate, c.scale_factor, c.segments)
        if c.scaling == "kilobytes":
            return policy.auto_scaling_policy_by_data_rate(c.target_rate, c.scale_factor, c.segments)
        return policy.fixed_scaling_policy(c.segments)

    def _recover(self) -> None:
        """A new client; the job's newest record read, a half-committed batch resolved, and a
        control stream of this run's own (:mod:`sinks.pravega.client`)."""
        self._drop()
        self._probe()
        self.manager = stream_manager(self.pravega)
        scope, control = self.pravega.scope, self.pravega.commits_stream()
        self._call(f"create scope {scope}", self.manager.create_scope, scope)
        names = self._call(f"list the streams of {scope}", self.manager.list_stream, scope)
        self.old_controls = [name for _, name in control_streams(names, control, self.job_id)]
        self.controls = controls = self._call("start the control streams' helper", ControlStreams, self.pravega)
        record = None
        for name in reversed(self.old_controls):
            record = self._call(f"read {name}", controls.newest_record, name, self.job_id)
            if record is not None:
                break
        self.control = next_control_stream(names, control, self.job_id)
        self._call(f"create stream {self.control}", self.manager.create_stream, scope, self.control, 1)
        self.done = {}
        if record is None:
            self.last_batch, self.schema_versions = -1, {}
        elif record["state"] == "committed":
            self.last_batch, self.schema_versions = int(record["batch"]), dict(record["schema_versions"])
            self._append(record)  # this run's stream holds the job's state from now on
        else:
            self._resolve(record)

    def _probe(self) -> None:
        """The controller takes a TCP connection within ``operation_timeout_s`` (a server that went
        away fails the attempt at once, not after the client's own minute of retries)."""
        host, _, port = self.pravega.controller_uri.split("://", 1)[1].rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=self.pravega.operation_timeout_s).close()
        except (OSError, ValueError) as exc:
            raise Retry(f"the controller does not take a connection ({exc})") from None

    def _resolve(self, record: dict[str, Any]) -> None:
        """Finish a batch whose ``prepared`` record is the newest: see the module's docstring."""
        batch = int(record["batch"])
        committed = self._committed_txns(batch, record)
        if set(committed) == set(record["txns"]):
            self._append({**record, "state": "committed", "at": time.time()})
            self.last_batch, self.schema_versions = batch, dict(record["schema_versions"])
            return
        self.last_batch, self.schema_versions = batch - 1, dict(record["versions_before"])
        self.done = {batch: committed}
        self._append(record)  # as it is: this run's stream holds the job's state from now on
        log.info("pravega: batch %d was half committed (%s done); its replay writes the rest", batch,
                 ", ".join(sorted(committed)) or "no stream")

    def _committed_txns(self, batch: int, record: dict[str, Any]) -> dict[str, int]:
        """The transactions of a ``prepared`` record that committed (or will), by stream, each
        open one fenced first, through Pravega's Java client (:mod:`sinks.pravega.fence`)."""
        late = time.time() - float(record["at"]) >= self.pravega.transaction_lease_s
        java = self._call("start Pravega's Java client", JavaTransactions, self.pravega)
        committed: dict[str, int] = {}
        try:
            for stream, txn_id in sorted(record["txns"].items()):
                state = self._call(f"fence transaction {txn_id} of {stream}", java.fence, stream, int(txn_id))
                if state in DONE:
                    committed[stream] = int(txn_id)
                elif state is not None:
                    log.info("pravega: batch %d's transaction on %s is %s: the replay writes the stream again",
                             batch, stream, state)
                elif not late:  # unknown to the controller, within the lease: not open, so committed
                    committed[stream] = int(txn_id)
                else:
                    log.warning("pravega: batch %d's transaction on %s is unknown to the controller, and the "
                                "restart came after its lease: whether it committed is unknown; the replay "
                                "writes the stream's share of the batch again (it may appear twice)", batch, stream)
        finally:
            java.close()
        return committed

    def _txn_writer(self, stream: str) -> Any:
        if stream not in self.writers:
            self.writers[stream] = self._call(f"open a transactional writer of {stream}",
                                              self.manager.create_transaction_writer, self.pravega.scope,
                                              stream, writer_id(self.job_id, stream))
        return self.writers[stream]

    def _append(self, record: dict[str, Any]) -> None:
        self._call("append to the control stream", self._write_control, record_line(record))

    def _write_control(self, line: bytes) -> None:
        assert self.controls is not None
        self.controls.append(self.control, line)
        for name in self.old_controls:  # the job's state is in this run's stream now
            self.manager.seal_stream(self.pravega.scope, name)
            self.manager.delete_stream(self.pravega.scope, name)
        self.old_controls = []

    # --- commit ----------------------------------------------------------------------------

    def commit(self, batch_id: int, tables: list[TableBatch]) -> list[Committed]:
        return self.commit_batch(batch_id, tables)

    def _connected(self) -> bool:
        return self.manager is not None and self.last_batch is not None

    def _ensure_topics_of(self, tables: list[TableBatch], changes: list[SchemaChange]) -> None:
        self._ensure_streams(self.pravega.topic(b.schema.table_id) for b in tables)  # a table added mid-run
        if changes:
            self._ensure_streams([self.pravega.schema_changes_topic()])

    def _drop(self) -> None:
        if self.controls is not None:
            self.controls.close()
        self.manager = self.controls = None
        self.writers = {}
        self.last_batch = None

    def _gave_up(self, batch_id: int, attempts: int, last_error: str) -> SinkError:
        return PravegaCommitFailed(
            f"could not commit batch {batch_id} to Pravega at controller_uri={self.pravega.controller_uri} "
            f"in {attempts} attempts (last: {last_error}): check the controller and the segment store, "
            f"then restart the job; the batch is replayed and lands once", batch=batch_id)

    def _publish(self, batch_id: int, tables: list[TableBatch], changes: list[SchemaChange],
                 versions: dict[str, int]) -> dict[str, int]:
        """Write the batch in one transaction per stream, record them, commit them, record that."""
        skip = self.done.get(batch_id, {})
        txns: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for stream, events in self._events(tables, changes):
            if stream in skip:
                continue
            txn = self._call(f"begin a transaction on {stream}", self._txn_writer(stream).begin_txn)
            counts[stream] = self._call(f"write to {stream}", _write_all, txn, events)
            txns[stream] = txn
            self.hooks.reached("sink_commit")  # crash tests: a batch partly written, nothing recorded
        record = {"job": self.job_id, "batch": batch_id, "state": "prepared", "at": time.time(),
                  "txns": {**skip, **{s: int(t.get_txn_id()) for s, t in txns.items()}}, "messages": counts,
                  "schema_versions": versions, "versions_before": self.schema_versions}
        self._append(record)
        for stream, txn in txns.items():
            self._call(f"commit the transaction on {stream}", txn.commit)
            self.hooks.reached("sink_commit")  # crash tests: a batch half committed
        self._append({**record, "state": "committed", "at": time.time()})
        self.done.pop(batch_id, None)
        return counts

    def _events(self, tables: list[TableBatch], changes: list[SchemaChange]
                ) -> Iterator[tuple[str, Iterator[tuple[str | None, bytes]]]]:
        """Each stream the batch touches with its events (routing key, value): the schema change
        stream first, then each table's (snapshot rows, then changes in log order)."""
        if changes:
            yield self.pravega.schema_changes_topic(), (self._schema_change(c) for c in changes)
        for batch in tables:
            messages = batch_messages(self.staging, batch, self.pravega.schemas_enable)
            yield self.pravega.topic(batch.schema.table_id), (
                (m.key.decode() if m.key is not None else None, m.value) for m in messages if m.value is not None)

    def _schema_change(self, change: SchemaChange) -> tuple[str | None, bytes]:
        key, value = schema_change_message(str(change.source.get("connector", "mysql")), change.schema,
                                           change.ddl, change.source, int(time.time() * 1000),
                                           schemas_enable=self.pravega.schemas_enable)
        log.info("pravega: schema change of %s (version %d) to %s: %s", change.schema.table_id,
                 change.version, self.pravega.schema_changes_topic(), change.ddl.strip())
        return (key.decode() if key is not None else None), value

    def close(self) -> None:
        self._drop()


def _write_all(txn: Any, events: Iterator[tuple[str | None, bytes]]) -> int:
    """Write every event into ``txn``; how many."""
    n = 0
    for key, value in events:
        txn.write_event_bytes(value, key)
        n += 1
    return n
