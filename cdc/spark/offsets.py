"""The offset Spark writes to ``<checkpoint>/offsets/N`` for batch N: the enumerator's state.

It holds the log position read when batch N was planned (the stream slice end, and the HW of the
chunks emitted in N), the snapshot progress of every table after batch N, and the chunks batch N
stages and emits. See docs/contributing/architecture.md for why every emitted row is a function of
(start, end) and the state files. Positions are the dialect's; this module only stores them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from cdc.model.errors import ConfigError
from cdc.model.positions import Offset

TableState = Literal["pending", "snapshot", "stream"]
OFFSET_VERSION = 2  # 2: the log position is the dialect's ("position"), not a binlog file/pos


@dataclass(frozen=True)
class TableProgress:
    """A table's snapshot progress after a batch.

    Attributes:
        state: ``pending`` (no chunk yet), ``snapshot`` (chunks in flight), ``stream`` (every
            chunk emitted, or the table is not snapshotted: all its changes flow).
        assigned: chunks ``0..assigned-1`` have been given to a batch to stage.
        emitted: chunks ``0..emitted-1`` have been emitted.
        upto: encoded chunk boundary: keys below it (the server's order) are in emitted chunks.
            None while nothing is emitted.
        splitter: the lazy splitter's state, None before the first chunk.
        split_done: the splitter produced its last chunk.
        rejoined: the table joined these offsets again after it had left them (dropped and
            created again, or matched again): its sink tables may hold its keys already, so its
            snapshot rows reach the sinks as changes, upserted by key, not appended
            (docs/concepts/schema-evolution.md, "New and dropped tables"). Kept in every state.
    """

    state: TableState
    assigned: int = 0
    emitted: int = 0
    upto: Any = None
    splitter: dict[str, Any] | None = None
    split_done: bool = False
    rejoined: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"state": self.state}
        if self.state == "snapshot":
            d.update(assigned=self.assigned, emitted=self.emitted, upto=self.upto,
                     splitter=self.splitter, split_done=self.split_done)
        if self.rejoined:
            d["rejoined"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableProgress:
        return cls(state=d["state"], assigned=d.get("assigned", 0), emitted=d.get("emitted", 0),
                   upto=d.get("upto"), splitter=d.get("splitter"), split_done=d.get("split_done", False),
                   rejoined=bool(d.get("rejoined", False)))


Ranges = dict[str, list[int]]  # table name -> [first chunk id, last chunk id + 1)


@dataclass(frozen=True)
class SourceOffset:
    """The offset of one micro-batch (its end), as Spark stores it.

    Attributes:
        position: the log position read when the batch was planned: the end of its stream
            slice and the high watermark of the chunks it emits.
        ts_ms: when it was planned.
        tables: each table's snapshot progress after the batch.
        stage: the chunks the batch stages, per table.
        emit: the chunks the batch emits (those the previous batch staged), per table.
        left: the tables that were in these offsets and left them (no longer captured), sorted;
            one that joins again is :attr:`TableProgress.rejoined`.
    """

    position: Offset
    ts_ms: int
    tables: dict[str, TableProgress]
    stage: Ranges = field(default_factory=dict)
    emit: Ranges = field(default_factory=dict)
    left: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "v": OFFSET_VERSION, "position": self.position.to_dict(), "ts_ms": self.ts_ms,
            "tables": {t: p.to_dict() for t, p in sorted(self.tables.items())},
            "stage": self.stage, "emit": self.emit,
        }
        if self.left:
            d["left"] = list(self.left)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], position: Callable[[dict[str, Any]], Offset]) -> SourceOffset:
        """Read an offset back; ``position`` is the dialect's ``offset_from_dict``.

        Raises:
            ConfigError: the checkpoint was written by another spark-cdc version.
        """
        if d.get("v") != OFFSET_VERSION:
            raise ConfigError(f"checkpoint offset version {d.get('v')!r} is not {OFFSET_VERSION}: this "
                              "checkpoint was written by another spark-cdc version; start again with a "
                              "new checkpoint, state directory and sink path")
        return cls(position=position(d["position"]), ts_ms=int(d["ts_ms"]),
                   tables={t: TableProgress.from_dict(p) for t, p in d["tables"].items()},
                   stage={t: list(r) for t, r in d.get("stage", {}).items()},
                   emit={t: list(r) for t, r in d.get("emit", {}).items()},
                   left=tuple(d.get("left", ())))
