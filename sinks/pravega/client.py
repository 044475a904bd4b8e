"""The Pravega client (the ``pravega`` package's Rust bindings, module ``pravega_client``), made
from a sink's config (driver side), and the control stream of committed batches.

The client reads Basic authentication's credentials from its process environment
(``pravega_client_auth_method``/``_username``/``_password``) and its TLS certificates' folder
(``pravega_client_tls_cert_path``): :func:`stream_manager` sets them
from the config, and no log line shows them.

The control records of a job live in single-segment streams used as byte streams: one JSON line
per record, each one append (atomic). A byte stream takes appends from the writer that first
wrote it only (another one's conditional append fails, and the client cannot move a writer to the
tail), so each run of the job (each recovery) writes a stream of its own,
``<control>.<job hash>.<n>`` with ``n`` one above the newest; the older ones are removed once the
new one holds a record. :func:`newest_record` reads a stream backward from its tail.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

from sinks.base import SinkError
from sinks.pravega.config import PravegaSinkConfig

_CHUNK = 256 * 1024  # bytes of the control stream read at a time, backward from its tail


class PravegaClientMissing(SinkError):
    """The ``pravega`` package is not installed (it has wheels for CPython 3.10 and 3.11 only)."""


def client_module() -> Any:
    """``pravega_client``.

    Raises:
        PravegaClientMissing: the package is not installed; the message names the fix.
    """
    try:
        import pravega_client
    except ImportError:
        raise PravegaClientMissing(
            "the Pravega sink needs the `pravega` client package: `pip install 'spark-cdc[pravega]'`; "
            "it has wheels for CPython 3.10 and 3.11 only, so run the job's driver on one of them") from None
    return pravega_client


def stream_manager(config: PravegaSinkConfig) -> Any:
    """A ``StreamManager`` of the controller (auth and TLS as configured)."""
    module = client_module()
    auth = config.username is not None
    if auth:  # the client's own variables (lower case)
        secret = config.password.get_secret_value() if config.password is not None else ""
        os.environ.update({"pravega_client_auth_method": "Basic",
                           "pravega_client_auth_username": str(config.username),
                           "pravega_client_auth_password": secret})
    if config.tls_cert_path:
        os.environ["pravega_client_tls_cert_path"] = config.tls_cert_path  # noqa: SIM112
    return module.StreamManager(config.controller_uri, auth, config.uses_tls())


def writer_id(job_id: str, stream: str) -> int:
    """A transactional writer's id: stable per job and stream (for Pravega's own bookkeeping)."""
    return zlib.crc32(f"{job_id}/{stream}".encode())


def control_streams(names: list[str], control: str, job_id: str) -> list[tuple[int, str]]:
    """The job's control streams among ``names`` (a scope's streams), as ``(n, name)``, oldest first."""
    prefix = f"{control}.{zlib.crc32(job_id.encode()):08x}."
    found = [(int(n[len(prefix):]), n) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit()]
    return sorted(found)


def next_control_stream(names: list[str], control: str, job_id: str) -> str:
    """The name of this run's control stream: one above the job's newest."""
    found = control_streams(names, control, job_id)
    return f"{control}.{zlib.crc32(job_id.encode()):08x}.{(found[-1][0] + 1) if found else 0}"


def record_line(record: dict[str, Any]) -> bytes:
    """One control record as its line."""
    return json.dumps(record, sort_keys=True).encode() + b"\n"


def newest_record(control: Any, job_id: str) -> dict[str, Any] | None:
    """The newest record of ``job_id`` in the control byte stream ``control`` (None: none)."""
    head, end = control.current_head_offset(), control.current_tail_offset()
    carry = b""
    while end > head:
        start = max(head, end - _CHUNK)
        control.seek(start, 0)
        data = b""
        while len(data) < end - start:
            buf = bytearray(end - start - len(data))
            n = control.readinto(buf)
            if not n:
                break
            data += bytes(buf[:n])
        lines = (data + carry).split(b"\n")
        carry = lines[0] if start > head else b""  # the first line may begin before ``start``
        for line in reversed(lines[1:] if start > head else lines):
            record = _parse(line)
            if record is not None and record.get("job") == job_id:
                return record
        end = start
    return None


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
