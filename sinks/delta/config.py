"""``sink:`` for Delta (``type: delta``): a mirror and a changelog table per source table."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from cdc.model.config import ConfigModel, SinkConfig
from cdc.model.schema import TableId
from sinks.delta.tables import TableKind, table_uri

Engine = Literal["auto", "delta-rs", "delta-spark"]

MiB = 1024 * 1024


class MaintenanceConfig(ConfigModel):
    """``sink.maintenance``: compaction and VACUUM of the job's tables, run by the job
    (:mod:`sinks.delta.maintenance`)."""

    every: int = Field(default=100, ge=0, description="compact a table's mirror and changelog (small files "
                       "into files of the target size) after every this many batches that wrote the table "
                       "(counted across runs since its last compaction), then VACUUM them; `0` turns "
                       "maintenance off")
    interval_minutes: float = Field(default=60, ge=0, description="also maintain a table once this many "
                                    "minutes have passed since its last maintenance (or its creation) and a "
                                    "batch has written it since, so that a table written by a few batches an "
                                    "hour is not left for days with its small files; checked after each MERGE "
                                    "and, with `async_mirror`, while the job is idle; `0`: by `every` only")
    mirror_file_size: int = Field(default=16 * MiB, gt=0, description="target size in bytes of the mirror's "
                                  "files, also set as its `delta.targetFileSize`: a MERGE rewrites each file "
                                  "holding a changed key whole, so this bounds a MERGE's work and memory")
    changelog_file_size: int = Field(default=128 * MiB, gt=0, description="target size in bytes of the "
                                     "changelog's compacted files (the changelog is only appended to)")
    vacuum_retention_hours: int = Field(default=168, ge=1, description="VACUUM deletes the files that left a "
                                          "table this many hours ago or earlier (older versions need them: time "
                                          "travel, slow readers) and unreferenced files as old; at least 1, so "
                                          "that files written by tasks and not yet committed are never deleted")


class DeltaSinkConfig(SinkConfig):
    """``sink:`` for Delta: mirror at ``<path>/<db>/<table>``, changelog at ``..._changelog``."""

    type: Literal["delta"] = Field(default="delta", description="the sink kind: `delta`")
    path: str = Field(description="root directory or URI of the tables (`s3://...`, `abfss://...`): "
                      "mirror at `<path>/<db>/<table>`, changelog at `<path>/<db>/<table>_changelog`")
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False, description="object-store "
                                            "options for delta-rs (credentials, region); use `${ENV_VAR}` "
                                            "for secrets")
    engine: Engine = Field(default="delta-rs", description="who writes the mirror's MERGEs: `delta-rs` "
                           "(no JVM; faster on this project's benchmarks, docs/sinks/delta.md), "
                           "`delta-spark` (Spark's Delta writer: deletion vectors), or `auto` (delta-spark "
                           "when its jars are on the classpath)")
    async_mirror: bool = Field(default=True, description="MERGE the mirror in a background thread that "
                               "trails the changelog (batches queued meanwhile are merged together; after "
                               "a crash the mirror catches up from the changelog); `false` MERGEs inside "
                               "every batch")
    deletion_vectors: Literal["auto"] | bool = Field(
        default="auto", description="(delta-rs engine) record the mirror's updates and deletes in deletion "
        "vectors, in commits this project writes, instead of rewriting every file that holds a changed key: a "
        "MERGE then costs the changed rows, not the table (docs/sinks/delta.md); for mirrors with a primary "
        "key on a local path. `auto`: the mirrors the job creates get them, an existing copy-on-write mirror "
        "stays so (its readers keep working), an object-store path stays copy-on-write; `true`: existing mirrors "
        "too; `false`: copy-on-write. Readers must apply deletion vectors (Spark, DuckDB, Polars, delta-rs's "
        "`scan()` and `QueryBuilder`; not delta-rs's `to_pyarrow_table` or `to_pandas`); once on, a mirror keeps "
        "them (its files may carry some)")
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig, description="compaction "
                                           "and VACUUM of the mirror and changelog, run by the job")

    catalog_prefix: str = Field(default="", description="put in front of the database name when the tables "
                                "are registered by name: `<prefix><db>.<table>` and `<prefix><db>.<table>_changelog`")
    register_tables: bool = Field(default=True, description="register the mirror and changelog by name in the Spark "
                           "catalog (a local job keeps it under its state directory; see `python -m cdc sql`)")

    @field_validator("path")
    @classmethod
    def _path_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("sink.path must name a directory or URI, e.g. /data/cdc or s3://b/cdc")
        return v

    @model_validator(mode="after")
    def _deletion_vectors_local(self) -> DeltaSinkConfig:
        if self.deletion_vectors is True and not self.local:
            raise ValueError(f"sink.deletion_vectors needs a local sink.path, not {self.path}: the job commits "
                             "deletion vectors with a create-if-absent file, which object stores do not offer "
                             "here; set sink.deletion_vectors: false (the mirror is then copy-on-write)")
        return self

    @property
    def local(self) -> bool:
        """Whether ``path`` is on a local (or mounted) file system, not an object store."""
        return "://" not in self.path or self.path.startswith("file://")

    def wants_deletion_vectors(self, *, new: bool) -> bool:
        """Whether a mirror with a primary key gets deletion vectors (``new``: the job has just
        created it, and it holds nothing yet)."""
        if self.deletion_vectors == "auto":
            return new and self.local
        return self.deletion_vectors

    def uri(self, table_id: TableId, kind: TableKind) -> str:
        """The URI of ``table_id``'s mirror or changelog."""
        return table_uri(self.path, table_id, kind)
