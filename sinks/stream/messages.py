"""Change rows as stream messages (Debezium JSON), and the staged files that carry them.

Executor side (:class:`StreamStageWriter`): one writer call encodes one table's change rows with
:mod:`cdc.model.debezium` (key = the primary-key struct, value = the envelope, in the table's
change order) and writes them as one Arrow IPC file under the job's staging folder. A delete is
followed by its tombstone (unless ``tombstones_on_delete: false``). The file holds, per message:
``key``, ``value`` (null for a tombstone), ``op`` and ``pos`` (the change's log position, which
the driver uses to recognise a primary-key update's delete + create pair). The envelope's
``source`` block is the table's connector's (MySQL: ``file``/``pos``/``gtid``; PostgreSQL:
``lsn``/``txId``/``schema`` with the database, from the table's schema, in ``db``).

Driver side (:func:`read_staged`): the commit reads the files back, in the order the batch lists
them, and :func:`with_headers` adds Debezium's ``__debezium.newkey``/``__debezium.oldkey``
headers to the messages of a primary-key update.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from cdc.model.debezium.codec import DebeziumFormatError, TableEncoder, record_from_row
from cdc.model.history import tagged_change, tagged_schema
from cdc.model.schema import TableSchema
from cdc.model.storage import filesystem
from sinks.base import InvalidChangeBatch, SinkError, SinkWriter, StreamKind
from sinks.changes import normalize
from sinks.stream.config import StreamSinkConfig

MESSAGE_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("op", pa.string()),
    pa.field("pos", pa.string()),
])
NEW_KEY_HEADER = "__debezium.newkey"
OLD_KEY_HEADER = "__debezium.oldkey"
_IPC_OPTIONS = ipc.IpcWriteOptions(compression="lz4")  # repeated JSON schemas shrink ~20x
_RECORD_OVERHEAD = 128  # bytes a record's framing may add to its key and value
STAGED_BATCH_ROWS = 2048  # messages per Arrow batch of a staged file: what the driver holds at once


class MessageTooLarge(SinkError):
    """One change encodes to a message over the producer's size limit."""


class Message(NamedTuple):
    """One message of a change (driver side; a tuple: the driver makes one per message sent).

    Attributes:
        key: the key JSON (None for a table without a primary key).
        value: the envelope JSON; None for a tombstone.
        op: the change's op (a tombstone carries its delete's ``d``).
        pos: the change's log position (:func:`log_position`).
        headers: Debezium's primary-key-update headers, when any.
    """

    key: bytes | None
    value: bytes | None
    op: str
    pos: str
    headers: tuple[tuple[str, bytes], ...] = ()


class StreamStageWriter(SinkWriter):
    """A stream-store sink's executor side: encode change rows, stage them as one file per call.

    Args:
        config: the sink configuration (picklable; ``producer`` stays out of ``repr``).
        staging: the job's staging folder (:meth:`StreamSinkConfig.staging_root`).
    """

    def __init__(self, config: StreamSinkConfig, staging: str) -> None:
        self.config = config
        self.staging = staging

    def __repr__(self) -> str:
        return f"StreamStageWriter({self.staging!r})"

    def write(self, schema: TableSchema, rows: pa.Table, stream: StreamKind) -> list[dict[str, Any]]:
        """Encode and stage ``rows``; rows a dialect tagged with a sink schema (after a DDL,
        :func:`cdc.model.history.with_schema`) are encoded with that schema, so each message's
        Connect schema is the table's at its change, as Debezium's are."""
        tagged, change = tagged_schema(rows), tagged_change(rows)
        if tagged is not None:
            schema = tagged[0]
        batch = normalize(rows, schema)
        if batch.num_rows == 0:
            return []
        if stream == "snapshot" and set(batch["op"].to_pylist()) != {"r"}:
            raise InvalidChangeBatch("snapshot rows must all have op 'r'", table=str(schema.table_id))
        table = encode_rows(self.config, schema, batch)
        fs, root = filesystem(self.staging)
        folder = f"{root}/{_safe(str(schema.table_id))}"
        fs.create_dir(folder, recursive=True)
        name = f"{stream}-{uuid.uuid4().hex}.arrow"
        with fs.open_output_stream(f"{folder}/{name}") as out, \
                ipc.new_file(out, MESSAGE_SCHEMA, options=_IPC_OPTIONS) as w:
            w.write_table(table, max_chunksize=STAGED_BATCH_ROWS)
        first = batch.column("source")[0]  # who speaks: the context headers the driver adds
        staged: dict[str, Any] = {"file": f"{_safe(str(schema.table_id))}/{name}", "messages": table.num_rows,
                                  "rows": batch.num_rows,
                                  "context": [first["name"].as_py(), first["connector"].as_py()]}
        if change is not None:  # the driver publishes it once, with the first batch that has it
            staged["schema_change"] = change.to_dict()
        return [staged]


def _safe(name: str) -> str:
    return name.replace("/", "_")


def encode_rows(config: StreamSinkConfig, schema: TableSchema, batch: pa.Table) -> pa.Table:
    """Encode normalized change rows as messages (:data:`MESSAGE_SCHEMA`), in row order.

    Raises:
        InvalidChangeBatch: a value cannot be encoded with the table's schema.
        MessageTooLarge: a message exceeds the store's limit (:meth:`StreamSinkConfig.max_message_bytes`).
    """
    encoder = TableEncoder(schema, schemas_enabled=config.schemas_enable, options=config.debezium_options())
    limit = config.max_message_bytes()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    ops: list[str] = []
    positions: list[str] = []
    for row in batch.to_pylist():
        try:
            record = record_from_row(row, schema)
            key = encoder.key(record)
            value = encoder.value(record)
        except DebeziumFormatError as exc:
            raise InvalidChangeBatch(str(exc), table=str(schema.table_id)) from None
        size = len(value) + len(key or b"") + _RECORD_OVERHEAD
        if size > limit:
            raise MessageTooLarge(
                f"the {record.op!r} change of {schema.table_id} with key {(key or b'').decode()[:200]} "
                f"encodes to {size} bytes, over the limit of {limit}: {config.message_size_fix()}",
                table=str(schema.table_id))
        pos = log_position(row["source"])
        keys.append(key)
        values.append(value)
        ops.append(record.op)
        positions.append(pos)
        if record.op == "d" and config.tombstones_on_delete:
            keys.append(key)
            values.append(None)
            ops.append("d")
            positions.append(pos)
    return pa.Table.from_arrays([pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                                 pa.array(ops, pa.string()), pa.array(positions, pa.string())],
                                schema=MESSAGE_SCHEMA)


def log_position(source: dict[str, Any]) -> str:
    """A change's log position as text: MySQL ``file:pos:row``; PostgreSQL
    ``commit_lsn:lsn:row`` (a snapshot read: ``:hw:0``). The two halves of a primary-key update
    share it."""
    if "file" in source:
        return f"{source['file']}:{source['pos']}:{source['row'] or 0}"
    return f"{source.get('commit_lsn') or ''}:{source.get('lsn')}:{source.get('row') or 0}"


def read_staged(staging: str, files: list[dict[str, Any]]) -> Iterator[Message]:
    """Driver side: the messages of staged files, file by file in the given order, one Arrow
    batch in memory at a time (a whole file decompressed at once was hundreds of MB for a large
    batch, and reading it 2-4x slower on a busy machine)."""
    fs, root = filesystem(staging)
    for f in files:
        with fs.open_input_file(f"{root}/{f['file']}") as source:
            reader = ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                for key, value, op, pos in zip(*(batch.column(c).to_pylist() for c in MESSAGE_SCHEMA.names),
                                               strict=True):
                    yield Message(key, value, op, pos)


def with_headers(messages: Iterator[Message], schemas_enable: bool) -> Iterator[Message]:
    """Add Debezium's headers to primary-key updates: a ``d`` (and its tombstone) followed by a
    ``c`` at the same log position is one update; the delete and tombstone carry
    ``__debezium.newkey`` (the new key), the create ``__debezium.oldkey`` (the old key).

    The header value is the key's payload JSON (what Kafka Connect's SimpleHeaderConverter
    writes for a struct).
    """
    pending: list[Message] = []
    for m in messages:
        if m.op == "d" and pending and pending[0].pos == m.pos and pending[0].key == m.key:
            pending.append(m)  # the tombstone of the delete waiting
            continue
        if m.op == "c" and pending and pending[0].pos == m.pos and m.key is not None:
            old = _payload(pending[0].key, schemas_enable)
            new = _payload(m.key, schemas_enable)
            for p in pending:
                yield Message(p.key, p.value, p.op, p.pos, ((NEW_KEY_HEADER, new),))
            pending = []
            yield Message(m.key, m.value, m.op, m.pos, ((OLD_KEY_HEADER, old),))
            continue
        yield from pending
        pending = []
        if m.op == "d" and m.value is not None:
            pending = [m]
        else:
            yield m
    yield from pending


def _payload(key: bytes | None, schemas_enable: bool) -> bytes:
    """A key message's payload JSON (without the schema wrapper)."""
    if key is None or not schemas_enable:
        return key or b""
    return orjson.dumps(orjson.loads(key)["payload"])
