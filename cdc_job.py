"""spark-submit entry point: ``spark-submit cdc_job.py --config job.yaml [--once]``.

The same CLI as ``python -m cdc`` with ``run`` implied (``cdc_job.py validate --config ...``
works too). The package (cdc, chunking, binlog, sinks) must be importable on the driver and the
executors: install the wheel on every node, or ship it with ``--py-files``.
"""

from cdc.app.cli import job_main

if __name__ == "__main__":
    raise SystemExit(job_main())
