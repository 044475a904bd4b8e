"""Where a job keeps files that are not Delta tables (checkpoint, state, staging): a local path or
a pyarrow filesystem URI (``s3://``, ``gs://``, ``hdfs://``, ``file://``)."""

from __future__ import annotations

import os

import pyarrow.fs as pafs


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``path`` and the path within it, absolute and without a trailing slash.

    Raises:
        pyarrow.ArrowInvalid / ArrowNotImplementedError / OSError: not a URI that pyarrow can open.
    """
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(path)
    fs, base = pafs.FileSystem.from_uri(path)
    return fs, base.rstrip("/") or "/"
