"""A Delta table's commits read back one by one, newest first, from ``_delta_log/<version>.json``.

The mirror follower's crash recovery reads the changelog's commits after the mirror's newest
batch (:func:`sinks.delta.follower.changelog_batches_after`); maintenance reads the same commits
to know which files a VACUUM must keep for it (:mod:`sinks.delta.maintenance`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
from deltalake.fs import DeltaStorageHandler


class MissingCommit(Exception):
    """A commit file is gone (the log's retention removed it)."""


@dataclass(frozen=True)
class Commit:
    """One commit: its version, the batch it carries (the app transaction of ``app_id``; None:
    another writer's commit), its operation, the data files it added and when it was made (epoch
    milliseconds of its commitInfo; None: the writer recorded none)."""

    version: int
    batch: int | None
    operation: str | None
    added: list[str]
    timestamp: int | None = None


def table_fs(uri: str, storage_options: dict[str, str]) -> pafs.FileSystem:
    """The table's storage as a pyarrow filesystem rooted at the table (local or object store)."""
    return pafs.PyFileSystem(DeltaStorageHandler(uri, storage_options or None))


def commits_newest_first(fs: pafs.FileSystem, newest: int, app_id: str) -> Iterator[Commit]:
    """The commits from version ``newest`` down to 0; stop iterating where you have enough.

    Raises:
        MissingCommit: a commit file is gone.
    """
    for version in range(newest, -1, -1):
        actions = read_actions(fs, version)
        txn = next((a["txn"] for a in actions if "txn" in a and a["txn"]["appId"] == app_id), None)
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        yield Commit(version, None if txn is None else int(txn["version"]), info.get("operation"),
                     [unquote(a["add"]["path"]) for a in actions if "add" in a], info.get("timestamp"))


def read_actions(fs: pafs.FileSystem, version: int) -> list[dict[str, Any]]:
    """The actions of commit ``version`` (``fs`` rooted at the table).

    Raises:
        MissingCommit: the commit file is gone.
    """
    try:
        with fs.open_input_stream(f"_delta_log/{version:020d}.json") as f:
            text = f.read().decode()
    except (FileNotFoundError, OSError):
        raise MissingCommit(f"commit {version}") from None
    return [json.loads(line) for line in text.splitlines() if line.strip()]
