"""Debezium's JSON change-event format (MySQL/MariaDB and PostgreSQL connectors): encode,
decode, changelog rows.

A change event travels as two JSON messages, as Debezium writes them with Kafka's JsonConverter:

* the key: the primary-key struct (``{"id": 1004}``), or no key for a table without one;
* the value: an envelope ``{before, after, source, transaction, op, ts_ms, ts_us, ts_ns}``, in
  the order Debezium 3.5's connectors write it (tests/test_debezium_differential.py runs them).

With ``schemas_enabled`` each message is ``{"schema": ..., "payload": ...}`` (the Kafka Connect
schema, see ``cdc/debezium_schema.py``); without, it is the payload alone. Decoding accepts both,
and turns an envelope into Flink changelog rows the way Flink's ``debezium-json`` format does:
``r``/``c`` give +I, ``u`` gives -U and +U, ``d`` gives -D; a tombstone (null value) gives none.

Where we differ from Debezium (on purpose):

* Envelope ``ts_ms`` is the connector's processing time in Debezium; :func:`record_from_event`
  uses the event's own time unless told otherwise, so that a replayed batch encodes identically.
* An update that changes the primary key is one ``u`` event (as Flink CDC emits it), not
  Debezium's delete + tombstone + create.
* We never produce transaction metadata: ``transaction`` is always null.
* ``source.version`` says ``spark-cdc-<version>`` by default, not a Debezium release.

PostgreSQL (:class:`PostgresSourceInfo`, the table's ``connector`` ``postgresql``): the source
block is Debezium's PostgreSQL one (``db`` the database, ``schema``, ``table``, ``txId``, ``lsn``,
``xmin``); the key and value schemas are named ``<prefix>.<schema>.<table>.Key/Value/Envelope``.
spark-cdc's change rows name the schema in ``source.db`` and carry ``commit_lsn`` and ``row``
beyond Debezium's fields: :func:`record_from_row` maps them (the database name is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from functools import lru_cache
from typing import Any, Literal

import orjson

from cdc import __version__
from cdc.model.debezium import values
from cdc.model.debezium.connect import (
    DEFAULT_OPTIONS,
    POSTGRES_SOURCE_FIELDS,
    POSTGRESQL,
    SNAPSHOT_VALUES,
    SOURCE_FIELDS,
    DebeziumOptions,
    FieldCodec,
    decoder_for_schema,
    envelope_schema,
    key_codecs,
    key_schema,
    table_codecs,
)
from cdc.model.errors import CdcError, Terminal
from cdc.model.events import OPS, ChangeEvent, Op, Row
from cdc.model.schema import TableId, TableSchema

SOURCE_VERSION = f"spark-cdc-{__version__}"
Connector = Literal["mysql", "mariadb", "postgresql"]


class DebeziumFormatError(CdcError, Terminal):
    """A message is not a valid Debezium change event (the message names the field), or a row
    cannot be encoded with its table's schema."""


@dataclass(frozen=True, kw_only=True)
class SourceInfo:
    """The envelope's ``source`` block, field for field as Debezium's MySQL connector names it.

    ``snapshot`` is one of :data:`SNAPSHOT_VALUES` ("true", "last", "false", ...). ``sequence``,
    ``ts_us`` and ``ts_ns`` exist in Debezium 2.x+; they are None when a message lacks them.
    """

    version: str
    connector: str
    name: str
    ts_ms: int
    snapshot: str = "false"
    db: str
    sequence: str | None = None
    ts_us: int | None = None
    ts_ns: int | None = None
    table: str | None = None
    server_id: int
    gtid: str | None = None
    file: str
    pos: int
    row: int
    thread: int | None = None
    query: str | None = None

    @property
    def table_id(self) -> TableId:
        """The table changed: ``db.table``."""
        return TableId(self.db, self.table or "")


@dataclass(frozen=True, kw_only=True)
class PostgresSourceInfo:
    """The ``source`` block of Debezium's PostgreSQL connector, field for field, in its order.

    ``db`` is the database; the table is ``schema.table``. ``sequence`` is Debezium's JSON array
    text ``["<last commit lsn>","<lsn>"]``.
    """

    version: str
    connector: str = POSTGRESQL
    name: str
    ts_ms: int
    snapshot: str = "false"
    db: str
    sequence: str | None = None
    ts_us: int | None = None
    ts_ns: int | None = None
    schema: str
    table: str
    txId: int | None = None
    lsn: int | None = None
    xmin: int | None = None
    origin: str | None = None
    origin_lsn: int | None = None

    @property
    def table_id(self) -> TableId:
        """The table changed: ``schema.table`` (spark-cdc's TableId names Postgres schemas ``db``)."""
        return TableId(self.schema, self.table)


AnySourceInfo = SourceInfo | PostgresSourceInfo


@dataclass(frozen=True)
class ChangeRecord:
    """One Debezium change event value (the envelope), with typed row images."""

    op: Op
    before: Row | None
    after: Row | None
    source: AnySourceInfo
    ts_ms: int | None = None
    ts_us: int | None = None
    ts_ns: int | None = None

    @property
    def table_id(self) -> TableId:
        """The table changed, from ``source.db`` (PostgreSQL: ``source.schema``) and ``source.table``."""
        return self.source.table_id

    def image(self) -> Row:
        """The row that identifies the change (``before`` for deletes, else ``after``).

        Raises:
            DebeziumFormatError: that image is missing.
        """
        row = self.before if self.op == "d" else self.after
        if row is None:
            raise DebeziumFormatError(f"{self.op!r} record on {self.table_id} has no image")
        return row


class RowKind(str, Enum):
    """Flink's changelog row kinds, by their short names."""

    INSERT = "+I"
    UPDATE_BEFORE = "-U"
    UPDATE_AFTER = "+U"
    DELETE = "-D"


def record_from_event(
    event: ChangeEvent,
    *,
    connector_name: str,
    snapshot: str | None = None,
    offset: Mapping[str, Any] | None = None,
    ts_ms: int | None = None,
    connector: Connector = "mysql",
    version: str = SOURCE_VERSION,
    database: str | None = None,
) -> ChangeRecord:
    """Build the envelope of one change event.

    Args:
        event: the change.
        connector_name: the logical server name (Debezium's ``topic.prefix``); ``source.name``.
        snapshot: ``source.snapshot``; default "true" for snapshot reads (``r``), else "false".
        offset: where a snapshot read was taken (its chunk's high watermark, as source fields:
            ``file`` and ``pos``; PostgreSQL: ``lsn``) when the event has no position.
        ts_ms: the envelope's processing time; default the event's time (deterministic).
        connector: ``source.connector``, "mysql", "mariadb" or "postgresql".
        version: ``source.version``.
        database: PostgreSQL: the database (``source.db``); required for "postgresql".

    Raises:
        DebeziumFormatError: ``snapshot`` is not a Debezium value, or the event has no position
            and no ``offset`` was given.
    """
    snapshot = snapshot or ("true" if event.op == "r" else "false")
    if snapshot not in SNAPSHOT_VALUES:
        raise DebeziumFormatError(f"snapshot={snapshot!r} is not one of {SNAPSHOT_VALUES}")
    fields = dict(event.source)
    if connector == POSTGRESQL:
        if event.position is None and offset is not None:
            fields = {**fields, "lsn": offset["lsn"]}
        source: AnySourceInfo = _postgres_source(fields, version, connector_name, event.ts_ms,
                                                 snapshot, event.table_id, database)
        when = event.ts_ms if ts_ms is None else ts_ms
        return ChangeRecord(event.op, event.before, event.after, source, when, when * 1000,
                            when * 1_000_000)
    if event.position is None and offset is not None:
        fields = {**fields, "file": offset["file"], "pos": offset["pos"], "row": 0}
    if "file" not in fields:
        raise DebeziumFormatError(
            f"{event.op!r} event on {event.table_id} has no binlog position: pass offset= "
            "(for a snapshot read, the chunk's high watermark)", table=str(event.table_id))
    source = SourceInfo(
        version=version, connector=connector, name=connector_name, ts_ms=event.ts_ms,
        snapshot=snapshot, db=event.table_id.db, ts_us=event.ts_ms * 1000,
        ts_ns=event.ts_ms * 1_000_000, table=event.table_id.table, server_id=fields.get("server_id", 0),
        gtid=fields.get("gtid"), file=fields["file"], pos=fields["pos"], row=fields.get("row", 0),
        thread=fields.get("thread"), query=fields.get("query"))
    when = event.ts_ms if ts_ms is None else ts_ms
    return ChangeRecord(event.op, event.before, event.after, source, when, when * 1000,
                        when * 1_000_000)


def _postgres_source(fields: Mapping[str, Any], version: str, name: str, ts_ms: int, snapshot: str,
                     table: TableId, database: str | None) -> PostgresSourceInfo:
    if database is None:
        raise DebeziumFormatError(
            f"{table}: a PostgreSQL source block names the database (source.db): pass database= "
            "or a TableSchema with its database",
            table=str(table))
    return PostgresSourceInfo(
        version=version, name=name, ts_ms=ts_ms, snapshot=snapshot, db=database,
        sequence=fields.get("sequence"), ts_us=ts_ms * 1000, ts_ns=ts_ms * 1_000_000,
        schema=table.db, table=table.table, txId=fields.get("txId"), lsn=fields.get("lsn"),
        xmin=fields.get("xmin"))


def record_from_row(row: Mapping[str, Any], schema: TableSchema, *,
                    database: str | None = None) -> ChangeRecord:
    """A change row (:mod:`cdc.model.envelope` layout, as ``to_pylist`` gives it) as a record:
    the row's own source block mapped onto the connector's Debezium source block.

    Args:
        row: ``op``, ``before``, ``after``, ``source``, ``ts_ms``.
        schema: the table (its ``connector`` picks the source block).
        database: PostgreSQL: the database name (``source.db``; the row's ``db`` is the schema);
            default ``schema.database``.

    Raises:
        DebeziumFormatError: a PostgreSQL row without ``database``.
    """
    s = row["source"]
    ts = int(row["ts_ms"] if row.get("ts_ms") is not None else s["ts_ms"] or 0)
    source_ts = int(s["ts_ms"] or 0)
    table = schema.table_id
    before = None if _no_old_tuple(row["op"], schema) else row["before"]
    source: AnySourceInfo
    if schema.connector == POSTGRESQL:
        source = _postgres_source(s, s["version"] or "", s["name"] or "", source_ts,
                                  s["snapshot"] or "false", table, database or schema.database)
    else:
        source = SourceInfo(
            version=s["version"] or "", connector=s["connector"] or "mysql", name=s["name"] or "",
            ts_ms=source_ts, snapshot=s["snapshot"] or "false", db=table.db, sequence=s.get("sequence"),
            ts_us=source_ts * 1000, ts_ns=source_ts * 1_000_000, table=table.table,
            server_id=int(s.get("server_id") or 0), gtid=s.get("gtid"), file=s.get("file") or "",
            pos=int(s.get("pos") or 0), row=int(s.get("row") or 0), thread=s.get("thread"),
            query=s.get("query"))
    return ChangeRecord(row["op"], before, row["after"], source, ts, ts * 1000, ts * 1_000_000)


def _no_old_tuple(op: str, schema: TableSchema) -> bool:
    """A PostgreSQL update under replica identity DEFAULT or INDEX: pgoutput sends no old row
    (the change row's key-only ``before`` is made from the new one), and Debezium writes
    ``before: null``."""
    return op == "u" and schema.connector == POSTGRESQL and schema.replica_identity not in (None, "f")


# --- encoding --------------------------------------------------------------------------------


def encode_key(
    record: ChangeRecord, schema: TableSchema, *, schemas_enabled: bool,
    options: DebeziumOptions = DEFAULT_OPTIONS,
) -> bytes | None:
    """The key message: the primary-key struct, or None when the table has no primary key.

    Raises:
        DebeziumFormatError: the record is for another table, or a key value cannot be encoded.
    """
    _check_table(record, schema)
    if not schema.primary_key:
        return None
    codecs = key_codecs(schema, options)
    payload = _encode_row(record.image(), codecs, "key", record.table_id, whole=False)
    if not schemas_enabled:
        return _dumps(payload, record.table_id)
    fragment = _key_schema(schema, options, record.source.name)
    return _dumps({"schema": fragment, "payload": payload}, record.table_id)


def encode_value(
    record: ChangeRecord, schema: TableSchema, *, schemas_enabled: bool,
    options: DebeziumOptions = DEFAULT_OPTIONS,
) -> bytes:
    """The value message: the envelope (wrapped with its Connect schema if ``schemas_enabled``).

    Raises:
        DebeziumFormatError: the record is for another table, or a value cannot be encoded.
    """
    _check_table(record, schema)
    payload = _envelope(record, table_codecs(schema, options), record.table_id)
    if not schemas_enabled:
        return _dumps(payload, record.table_id)
    fragment = _envelope_schema(schema, options, record.source.name, record.source.connector)
    return _dumps({"schema": fragment, "payload": payload}, record.table_id)


class TableEncoder:
    """Encodes many records of one table: :func:`encode_key` and :func:`encode_value` with the
    per-table work (codecs, schema fragments, checks) done once, not once per record. Produces
    the same bytes as those functions.

    Args:
        schema: the table.
        schemas_enabled: wrap each message with its Connect schema.
        options: the value encodings.
    """

    def __init__(self, schema: TableSchema, *, schemas_enabled: bool,
                 options: DebeziumOptions = DEFAULT_OPTIONS) -> None:
        self.schema = schema
        self.schemas_enabled = schemas_enabled
        self.options = options
        self.codecs = table_codecs(schema, options)
        self.key_codecs = key_codecs(schema, options) if schema.primary_key else ()
        self._fragments: dict[tuple[str, str], tuple[orjson.Fragment, orjson.Fragment]] = {}

    def _schemas(self, source: AnySourceInfo) -> tuple[orjson.Fragment, orjson.Fragment]:
        at = (source.name, source.connector)
        if at not in self._fragments:
            self._fragments[at] = (_key_schema(self.schema, self.options, source.name),
                                   _envelope_schema(self.schema, self.options, source.name, source.connector))
        return self._fragments[at]

    def key(self, record: ChangeRecord) -> bytes | None:
        """The key message (None for a table without a primary key); see :func:`encode_key`."""
        table = self.schema.table_id
        if record.table_id != table:
            _check_table(record, self.schema)
        if not self.key_codecs:
            return None
        payload = _encode_row(record.image(), self.key_codecs, "key", table, whole=False)
        if not self.schemas_enabled:
            return _dumps(payload, table)
        return _dumps({"schema": self._schemas(record.source)[0], "payload": payload}, table)

    def value(self, record: ChangeRecord) -> bytes:
        """The value message; see :func:`encode_value`."""
        table = self.schema.table_id
        if record.table_id != table:
            _check_table(record, self.schema)
        payload = _envelope(record, self.codecs, table)
        if not self.schemas_enabled:
            return _dumps(payload, table)
        return _dumps({"schema": self._schemas(record.source)[1], "payload": payload}, table)


def _envelope(record: ChangeRecord, codecs: tuple[FieldCodec, ...], table: TableId) -> dict[str, Any]:
    """The envelope payload, fields in Debezium 3.5's order (``transaction`` before ``op``)."""
    return {
        "before": _encode_row(record.before, codecs, "before", table),
        "after": _encode_row(record.after, codecs, "after", table),
        "source": _source_payload(record.source),
        "transaction": None,
        "op": record.op, "ts_ms": record.ts_ms, "ts_us": record.ts_us, "ts_ns": record.ts_ns,
    }


def _dumps(message: Any, table: TableId) -> bytes:
    try:
        return values.jackson_escapes(orjson.dumps(message))
    except orjson.JSONEncodeError as exc:  # a value of the wrong Python type for its column
        raise DebeziumFormatError(f"cannot write the {table} event as JSON: {exc}",
                                  table=str(table)) from None


_SOURCE_NAMES = {cls: tuple(f.name for f in fields(cls))  # Debezium's order
                 for cls in (SourceInfo, PostgresSourceInfo)}


def _source_payload(source: AnySourceInfo) -> dict[str, Any]:
    return {name: getattr(source, name) for name in _SOURCE_NAMES[type(source)]}


@lru_cache(maxsize=256)
def _envelope_schema(
    schema: TableSchema, options: DebeziumOptions, server: str, connector: str
) -> orjson.Fragment:
    return orjson.Fragment(orjson.dumps(envelope_schema(schema, options, server, connector)))


@lru_cache(maxsize=256)
def _key_schema(schema: TableSchema, options: DebeziumOptions, server: str) -> orjson.Fragment:
    return orjson.Fragment(orjson.dumps(key_schema(schema, options, server)))


def _check_table(record: ChangeRecord, schema: TableSchema) -> None:
    if record.table_id != schema.table_id:
        raise DebeziumFormatError(
            f"record for {record.table_id} cannot be encoded with the schema of {schema.table_id}",
            table=str(record.table_id))


def _encode_row(
    row: Row | None, codecs: tuple[FieldCodec, ...], where: str, table: TableId,
    *, whole: bool = True,
) -> dict[str, Any] | None:
    """Encode ``row``'s values; ``whole``: the row must have no column the codecs lack."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for c in codecs:
        try:
            x = row[c.column]
            out[c.column] = c.zero if x is None else c.encode(x)
        except KeyError:
            raise DebeziumFormatError(f"{where}: the row has no column {c.column!r} of {table}",
                                      table=str(table), field=f"{where}.{c.column}") from None
        except (TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            raise DebeziumFormatError(
                f"{where}.{c.column}: cannot encode {x!r} as {c.schema.get('name') or c.schema['type']}"
                f" ({exc})", table=str(table), field=f"{where}.{c.column}") from None
    if whole and len(row) != len(out):
        extra = sorted(set(row) - set(out))
        raise DebeziumFormatError(f"{where}.{extra[0]}: {table} has no such column",
                                  table=str(table), field=f"{where}.{extra[0]}")
    return out


# --- decoding --------------------------------------------------------------------------------


def decode_value(
    data: bytes | str | None, schema: TableSchema | None = None, *,
    options: DebeziumOptions = DEFAULT_OPTIONS,
) -> ChangeRecord | None:
    """Decode a value message, with or without the ``schema``/``payload`` wrapper.

    Row values are typed by ``schema`` (and ``options``) when given, else by the message's own
    Connect schema when it has one, else left as raw JSON values.

    Returns:
        The record, or None for a tombstone (a null value).

    Raises:
        DebeziumFormatError: the message is malformed; the message names the field.
    """
    doc, path, connect = _unwrap(data)
    if doc is None:
        return None
    op = doc.get("op")
    if op not in OPS:
        raise _bad(f"{path}op", f"one of {', '.join(OPS)}", op, missing="op" not in doc)
    source = _decode_source(doc.get("source"), f"{path}source", "source" in doc)
    table = source.table_id
    if schema is not None and schema.table_id != table:
        raise DebeziumFormatError(f"{path}source: the event is for {table}, the schema given is "
                                  f"for {schema.table_id}", table=str(table), field="source")
    images = []
    for name in ("before", "after"):
        row = doc.get(name)
        images.append(None if row is None else
                      _decode_row(row, _row_decoders(schema, options, connect, name),
                                  f"{path}{name}", table))
    before, after = images
    _check_images(op, before, after, path, source.connector)
    ts = [_optional_int(doc.get(f), f"{path}{f}") for f in ("ts_ms", "ts_us", "ts_ns")]
    return ChangeRecord(op, before, after, source, *ts)


def decode_key(
    data: bytes | str | None, schema: TableSchema | None = None, *,
    options: DebeziumOptions = DEFAULT_OPTIONS,
) -> Row | None:
    """Decode a key message (with or without the wrapper); None for a null key.

    Raises:
        DebeziumFormatError: the message is malformed; the message names the field.
    """
    doc, path, connect = _unwrap(data)
    if doc is None:
        return None
    if schema is not None:
        decoders: dict[str, Any] | None = {c.column: c.decode for c in key_codecs(schema, options)}
    else:
        decoders = _struct_decoders(connect, "schema") if connect is not None else None
    table = schema.table_id if schema is not None else TableId("?", "?")
    return _decode_row(doc, decoders, path.rstrip(".") or "key", table)


def to_changelog_rows(record: ChangeRecord) -> list[tuple[RowKind, Row]]:
    """Flink's debezium-json reading: ``r``/``c`` -> +I, ``u`` -> -U and +U (+U alone when the
    update has no ``before``: PostgreSQL under replica identity DEFAULT), ``d`` -> -D."""
    if record.op == "u":
        assert record.after is not None  # checked when built
        if record.before is None:
            return [(RowKind.UPDATE_AFTER, record.after)]
        return [(RowKind.UPDATE_BEFORE, record.before), (RowKind.UPDATE_AFTER, record.after)]
    if record.op == "d":
        return [(RowKind.DELETE, record.image())]
    return [(RowKind.INSERT, record.image())]


def decode_changelog(
    data: bytes | str | None, schema: TableSchema | None = None, *,
    options: DebeziumOptions = DEFAULT_OPTIONS,
) -> list[tuple[RowKind, Row]]:
    """Decode a value message straight to changelog rows (none for a tombstone).

    Raises:
        DebeziumFormatError: the message is malformed; the message names the field.
    """
    record = decode_value(data, schema, options=options)
    return [] if record is None else to_changelog_rows(record)


def _unwrap(data: bytes | str | None) -> tuple[dict[str, Any] | None, str, Any]:
    """(payload, path prefix, embedded Connect schema or None); payload None = tombstone (a
    null value, or an empty one as some clients write it)."""
    if data is None or len(data) == 0:
        return None, "", None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DebeziumFormatError(f"message is not valid JSON: {exc}", field="") from None
    if isinstance(doc, dict) and "payload" in doc:
        doc, path, connect = doc["payload"], "payload.", doc.get("schema")
    else:
        path, connect = "", None
    if doc is not None and not isinstance(doc, dict):
        raise _bad(path.rstrip(".") or "message", "a JSON object", doc)
    return doc, path, connect


def _got(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(path: str, expected: str, value: Any, *, missing: bool = False) -> DebeziumFormatError:
    if missing:
        return DebeziumFormatError(f"{path}: required field is missing", field=path)
    return DebeziumFormatError(f"{path}: expected {expected}, got {_got(value)}", field=path)


_SOURCE_DECODERS = {"string": values.dec_str, "int64": values.dec_int, "int32": values.dec_int}


def _snapshot(value: Any) -> str:
    if isinstance(value, bool):  # Debezium 1.x wrote a boolean
        return "true" if value else "false"
    if value not in SNAPSHOT_VALUES:
        raise values.BadValue(f"one of {', '.join(SNAPSHOT_VALUES)}", value)
    return str(value)


def _decode_source(obj: Any, path: str, present: bool) -> AnySourceInfo:
    if not isinstance(obj, dict):
        raise _bad(path, "an object", obj, missing=not present)
    postgres = obj.get("connector") == POSTGRESQL
    out: dict[str, Any] = {}
    for name, kind, optional in POSTGRES_SOURCE_FIELDS if postgres else SOURCE_FIELDS:
        x = obj.get(name)
        if x is None:
            if name == "table" or not optional:  # a change event always names its table
                raise _bad(f"{path}.{name}", kind.replace("int", "integer "), x,
                           missing=name not in obj)
            out[name] = "false" if name == "snapshot" else None
            continue
        try:
            out[name] = _snapshot(x) if name == "snapshot" else _SOURCE_DECODERS[kind](x)
        except values.BadValue as exc:
            raise _bad(f"{path}.{name}", exc.expected, x) from None
    return PostgresSourceInfo(**out) if postgres else SourceInfo(**out)


def _optional_int(x: Any, path: str) -> int | None:
    if x is None:
        return None
    try:
        return int(values.dec_int(x))
    except values.BadValue:
        raise _bad(path, "integer", x) from None


def _row_decoders(
    schema: TableSchema | None, options: DebeziumOptions, connect: Any, field: str
) -> dict[str, Any] | None:
    if schema is not None:
        return {c.column: c.decode for c in table_codecs(schema, options)}
    if connect is None:
        return None
    members = connect.get("fields") if isinstance(connect, dict) else None
    for member in members if isinstance(members, list) else []:
        if isinstance(member, dict) and member.get("field") == field:
            return _struct_decoders(member, f"schema.{field}")
    raise DebeziumFormatError(f"schema: the envelope schema has no {field!r} struct",
                              field="schema")


def _struct_decoders(struct: Any, path: str) -> dict[str, Any]:
    members = struct.get("fields") if isinstance(struct, dict) else None
    if not isinstance(members, list) or not all(
            isinstance(m, dict) and isinstance(m.get("field"), str) for m in members):
        raise _bad(f"{path}.fields", "a list of named field schemas", members)
    return {m["field"]: decoder_for_schema(m) for m in members}


def _decode_row(
    row: Any, decoders: dict[str, Any] | None, path: str, table: TableId
) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise _bad(path, "an object", row)
    if decoders is None:
        return row
    out: dict[str, Any] = {}
    for name, decode in decoders.items():
        if name not in row:
            raise _bad(f"{path}.{name}", "", None, missing=True)
        x = row[name]
        try:
            out[name] = None if x is None else decode(x)
        except values.BadValue as exc:
            raise _bad(f"{path}.{name}", exc.expected, x) from None
    if len(row) != len(out):
        extra = sorted(set(row) - set(out))[0]
        raise DebeziumFormatError(f"{path}.{extra}: {table} has no such column", field=extra)
    return out


def _check_images(op: str, before: Row | None, after: Row | None, path: str, connector: str) -> None:
    if op in ("c", "r", "u") and after is None:
        raise DebeziumFormatError(f"{path}after: op {op!r} needs an after image, got null",
                                  field=f"{path}after")
    if op == "u" and before is None and connector == POSTGRESQL:
        return  # replica identity DEFAULT: Debezium's PostgreSQL connector writes no before image
    if op in ("u", "d") and before is None:
        fix = ("PostgreSQL: the table needs REPLICA IDENTITY FULL" if connector == POSTGRESQL
               else "MySQL: binlog_row_image must be FULL")
        raise DebeziumFormatError(f"{path}before: op {op!r} needs a before image, got null ({fix})",
                                  field=f"{path}before")
