"""The command-line interface: ``python -m cdc <command>`` (``spark-submit cdc_job.py`` = ``run``).

Commands:
  run               run a job: ``--config job.yaml [--once]``.
  validate          check a job file without running it; ``--check-connection`` also connects
                    and runs the start-up checks.
  sql               a SQL query over the job's tables by name: ``--config job.yaml "SELECT ..."``
                    (or ``--catalog DIR``).
  demo              throwaway MariaDB with TPC-DS customer, the job, changes, a query on the lake.
  sandbox           a throwaway server (``mysql``) on a free port until Ctrl-C, for trying it out.
  config-reference  print every config key with its default and meaning (Markdown).
  version           print versions of spark-cdc and the engines it uses.

Exit codes: 0 done; 2 the config or a start-up check is wrong (one ``error:`` line per problem
on stderr, naming the fix; nothing was written); 1 the job failed while running.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from cdc import __version__
from cdc.model.errors import CdcError, ConfigError

COMMANDS = ("run", "validate", "sql", "demo", "sandbox", "config-reference", "version")
EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def error_lines(exc: CdcError, origin: str | None = None) -> list[str]:
    """``error: ...`` lines for an error: one per invalid key for a config error, else one."""
    errors = exc.context.get("errors") if isinstance(exc, ConfigError) else None
    if errors and origin:
        return [f"error: {origin}: {e}" for e in errors]
    return ["error: " + " ".join(str(exc).split())]


def _fail(exc: CdcError, origin: str | None = None, code: int = EXIT_INVALID) -> int:
    for line in error_lines(exc, origin):
        print(line, file=sys.stderr)
    return code


def _cmd_run(args: argparse.Namespace) -> int:
    from cdc.app.config import load_config
    from cdc.app.runner import JobFailed, JobRunner

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        return _fail(exc, args.config)
    try:
        summary = JobRunner(config).run(once=args.once)
    except JobFailed as exc:
        return _fail(exc, code=EXIT_FAILED)
    except CdcError as exc:
        return _fail(exc)
    print(summary.render(), flush=True)
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from cdc.app.config import load_config
    from cdc.app.runner import JobRunner, check_supported

    try:
        config = load_config(args.config)
        check_supported(config)
    except ConfigError as exc:
        return _fail(exc, args.config)
    if args.check_connection:
        try:
            tables = JobRunner(config).check()
        except CdcError as exc:
            return _fail(exc)
        print(f"{args.config}: valid; {config.source.hostname}:{config.source.port} passed the start-up "
              f"checks; {len(tables)} table(s): {', '.join(sorted(map(str, tables)))}")
    else:
        print(f"{args.config}: valid (add --check-connection to connect and run the start-up checks)")
    return EXIT_OK


def _cmd_version(_: argparse.Namespace) -> int:
    import deltalake
    import pyarrow
    import pyspark

    print(f"spark-cdc {__version__}")
    print(f"pyspark {pyspark.__version__}, deltalake {deltalake.__version__}, pyarrow {pyarrow.__version__}")
    return EXIT_OK


def _cmd_config_reference(_: argparse.Namespace) -> int:
    from cdc.app.config import config_reference

    print(config_reference(), end="")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from cdc.app.demo import run_demo

    return run_demo(scale=args.scale)


def _cmd_sql(args: argparse.Namespace) -> int:
    from cdc.app.config import load_config
    from cdc.app.runner import catalog_dir
    from cdc.app.sql import run_sql

    directory = args.catalog
    if directory is None:
        try:
            directory = catalog_dir(load_config(args.config))
        except ConfigError as exc:
            return _fail(exc, args.config)
    try:
        print(run_sql(directory, args.query, args.format), end="", flush=True)
    except CdcError as exc:
        return _fail(exc)
    return EXIT_OK


def _cmd_sandbox(args: argparse.Namespace) -> int:
    from cdc.app.sandbox import run_sandbox

    return run_sandbox(args.kind)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cdc",
        description="spark-cdc: MySQL/MariaDB change data capture into Delta Lake on Apache Spark.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("run", help="run a job: snapshot, then binlog, into Delta")
    p.add_argument("--config", required=True, help="the job's YAML file")
    p.add_argument("--once", action="store_true",
                   help="write everything available now, then exit (else run until SIGINT/SIGTERM)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("validate", help="check a job file without running it")
    p.add_argument("--config", required=True, help="the job's YAML file")
    p.add_argument("--check-connection", action="store_true",
                   help="also connect and run the start-up checks (settings, privileges, tables)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("demo", help="throwaway MariaDB + TPC-DS customer + local Spark: the job end to end")
    p.add_argument("--scale", type=float, default=0.1,
                   help="TPC-DS scale factor (0.1 = 10,000 customers, 1 = 100,000)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("sql", help="run a SQL query over the job's tables by name (db.table, db.table_changelog)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="the job's YAML file (its catalog is <state_dir>/catalog)")
    where.add_argument("--catalog", help="the catalog folder itself (needs no job file; make demo prints it)")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="table (default), or json lines / csv for scripts")
    p.add_argument("query", help='e.g. "SELECT count(*) FROM shop.orders"')
    p.set_defaults(func=_cmd_sql)

    from cdc.app.sandbox import SANDBOXES

    p = sub.add_parser("sandbox", help="start a throwaway server (temp folder, free port) until Ctrl-C")
    p.add_argument("kind", choices=sorted(SANDBOXES), help="which server")
    p.set_defaults(func=_cmd_sandbox)

    p = sub.add_parser("config-reference", help="print every config key, its default and meaning")
    p.set_defaults(func=_cmd_config_reference)

    p = sub.add_parser("version", help="print versions of spark-cdc and its engines")
    p.set_defaults(func=_cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return int(args.func(args))


def job_main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit cdc_job.py --config job.yaml [--once]``: the CLI with ``run`` implied."""
    args = list(sys.argv[1:] if argv is None else argv)
    flags = []
    while args and args[0] in ("-v", "--verbose"):
        flags.append(args.pop(0))
    if not args or args[0] not in (*COMMANDS, "-h", "--help"):
        args = ["run", *args]
    return main(flags + args)
