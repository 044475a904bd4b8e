"""The Pravega sink's driver-side commit against Pravega's raw transactional writer, in one run.

A throwaway Pravega (cdc/app/sandbox/pravega.py); ``--rows`` snapshot rows of the contract suite's
table (tests/change_batches.py) staged by the sink's writer, then committed by the sink (its
transaction, control records and the staged files read back), timed; then the very same events
written by one raw transaction (begin, ``write_event_bytes`` with the routing key, commit) into a
stream of their own. Prints events/s of both and the ratio (goal: at least 0.5x). Not a test, and
not the job end to end (benchmarks/stream_bench.py's phases do not run Pravega yet).

Usage: .venv/bin/python benchmarks/pravega_commit.py [--rows 20000]

The sandbox keeps its data on its 1 GiB heap: 100,000 rows (~4.7 KB events, twice) did not finish in
400 s here. One run, 20,000 rows, load from other sessions: sink 6.4k events/s, raw 2.2k events/s (the raw
writer runs second, on a fuller heap: the order favours the sink; alternate them before trusting it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from change_batches import SINGLE_KEY, batch, event, row

from cdc.app.sandbox.pravega import start_pravega_sandbox
from sinks.base import TableBatch
from sinks.pravega.client import client_module
from sinks.pravega.config import PravegaSinkConfig
from sinks.pravega.sink import PravegaSink
from sinks.stream.batches import batch_messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)  # both copies live on the 1 GiB heap
    args = parser.parse_args()
    box = start_pravega_sandbox()
    try:
        with tempfile.TemporaryDirectory() as root:
            config = PravegaSinkConfig(controller_uri=box.controller_uri, topic_prefix="bench", segments=3,
                                       staging_path=f"{root}/staging")
            sink = PravegaSink(config, "bench")
            sink.open({SINGLE_KEY.table_id: SINGLE_KEY})
            staged = TableBatch(SINGLE_KEY)
            rows = [event("r", None, row(SINGLE_KEY, (i,), c_int=i, c_str=f"name-{i}"), 1) for i in range(args.rows)]
            staged.snapshot = sink.writer().write(SINGLE_KEY, batch(SINGLE_KEY, rows), "snapshot")
            staged.snapshot_rows = args.rows
            events = [(m.key.decode() if m.key else None, m.value)
                      for m in batch_messages(sink.staging, staged, config.schemas_enable) if m.value is not None]
            t0 = time.perf_counter()
            sink.commit(0, [staged])
            sink_s = time.perf_counter() - t0
            sink.close()
            manager = client_module().StreamManager(box.controller_uri, False, False)
            manager.create_stream(config.scope, "raw", 3)
            writer = manager.create_transaction_writer(config.scope, "raw", 1)
            t0 = time.perf_counter()
            txn = writer.begin_txn()
            for key, value in events:
                txn.write_event_bytes(value, key)
            txn.commit()
            raw_s = time.perf_counter() - t0
    finally:
        box.stop()
    n = len(events)
    print(f"{n} events, {sum(len(v) for _, v in events) / n:.0f} bytes each")
    print(f"sink commit:               {n / sink_s:10.0f} events/s ({sink_s:.2f} s)")
    print(f"raw transactional writer:  {n / raw_s:10.0f} events/s ({raw_s:.2f} s)")
    print(f"sink / raw: {raw_s / sink_s:.2f}x (goal >= 0.5x)")


if __name__ == "__main__":
    main()
