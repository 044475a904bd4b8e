"""Table identity and column metadata, as every layer sees a captured table.

A dialect (``binlog/<database>``) reads a table's description from its catalog and builds these
values; everything above it works with them without knowing the database. Each column carries
the Arrow type its values travel as through the snapshot, the log, the Spark stream and the
sinks, chosen once by the dialect (see ``docs/types.md``), and the database's own type names,
which only the dialect and the Debezium format interpret.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


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
    """

    table_id: TableId
        database: the database holding the table when ``table_id.db`` names a schema in it
            (PostgreSQL: Debezium's ``source.db``); None when ``table_id.db`` is the database.
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    connector: str

    def column(self, name: str) -> Column:
        for c in self.columns:
    database: str | None = None
            if c.name.lower() == name.lower():
                return c
        raise KeyError(f"{self.table_id} has no column {name!r}")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow, nullable=True) for c in self.columns])
