"""Table identity and column metadata, as every layer sees a captured table.

A dialect (``binlog/<database>``) reads a table's description from its catalog and builds these
values; everything above it works with them without knowing the database. Each column carries
the Arrow type its values travel as through the snapshot, the log, the Spark stream and the
sinks, chosen once by the dialect (see ``docs/sources/types.md``), and the database's own type names,
which only the dialect and the Debezium format interpret.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.ipc  # pa.ipc.read_schema


@dataclass(frozen=True, order=True)
class TableId:
    """A table, named ``db.table`` the way the config and the Debezium ``source`` block name it.

    ``db`` is MySQL's database, or Postgres's schema (the database is the source's own).
    """

    db: str
    table: str

    @classmethod
    def parse(cls, name: str) -> TableId:
        db, sep, table = name.partition(".")
        if not sep or not db or not table:
            raise ValueError(f"table name {name!r} must look like 'database.table'")
        return cls(db, table)

    def __str__(self) -> str:
        return f"{self.db}.{self.table}"


@dataclass(frozen=True)
class Column:
    """One column of a captured table.

    Attributes:
        name: the column name.
        data_type: the database's type name, lower case (``int``, ``varchar``, ``int4``, ...).
        column_type: the full declared type (``int(10) unsigned``, ``enum('a','b')``, ...).
        nullable: the column accepts NULL.
        precision: numeric precision, when the type has one.
        scale: numeric scale, when the type has one.
        datetime_precision: fractional-second digits of a temporal type.
        charset: character set of a string column.
        collation: collation of a string column (it decides how string keys order).
        arrow: the Arrow type values travel as (chosen by the dialect).
        origin: the column's identity across renames in a sink schema of ``schema_change.behavior:
            evolve`` (``<name>@<version>``: its name in the version that added it; see
            :mod:`cdc.model.history`); None elsewhere.
        default: the column's default value as the text of a literal (``2000-01-01``, ``0.000``,
            ``p``, ``b'1'``), as the dialect read it from its catalog or a DDL statement; None when
            the column has no default, a NULL default, or one that is an expression. Only the
            Debezium format uses it (the Connect schema's ``default``); schemas that differ in it
            alone compare equal.
    """

    name: str
    data_type: str
    column_type: str
    nullable: bool
    precision: int | None = None
    scale: int | None = None
    datetime_precision: int | None = None
    charset: str | None = None
    collation: str | None = None
    arrow: pa.DataType = field(kw_only=True)
    origin: str | None = field(default=None, kw_only=True)
    default: str | None = field(default=None, kw_only=True, compare=False)

    def arrow_type(self) -> pa.DataType:
        return self.arrow

    @property
    def is_integer(self) -> bool:
        """Whole numbers: integer types and decimals of scale 0 (MySQL's BIGINT UNSIGNED)."""
        t = self.arrow
        return bool(pa.types.is_integer(t) or (pa.types.is_decimal(t) and t.scale == 0))

    @property
    def is_numeric(self) -> bool:
        """Integer or fixed-point: the key types that may be split evenly."""
        return self.is_integer or bool(pa.types.is_decimal(self.arrow))

    @property
    def is_collated_string(self) -> bool:
        """A character type whose ordering follows a collation, not code points."""
        return self.collation is not None and bool(pa.types.is_string(self.arrow))


@dataclass(frozen=True)
class TableSchema:
    """Columns in ordinal order, the primary-key column names in key order, and the connector.

    Attributes:
        table_id: the table.
        columns: its columns, in ordinal order.
        primary_key: the primary-key columns, in key order (empty: no primary key).
        connector: the Debezium connector whose ``source`` block its changes carry
            (``mysql``, ``postgresql``); see :mod:`cdc.model.envelope`.
        database: the database holding the table when ``table_id.db`` names a schema in it
            (PostgreSQL: Debezium's ``source.db``); None when ``table_id.db`` is the database.
        replica_identity: PostgreSQL's ``relreplident`` (``d`` default, ``f`` full, ``i`` index,
            ``n`` nothing), which decides what an update's ``before`` holds in Debezium's format;
            None elsewhere. Schemas that differ in it alone compare equal.
    """

    table_id: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    connector: str
    database: str | None = None
    replica_identity: str | None = field(default=None, compare=False)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name.lower() == name.lower():
                return c
        raise KeyError(f"{self.table_id} has no column {name!r}")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow, nullable=True) for c in self.columns])


def _type_to_text(t: pa.DataType) -> str:
    """An Arrow type as text that :func:`_type_from_text` reads back (IPC, base64)."""
    return base64.b64encode(pa.schema([pa.field("t", t)]).serialize().to_pybytes()).decode()


def _type_from_text(text: str) -> pa.DataType:
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
    return schema.field("t").type


def schema_to_dict(schema: TableSchema) -> dict[str, Any]:
    """A table schema as JSON-ready values (the schema history and sink metadata store it)."""
    return {
        "table": str(schema.table_id), "connector": schema.connector, "database": schema.database,
        **({"replica_identity": schema.replica_identity} if schema.replica_identity else {}),
        "primary_key": list(schema.primary_key),
        "columns": [{"name": c.name, "data_type": c.data_type, "column_type": c.column_type,
                     "nullable": c.nullable, "precision": c.precision, "scale": c.scale,
                     "datetime_precision": c.datetime_precision, "charset": c.charset,
                     "collation": c.collation, "arrow": _type_to_text(c.arrow),
                     "arrow_text": str(c.arrow), **({"origin": c.origin} if c.origin else {}),
                     **({"default": c.default} if c.default is not None else {})}
                    for c in schema.columns],
    }


def schema_from_dict(d: dict[str, Any]) -> TableSchema:
    """The schema :func:`schema_to_dict` wrote."""
    columns = tuple(
        Column(c["name"], c["data_type"], c["column_type"], c["nullable"], c.get("precision"), c.get("scale"),
               c.get("datetime_precision"), c.get("charset"), c.get("collation"),
               arrow=_type_from_text(c["arrow"]), origin=c.get("origin"), default=c.get("default"))
        for c in d["columns"])
    return TableSchema(TableId.parse(d["table"]), columns, tuple(d["primary_key"]), d["connector"],
                       d.get("database"), d.get("replica_identity"))
