"""Can the job write where its config points? Checked at start, one clear line per failure.

A folder that cannot be created or written (a read-only mount, a path under a regular file, a
bucket without write permission) otherwise fails deep inside a Delta or Arrow call with a stack
trace. :func:`check_writable` writes a probe file in the folder and deletes it; folders it had to
create for that are removed again, so a job refused later at start-up has written nothing.

Runs on the driver, before the query starts.
"""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from cdc.model.storage import filesystem


def check_writable(key: str, path: str) -> None:
    """Create ``path`` if missing, then write and delete a probe file in it.

    Raises:
        ConfigError: names the key, the path, the reason and the fix.
    """
    created: list[str] = []
    try:
        fs, base = filesystem(path)
        if isinstance(fs, pafs.LocalFileSystem):  # a plain path or a file:// URI
            created = _missing(base)
        fs.create_dir(base, recursive=True)
        probe = f"{base.rstrip('/')}/.spark-cdc-probe-{uuid.uuid4().hex}"
        with fs.open_output_stream(probe) as out:
            out.write(b"spark-cdc checks that it can write here; this file is deleted at once\n")
        fs.delete_file(probe)
    except (OSError, pa.ArrowException) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"{key}: cannot write to {path} ({reason}): point {key} at a folder this job can "
                          "create and write, or fix its permissions", key=key, path=path) from None
    finally:
        for folder in created:  # deepest first; only empty folders go (os.rmdir)
            try:
                os.rmdir(folder)
            except OSError:
                break


def _missing(folder: str) -> list[str]:
    """The folders of ``folder`` that do not exist yet, deepest first."""
    out = []
    while not os.path.exists(folder):
        out.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return out


def sink_paths(config: JobConfig) -> list[tuple[str, str]]:
    """The (key, path) of every folder the sinks write: ``sink.path``, ``sink.staging_path``
    (``sink[i].…`` when ``sink:`` is a list of several)."""
    out = []
    for i, sink in enumerate(config.sink):
        prefix = "sink" if len(config.sink) == 1 else f"sink[{i}]"
        for name in ("path", "staging_path"):
            value = getattr(sink, name, None)
            if isinstance(value, str) and value:
                out.append((f"{prefix}.{name}", value))
    return out
