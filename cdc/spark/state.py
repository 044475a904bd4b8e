"""The state directory: files that Spark's offsets refer to.

Layout (relative to the root)::

    source.json                       what the checkpoint captures (refuses a different source)
    chunks/<db.table>/<id>.json       chunk boundaries, written before an offset names them
    staged/<db.table>/<id>.arrow      a staged chunk: its SELECT rows, LW in the schema metadata
    schemas/<db.table>/<n>.json       schema version n of a table: where it starts, the DDL, the
                                      columns (cdc.model.history; kept for the job's lifetime)
    binlog_cuts/<server>/<file>.<pos>.json
                                      where the first transaction after a capped batch's end
                                      begins (binlog.mysql.dialect; deleted once the batch that
                                      starts there is committed)

The root is a local path or any URI pyarrow understands (``s3://``, ``gs://``, ``hdfs://``,
``file://``). Every write goes to a temporary name first, then moves into place, so a reader
never sees half a file. The store is a small picklable value: executors open the filesystem
lazily.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from cdc.model.positions import Offset
from cdc.model.schema import TableId
from cdc.model.storage import filesystem

_LW_KEY = b"spark_cdc.low_watermark"


class StateStore:
    """Reads and writes the state directory.

    Args:
        root: a local path or a filesystem URI.
    """

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self._fs: pafs.FileSystem | None = None
        self._base = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"StateStore({self.root!r})"

    @property
    def fs(self) -> pafs.FileSystem:
        """The filesystem, opened on first use (executors open their own)."""
        if self._fs is None:
            self._fs, self._base = filesystem(self.root)
            self._fs.create_dir(self._base, recursive=True)
        return self._fs

    def path(self, rel: str) -> str:
        """The filesystem path of ``rel`` (opens the filesystem, which fixes the base)."""
        self.fs  # noqa: B018
        return f"{self._base}/{rel}"

    # --- generic files -------------------------------------------------------------------

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a file atomically (temp name, then move)."""
        final = self.path(rel)
        self.fs.create_dir(final.rsplit("/", 1)[0], recursive=True)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, final)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel)) as f:
            return bytes(f.read())

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    def delete(self, rel: str) -> None:
        info = self.fs.get_file_info(self.path(rel))
        if info.type == pafs.FileType.File:
            self.fs.delete_file(info.path)
        elif info.type == pafs.FileType.Directory:
            self.fs.delete_dir(info.path)

    def file_names(self, rel: str) -> list[str]:
        """The names of the files in folder ``rel`` (none when it does not exist), sorted."""
        selector = pafs.FileSelector(self.path(rel), allow_not_found=True)
        return sorted(i.base_name for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File)

    def write_json(self, rel: str, value: Any) -> None:
        self.write_bytes(rel, json.dumps(value, sort_keys=True).encode())

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_bytes(rel))

    # --- chunks --------------------------------------------------------------------------

    @staticmethod
    def chunk_path(table: TableId, split_id: int) -> str:
        return f"chunks/{table}/{split_id}.json"

    @staticmethod
    def staged_path(table: TableId, split_id: int) -> str:
        return f"staged/{table}/{split_id}.arrow"

    def write_staged(self, table: TableId, split_id: int, rows: pa.Table, lw: Offset) -> None:
        """Store a staged chunk: its rows, and its LW in the schema metadata."""
        meta = dict(rows.schema.metadata or {})
        meta[_LW_KEY] = json.dumps(lw.to_dict()).encode()
        rows = rows.replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows, max_chunksize=65536)
        self.write_bytes(self.staged_path(table, split_id), sink.getvalue().to_pybytes())

    def staged_low_watermark(self, table: TableId, split_id: int) -> dict[str, Any]:
        """The LW of a staged chunk as its dialect wrote it (reads only the file's schema)."""
        with self.fs.open_input_file(self.path(self.staged_path(table, split_id))) as f:
            schema = ipc.open_file(f).schema
        return dict(json.loads(schema.metadata[_LW_KEY]))

    def read_staged(self, table: TableId, split_id: int) -> pa.Table:
        """The rows of a staged chunk, without the LW metadata."""
        with self.fs.open_input_file(self.path(self.staged_path(table, split_id))) as f:
            rows = ipc.open_file(f).read_all()
        meta = {k: v for k, v in (rows.schema.metadata or {}).items() if k != _LW_KEY}
        return rows.replace_schema_metadata(meta or None)

    def forget_chunk(self, table: TableId, split_id: int) -> None:
        """Delete a chunk's boundaries and staged rows (after its emission was committed)."""
        self.delete(self.staged_path(table, split_id))
        self.delete(self.chunk_path(table, split_id))

    # --- schema history (cdc.model.history.HistoryStore) -----------------------------------

    @staticmethod
    def schema_dir(table: TableId) -> str:
        return f"schemas/{table}"

    def schema_versions(self, table: TableId) -> list[dict[str, Any]]:
        """Every stored schema version of ``table`` (``schemas/<db.table>/<version>.json``)."""
        selector = pafs.FileSelector(self.path(self.schema_dir(table)), allow_not_found=True)
        names = [i.base_name for i in self.fs.get_file_info(selector)
                 if i.type == pafs.FileType.File and i.base_name.endswith(".json")]
        return [self.read_json(f"{self.schema_dir(table)}/{n}") for n in sorted(names)]

    def write_schema_version(self, table: TableId, version: int, data: dict[str, Any]) -> None:
        """Store one schema version. Versions are keyed by log position, so a replayed batch or a
        second reader of the same slice writes the same content again (atomically)."""
        self.write_json(f"{self.schema_dir(table)}/{version:06d}.json", data)
