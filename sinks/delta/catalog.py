"""Tables by name: the Delta sink registers every mirror and changelog in the Spark catalog.

The mirror of ``db.table`` is ``<catalog_prefix><db>.<table>``, its changelog
``<catalog_prefix><db>.<table>_changelog``. A local job keeps its catalog in a Hive metastore on
an embedded Derby database under its state directory (``cdc.spark.session.catalog_conf``), so
the names outlive the process; under spark-submit the tables go into the session's own catalog.

A name that already belongs to a table at another location is an error: nothing is overwritten.
The check runs before anything is written; the registering then runs in the background
(:class:`Registration`), as nothing of the job reads the names, and asks once more before each
``CREATE TABLE``.

In a catalog that is the session's own (a local job's), the sink records the names it registered
(:data:`RECORD`): a restart whose names are all recorded at their locations asks the metastore
nothing, and so does not start it (3 s of a 21 s restart here). ``python -m cdc sql``, which may
change the names, deletes the record; the next start then asks the metastore again.

Registering needs Delta's SQL support in the session (its extension and catalog); a session
without it gets a warning that names the settings, and the tables stay readable by path.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from cdc.model.schema import TableId, TableSchema
from cdc.model.spark_conf import OWN_CATALOG
from sinks.base import SinkError
from sinks.delta.config import DeltaSinkConfig
from sinks.delta.files import local_dir
from sinks.delta.tables import TableKind

log = logging.getLogger(__name__)
KINDS: tuple[TableKind, ...] = ("mirror", "changelog")
RECORD = "registered-names.json"  # in the catalog's folder: {"db.table": location} of what the sink registered


class TableNameTaken(SinkError):
    """A catalog name the sink would register already names a table at another location."""


def table_name(config: DeltaSinkConfig, table_id: TableId, kind: TableKind) -> tuple[str, str]:
    """The (database, table) name of a mirror or changelog in the catalog."""
    return f"{config.catalog_prefix}{table_id.db}", table_id.table + ("_changelog" if kind == "changelog" else "")


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _same(a: str, b: str) -> bool:
    def norm(uri: str) -> str:
        uri = uri.rstrip("/")
        return local_dir(uri) or uri

    return norm(a) == norm(b)


def supports_delta_sql(spark: Any) -> bool:
    """True when the session was built with Delta's SQL extension (it can register tables)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return "DeltaSparkSessionExtension" in extensions


def location(spark: Any, db: str, table: str) -> str | None:
    """Where the catalog says table ``db.table`` lives, or None when there is no such table.

    Asks the session catalog's metastore alone: ``spark.catalog.tableExists`` and ``DESCRIBE``
    load the Delta table behind the name (its log, its state), 2.8 s a name here, twice for each
    of a job's tables at every start."""
    jvm = spark._jvm
    ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(table, jvm.scala.Some(db))
    catalog = spark._jsparkSession.sessionState().catalog()
    if not catalog.tableExists(ident):
        return None
    where = catalog.getTableMetadata(ident).storage().locationUri()  # none for a view
    return str(where.get().toString()) if where.isDefined() else ""


def _names(config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> list[tuple[str, str, str]]:
    """(database, table, location) of every mirror and changelog, in a stable order."""
    return [(*table_name(config, t, kind), _absolute(config.uri(t, kind))) for t in sorted(schemas) for kind in KINDS]


def _absolute(uri: str) -> str:
    """A relative local path made absolute against the driver's working folder (where the job
    writes it): the catalog would take it as relative to its warehouse. A URI stays as it is."""
    return uri if "://" in uri or uri.startswith("file:") else os.path.abspath(uri)


def _record(spark: Any) -> Path | None:
    """The record of registered names of the session's own catalog; None for a shared catalog,
    which others change, so it is asked every time."""
    directory = spark.conf.get(OWN_CATALOG, None)
    return Path(directory) / RECORD if directory else None


def _recorded_names(record: Path) -> dict[str, str]:
    try:
        names = json.loads(record.read_text())
    except (OSError, ValueError):  # none yet, or unreadable: the metastore is asked
        return {}
    return names if isinstance(names, dict) else {}


def names_recorded(spark: Any, config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> bool:
    """Whether the session's own catalog records every name of ``schemas`` as registered at its
    location by this sink (driver): :func:`check_names` and :func:`register_tables` have nothing to do."""
    record = _record(spark)
    return record is not None and names_recorded_in(record.parent, config, schemas)


def names_recorded_in(catalog: str | Path, config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> bool:
    """:func:`names_recorded` for the own catalog in folder ``catalog``, without a session."""
    record = Path(catalog) / RECORD
    if not (record.parent / "metastore_db").is_dir():
        return False
    names = _recorded_names(record)
    return all(names.get(f"{db}.{table}") == uri for db, table, uri in _names(config, schemas))


def forget_names(catalog_dir: str | Path) -> None:
    """Delete the record of registered names in ``catalog_dir`` (a session that may change them
    opens it): the next job start asks the metastore again."""
    (Path(catalog_dir) / RECORD).unlink(missing_ok=True)


_RECORDING = threading.Lock()  # the registrations of a job's sinks run side by side


def _remember(spark: Any, names: dict[str, str]) -> None:
    record = _record(spark)
    if record is None:
        return
    with _RECORDING:
        temp = record.with_suffix(".tmp")
        temp.write_text(json.dumps({**_recorded_names(record), **names}, indent=1, sort_keys=True))
        os.replace(temp, record)  # whole or not at all, whenever the process dies


def check_names(spark: Any, config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> bool:
    """Check that every name the sink would register is free or already this job's (driver, before
    anything is written). False when the session cannot register tables at all.

    Raises:
        TableNameTaken: a name already belongs to a table at another location.
    """
    if not supports_delta_sql(spark):
        log.warning("the Spark session has no Delta SQL support, so the tables are not registered by name "
                    "(they stay readable by path): build it with spark.sql.extensions="
                    "io.delta.sql.DeltaSparkSessionExtension and spark.sql.catalog.spark_catalog="
                    "org.apache.spark.sql.delta.catalog.DeltaCatalog (docs/operating/deployment.md)")
        return False
    for db, table, uri in _names(config, schemas):
        _ours(spark, db, table, uri)
    return True


def _ours(spark: Any, db: str, table: str, uri: str) -> bool:
    """Whether ``db.table`` names the table at ``uri`` already (False: the name is free).

    Raises:
        TableNameTaken: it names another location.
    """
    existing = location(spark, db, table)
    if existing is not None and not _same(existing, uri):
        raise TableNameTaken(
            f"the catalog name {db}.{table} already belongs to the table at {existing}, not {uri}: "
            "drop it (DROP TABLE keeps a table's files only when it is external) or set "
            "sink.catalog_prefix to register this job's tables under other names",
            table=f"{db}.{table}", location=existing)
    return existing is not None


def register_tables(spark: Any, config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> list[str]:
    """Register every mirror and changelog of ``schemas`` (they must exist) that is not registered
    yet; returns their names (driver).

    Raises:
        TableNameTaken: a name was taken by another location since :func:`check_names`.
    """
    databases, locations = set(), {}
    for db, table, uri in _names(config, schemas):
        if db not in databases:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {_ident(db)}")
            databases.add(db)
        # asked again just before: another registration (a second sink of the job with the same
        # names, checked while this one ran) may have taken the name since the check
        if not _ours(spark, db, table, uri):
            try:
                _create_table(spark, db, table, uri)
            except Exception:
                if not _ours(spark, db, table, uri):  # taken elsewhere meanwhile: TableNameTaken
                    raise
        locations[f"{db}.{table}"] = uri
    _remember(spark, locations)
    names = list(locations)
    log.info("registered %d tables by name: %s", len(names), ", ".join(names))
    return names


def _create_table(spark: Any, db: str, table: str, uri: str) -> None:
    """Register ``db.table`` as the Delta table at ``uri``, which exists (driver).

    In the session's own catalog (a local job's) the entry goes to the catalog directly, as
    delta-spark's ``CREATE TABLE ... USING DELTA LOCATION`` writes it (:func:`delta_entry`). That
    statement first loads the table through delta-spark, for nothing the job needs: in a job's
    first start here it cost the driver JVM 2.8 CPU s for the first name and 0.36 for each next,
    on 2 cores beside the snapshot; the entry alone costs 0.1-0.3. A shared catalog
    (spark-submit's, which may be another metastore or a catalog service) gets the statement, and
    so does a Spark whose catalog classes :func:`delta_entry` does not know, or whose catalog
    refuses the entry.
    """
    entry = delta_entry(spark, db, table, uri) if _record(spark) is not None else None
    if entry is not None:
        try:
            spark._jsparkSession.sessionState().catalog().createTable(entry, False, False)
            return
        except Exception as exc:
            if location(spark, db, table) is not None:
                raise  # the name was taken meanwhile: the caller says whose it is
            log.info("registering %s.%s through CREATE TABLE: the catalog refused its entry (%s)",
                     db, table, _first_line(exc))
    full = f"{_ident(db)}.{_ident(table)}"
    spark.sql(f"CREATE TABLE {full} USING DELTA LOCATION '{uri.replace(chr(39), chr(92) + chr(39))}'")


def delta_entry(spark: Any, db: str, table: str, uri: str) -> Any:
    """The catalog entry delta-spark writes for an external Delta table at ``uri``: provider
    delta, no schema, no partition columns and no properties (readers take them from the table's
    log), partitions tracked by the catalog. None, logged, when Spark's ``CatalogTable`` or
    ``CatalogStorageFormat`` cannot be built so (another Spark than this was written for)."""
    jvm = spark._jvm
    try:
        none, empty = jvm.scala.Option.apply(None), jvm.PythonUtils.toScalaMap({})
        catalog, package = jvm.org.apache.spark.sql.catalyst.catalog, "org.apache.spark.sql.catalyst.catalog."
        # as delta-spark keeps it: file:/x, not file:///x (a Hadoop path's text)
        where = catalog.CatalogUtils.stringToURI(jvm.org.apache.hadoop.fs.Path(uri).toString())
        storage = _case_class(jvm, package + "CatalogStorageFormat", locationUri=jvm.scala.Some(where),
                              inputFormat=none, outputFormat=none, serde=none, compressed=False, properties=empty)
        return _case_class(jvm, package + "CatalogTable",
                           identifier=jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(table, jvm.scala.Some(db)),
                           tableType=catalog.CatalogTableType.EXTERNAL(),
                           storage=storage, schema=jvm.org.apache.spark.sql.types.StructType(),
                           provider=jvm.scala.Some("delta"), tracksPartitionsInCatalog=True)
    except Exception as exc:  # py4j's errors: a class, a parameter or a default that is not there
        log.info("registering %s.%s through CREATE TABLE: Spark's catalog entry could not be built here (%s)",
                 db, table, _first_line(exc))
        return None


def _first_line(exc: BaseException) -> str:
    """An error's first line (py4j's carry the JVM's whole stack trace), or its type."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _case_class(jvm: Any, name: str, **given: Any) -> Any:
    """An instance of the Scala case class ``name`` built by its constructor's parameter names:
    the ``given`` ones, and the defaults of the others.

    Raises:
        ValueError: a given name the constructor does not have.
        py4j.protocol.Py4JError: a parameter that is neither given nor has a default.
    """
    klass = jvm.java.lang.Class.forName(name)
    companion = jvm.java.lang.Class.forName(name + "$").getField("MODULE$").get(None)
    constructors = klass.getConstructors()
    if len(constructors) != 1:
        raise ValueError(f"{name} has {len(constructors)} constructors")
    args = []
    for i, parameter in enumerate(constructors[0].getParameters(), 1):
        key = str(parameter.getName())
        args.append(given.pop(key) if key in given else getattr(companion, f"apply$default${i}")())
    if given:
        raise ValueError(f"{name} has no parameter {sorted(given)}")
    return companion.apply(*args)


class Registration:
    """:func:`register_tables` in a background thread (driver), started once :func:`check_names`
    has passed and the tables exist: the job starts its query meanwhile. Nothing of the job reads
    the names, and each ``CREATE TABLE`` reads its table's log (a job's first start here: two names,
    4 s, before the snapshot could begin; a hundred tables, minutes). A failure is raised by
    :meth:`raise_error` (the sink's next commit) or :meth:`close`.
    """

    def __init__(self, spark: Any, config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(spark, config, dict(schemas)),
                                        name="register-tables", daemon=True)
        self._thread.start()

    def _run(self, spark: Any, config: DeltaSinkConfig, schemas: dict[TableId, TableSchema]) -> None:
        try:
            register_tables(spark, config, schemas)
        except BaseException as exc:  # raised in the job's thread (raise_error, close)
            self.error = exc

    def raise_error(self) -> None:
        """Raise the registration's error, if it failed."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def close(self) -> None:
        """Wait until the names are registered; raise the registration's error, if it failed."""
        self._thread.join()
        self.raise_error()
