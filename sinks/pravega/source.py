"""A Spark streaming source of Pravega streams (``pyspark.sql.datasource``), for ``follow-topic``.

No Pravega connector exists for Spark 4, and the Python client (``pravega_client``) reads a
stream only through a reader group: it cannot read a segment between two offsets, and it builds
a stream cut only from a reader group's position. So this source reads on the driver and stages
what it read (the hand-off of docs/ARCHITECTURE's "stage, then emit"):

* **latestOffset** (driver, once per micro-batch): for each followed stream, a new reader group
  starts at the start offset's position (a copy of the group that holds it, so that group never
  moves), reads every event there is (one empty slice, about a second, ends the read) or up to the
  trigger's limit, goes offline (the group then holds the exact position after the last event read)
  and writes the events to an Arrow file under ``<checkpoint>/pravega-events/<run>/``. The offset
  names, per stream, the reader group at its end, the segment offsets it holds, and the file.
* **read** (executors, one task per stream with new events): the file of the batch's end offset,
  as columns ``topic`` (the stream), ``offset`` (the event's index in the file: a key's events
  are in one segment, read in order) and ``value``. A batch that Spark replays reads the same
  file, so the same events, whatever the stream holds by then.
* **commit** (driver, once the batch after is planned): the files and reader groups of earlier
  micro-batches are removed (each run's folder lists the groups it created).

A reader group an offset names must still hold that offset's position: if it is gone, the source
fails with :class:`PositionLost` rather than read the stream again from its head. The staged
files must be where every executor can read them (the checkpoint folder, as the query's own).
The client settings (controller, auth, TLS) travel pickled inside the data source class.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from cdc.model.errors import CdcError, Transient
from sinks.base import SinkError
from sinks.pravega.client import stream_manager
from sinks.pravega.config import PravegaSinkConfig
from sinks.stream.follow_rows import ARROW_SCHEMA, ROWS_PER_BATCH, SCHEMA, rows_batch

STAGED = "pravega-events"  # the staged runs' folder in the checkpoint
GROUPS = "groups.json"  # a run's reader groups, listed before they are created


class PravegaReadFailed(CdcError, Transient):
    """Pravega did not answer while the driver read a stream (the query can be restarted)."""


class PositionLost(SinkError):
    """The reader group holding a micro-batch's position is gone or moved."""


@dataclass(frozen=True)
class StagedStream(InputPartition):
    """One task: the events of one stream that a micro-batch read, in a staged Arrow file."""

    topic: str
    path: str


@dataclass
class StreamRead:
    """What a read of one stream gave: the group now at its end, that end, the events, the file."""

    group: str
    cut: dict[str, int]
    events: int
    file: str


class PravegaStreamsSource(DataSource):
    """``spark.readStream.format("spark-cdc-pravega")`` of a follower's streams: a subclass per
    follower carries its settings (:func:`streams_source`)."""

    config: ClassVar[PravegaSinkConfig | None] = None
    streams: ClassVar[tuple[str, ...]] = ()
    folder: ClassVar[str] = ""
    max_rows: ClassVar[int | None] = None

    @classmethod
    def name(cls) -> str:
        return "spark-cdc-pravega"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        cls = type(self)
        assert cls.config is not None, "use streams_source() to make a source with its settings"
        return PravegaStreamsReader(cls.config, cls.streams, cls.folder, cls.max_rows)


def streams_source(config: PravegaSinkConfig, streams: list[str], checkpoint: str,
                   max_rows: int | None = None) -> type[PravegaStreamsSource]:
    """The data source class of ``streams``, staging under ``<checkpoint>/pravega-events`` (Spark
    pickles the class, settings included, to the Python processes that plan and read the stream)."""
    folder = str(Path(os.path.abspath(checkpoint)) / STAGED)
    return type("BoundPravegaStreamsSource", (PravegaStreamsSource,),
                {"config": config, "streams": tuple(streams), "folder": folder, "max_rows": max_rows})


def group_prefix(folder: str) -> str:
    """The reader-group names of one follower begin with this (stable for its checkpoint)."""
    return f"spark-cdc-follow-{zlib.crc32(folder.encode()):08x}"


class PravegaStreamsReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, reads and staging on the driver; :meth:`read` (a staged file) on executors.

    An offset: ``{"seq": n, "streams": {stream: {"group", "cut", "file", "events"}}}`` (``events``:
    how many the file holds); ``seq`` counts the micro-batches that read something, a stream
    absent from it is read from its head.
    """

    def __init__(self, config: PravegaSinkConfig, streams: tuple[str, ...], folder: str,
                 max_rows: int | None) -> None:
        self.config = config
        self.streams = streams
        self.folder = folder
        self.max_rows = max_rows
        self.available_now = False
        self.drained = False  # availableNow: what the streams held at the run's start is read
        self._manager: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_manager": None}

    def _client(self) -> Any:
        if self._manager is None:
            self._manager = stream_manager(self.config)
        return self._manager

    # --- driver ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return {"seq": 0, "streams": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Read what the streams hold after ``start`` (up to ``limit`` events per stream), stage
        it, and return the offset after it; ``start`` itself when nothing is new (driver, once
        per micro-batch)."""
        if self.drained:
            return start
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        seq = int(start["seq"]) + 1
        run = Path(self.folder) / f"{seq:010d}-{uuid.uuid4().hex[:8]}"
        try:
            reads = self._read_all(start, run, seq, cap)
        except _OURS:
            raise
        except BaseException as exc:  # a client call outside _call (release, offline, stream cut) panicked
            raise PravegaReadFailed(f"Pravega: reading the followed streams failed: {exc}: check the "
                                    f"controller and the segment store; restart the follower") from None
        new = {s: r for s, r in reads.items() if r.events}
        for r in reads.values():
            if not r.events:
                self._delete_group(r.group)  # it holds start's position, which start's group holds
        if self.available_now and (cap is None or all(r.events < cap for r in reads.values())):
            self.drained = True
        if not new:
            shutil.rmtree(run, ignore_errors=True)
            return start
        streams = {**start["streams"], **{s: {"group": r.group, "cut": r.cut, "file": r.file, "events": r.events}
                                          for s, r in new.items()}}
        return {"seq": seq, "streams": streams}

    def _read_all(self, start: dict[str, Any], run: Path, seq: int, cap: int | None) -> dict[str, StreamRead]:
        """Every followed stream that exists, read concurrently from ``start``'s positions."""
        manager, scope = self._client(), self.config.scope
        existing = set(_call("list the streams of scope " + scope, manager.list_stream, scope))
        streams = [s for s in self.streams if s in existing]
        groups = {s: f"{group_prefix(self.folder)}-{run.name}-{i}" for i, s in enumerate(streams)}
        run.mkdir(parents=True, exist_ok=True)
        (run / GROUPS).write_text(json.dumps(sorted(groups.values())))  # before they exist: commit() removes them
        readers = {s: self._open(s, groups[s], start["streams"].get(s)) for s in streams}

        async def read_every_stream() -> list[StreamRead]:
            return await asyncio.gather(*(
                _read_stream(group_reader, s, groups[s], run / f"{i}.arrow", cap)
                for i, (s, group_reader) in enumerate(readers.items())))

        results = asyncio.run(read_every_stream())
        out = {}
        for s, r in zip(streams, results, strict=True):
            r.cut = _cut(readers[s][0])
            out[s] = r
        return out

    def _open(self, stream: str, name: str, at: dict[str, Any] | None) -> tuple[Any, Any]:
        """A new reader group ``name`` at ``at``'s position (the stream's head without one) and
        its reader."""
        manager, scope = self._client(), self.config.scope
        cut = None
        if at is not None:
            lost = (f"Pravega stream {scope}/{stream}: reader group {at['group']} should hold the position "
                    f"{at['cut']} of the follower's last micro-batch but %s: it was deleted or read by another "
                    f"program; rebuild the Delta tables (a new --target and --checkpoint) to read the stream "
                    f"again from its head")
            try:
                holder = manager.create_reader_group(at["group"], scope, stream, False, None)
                cut, held = holder.get_streamcut(), _cut(holder)
            except _OURS:
                raise
            except BaseException as exc:  # a panic too (see _call)
                if "TableDoesNotExist" in str(exc):  # its state is gone: the group was deleted
                    raise PositionLost(lost % "its state is gone", stream=stream) from None
                raise PravegaReadFailed(f"Pravega: open reader group {at['group']}: {exc}: check "
                                        f"`controller_uri` and the servers; restart the follower") from None
            if held != at["cut"]:
                raise PositionLost(lost % f"holds {held}", stream=stream)
        group = _call(f"create reader group {name}", manager.create_reader_group, name, scope, stream, False, cut)
        return group, group.create_reader("follower")

    def _delete_group(self, name: str) -> None:
        with contextlib.suppress(Exception):  # already gone: nothing to remove
            self._client().delete_reader_group(name, self.config.scope)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        before = start["streams"]
        return [StagedStream(s, e["file"]) for s, e in sorted(end["streams"].items())
                if before.get(s) != e]

    def commit(self, end: dict[str, Any]) -> None:
        """Remove the staged runs before ``end``'s and their reader groups, except those ``end``
        names (driver, late: when the batch after ``end`` is planned)."""
        keep = {e["group"] for e in end["streams"].values()}
        folder = Path(self.folder)
        if not folder.is_dir():
            return
        for run in sorted(folder.iterdir()):
            if int(run.name.split("-")[0]) > int(end["seq"]):
                continue
            listed = run / GROUPS
            names = json.loads(listed.read_text()) if listed.exists() else []
            for name in names:
                if name not in keep:
                    self._delete_group(name)
            kept_here = keep & set(names)
            if not kept_here:
                shutil.rmtree(run, ignore_errors=True)
            else:  # the run still names end's groups: keep the list of those, drop its files
                for f in run.glob("*.arrow"):
                    f.unlink(missing_ok=True)
                listed.write_text(json.dumps(sorted(kept_here)))

    def stop(self) -> None:
        self._manager = None

    # --- executors ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StagedStream)
        with pa.memory_map(partition.path) as source:
            staged = ipc.open_file(source)
            for i in range(staged.num_record_batches):
                yield staged.get_batch(i)


_OURS = (KeyboardInterrupt, SystemExit, GeneratorExit, CdcError)


def _call(what: str, fn: Any, *args: Any) -> Any:
    """A client call; its failure as :class:`PravegaReadFailed` (the client raises plain errors, and
    when its retries run out it panics: pyo3's ``PanicException``, a ``BaseException``)."""
    try:
        return fn(*args)
    except _OURS:
        raise
    except BaseException as exc:
        raise PravegaReadFailed(f"Pravega: {what}: {exc}: check `controller_uri` and that the "
                                f"controller and the segment store run; restart the follower") from None


def _cut(group: Any) -> dict[str, int]:
    """A reader group's position: segment number (as text, as in JSON) -> offset."""
    return {str(k): int(v) for k, v in sorted(group.get_streamcut().get_segment_offset_map().items())}


async def _read_stream(group_reader: tuple[Any, Any], stream: str, group: str, path: Path,
                       cap: int | None) -> StreamRead:
    """Read events with the reader until an empty slice (or ``cap`` events), write them to
    ``path`` (a temp file renamed), and take the reader offline: its group then holds the position
    after the last event read (a slice left half read is released where it was left)."""
    _, reader = group_reader
    tmp = path.with_suffix(".tmp")
    n = 0
    values: list[bytes] = []
    with ipc.new_file(str(tmp), ARROW_SCHEMA) as out:
        while cap is None or n + len(values) < cap:
            try:
                slice_ = await reader.get_segment_slice_async()
            except _OURS:
                raise
            except BaseException as exc:  # a panic too (see _call)
                raise PravegaReadFailed(f"Pravega: read {stream}: {exc}: check the segment store; "
                                        f"restart the follower", stream=stream) from None
            got = 0
            for event in slice_:
                values.append(bytes(event.data()))
                got += 1
                if cap is not None and n + len(values) >= cap:
                    break
                if len(values) >= ROWS_PER_BATCH:
                    out.write_batch(rows_batch(stream, n, values))
                    n, values = n + len(values), []
            reader.release_segment(slice_)
            if not got:
                break
        if values:
            out.write_batch(rows_batch(stream, n, values))
            n += len(values)
    reader.reader_offline()
    os.replace(tmp, path)
    return StreamRead(group, {}, n, str(path))

