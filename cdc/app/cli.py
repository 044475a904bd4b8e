"""The command-line interface: ``python -m cdc <command>`` (``spark-submit cdc_job.py`` = ``run``).

Sources: MySQL and MariaDB (``source.type: mysql``), PostgreSQL (``postgres``). Sinks: Delta Lake
(``sink.type: delta``), Kafka (``kafka``), Pulsar (``pulsar``), Pravega (``pravega``). docs/reference/cli.md is this module's help texts.

Commands:
  run               run a job: ``--config job.yaml [--once]``.
  status            where a job stands, from its checkpoint (no job running, no Spark):
                    ``--config job.yaml [--json]``.
  validate          check a job file without running it; ``--check-connection`` also connects,
                    lists every prerequisite on the source (grants, log settings, retention) with
                    the statement that fixes each missing one, and runs the start-up checks.
  sql               a SQL query over the job's tables by name: ``--config job.yaml "SELECT ..."``
                    (or ``--catalog DIR``); a Pravega sink's streams are views too.
  demo              a throwaway MariaDB or PostgreSQL with TPC-DS customer, the job into Delta,
                    Kafka or Pulsar, changes, and the result read back.
  sandbox           a throwaway server (``mysql``, ``postgres``, ``kafka``, ``pulsar``, ``pravega``) on free
                    ports until Ctrl-C, for trying it out.
  pipeline run      run a Spark Declarative Pipeline (``spark-pipeline.yml``) that reads a source
                    through ``cdc.app.pipelines``, with the project's jars and a kept catalog.
  follow-topic      keep Delta tables up to date from a job's stream-store topics (Kafka:
                    docs/sinks/kafka.md, Pulsar: docs/sinks/pulsar.md, Pravega: docs/sinks/pravega.md).
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

COMMANDS = ("run", "status", "validate", "sql", "demo", "sandbox", "follow-topic", "pipeline", "config-reference", "version")
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
        summary = JobRunner(config, failover=args.failover).run(once=args.once)
    except JobFailed as exc:
        return _fail(exc, code=EXIT_FAILED)
    except CdcError as exc:
        return _fail(exc)
    print(summary.render(), flush=True)
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from cdc.app.config import load_config
    from cdc.app.runner import JobRunner
    from cdc.app.validate import render_report, source_report

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        return _fail(exc, args.config)
    if args.check_connection:
        runner = JobRunner(config)
        try:
            findings = source_report(runner.dialect, config)
        except CdcError as exc:
            return _fail(exc)
        address = f"{config.source.hostname}:{config.source.port}"
        if findings is not None:
            print(render_report(address, findings), flush=True)
            missing = [f for f in findings if not f.ok]
            if missing:
                print(f"error: {len(missing)} prerequisite(s) missing on {address}: apply the fixes "
                      "listed above, then run validate again", file=sys.stderr)
                return EXIT_INVALID
        try:
            tables = runner.check()
        except CdcError as exc:
            return _fail(exc)
        print(f"{args.config}: valid; {config.source.hostname}:{config.source.port} passed the start-up "
              f"checks; {len(tables)} table(s): {', '.join(sorted(map(str, tables)))}")
    else:
        print(f"{args.config}: valid (add --check-connection to connect and run the start-up checks)")
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    import json

    from cdc.app.config import load_config
    from cdc.app.status import read_status, render

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        return _fail(exc, args.config)
    try:
        status = read_status(config, connect=not args.offline)
    except CdcError as exc:
        return _fail(exc)
    print(json.dumps(status.to_dict(), indent=2) if args.json else render(status), flush=True)
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

    return run_demo(scale=args.scale, sink=args.sink, source=args.source)


def _cmd_follow_topic(args: argparse.Namespace) -> int:
    from cdc.app.config import load_config
    from cdc.app.follow import follow_topics

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        return _fail(exc, args.config)
    try:
        follower = follow_topics(config, args.target, args.checkpoint, once=args.once,
                                 max_offsets_per_trigger=args.max_offsets_per_trigger,
                                 sink_type=args.sink)
    except CdcError as exc:
        return _fail(exc)
    print(f"followed {len(follower.tables)} topic(s) into {args.target}", flush=True)
    return EXIT_OK


def _cmd_sql(args: argparse.Namespace) -> int:
    from cdc.app.config import load_config
    from cdc.app.runner import catalog_dir
    from cdc.app.sql import run_sql, stream_views

    directory, views = args.catalog, None
    if directory is None:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            return _fail(exc, args.config)
        directory, views = catalog_dir(config), stream_views(config)
    try:
        print(run_sql(directory, args.query, args.format, views=views), end="", flush=True)
    except CdcError as exc:
        return _fail(exc)
    return EXIT_OK


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from cdc.app.pipelines import PipelineFailed, run_pipeline

    try:
        run_pipeline(args.spec, full_refresh_all=args.full_refresh_all, dry=args.dry_run)
    except PipelineFailed as exc:
        return _fail(exc, code=EXIT_FAILED)
    except CdcError as exc:
        return _fail(exc)
    return EXIT_OK


def _cmd_sandbox(args: argparse.Namespace) -> int:
    from cdc.app.sandbox import run_sandbox

    if args.durable is not None and args.kind != "pravega":
        return _fail(ConfigError(f"--durable is for `sandbox pravega` only, not {args.kind}: drop it"))
    return run_sandbox(args.kind, durable=args.durable)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cdc",
        description="spark-cdc: change data capture from MySQL, MariaDB and PostgreSQL into Delta Lake, "
                    "Kafka and Apache Pulsar on Apache Spark: a lock-free parallel snapshot, then the "
                    "change log, exactly once.",
        epilog="sources (source.type): mysql (MySQL 5.7/8.x, MariaDB 10.5+), postgres (PostgreSQL 12+). "
               "sinks (sink.type): delta (Delta Lake: a mirror and a changelog table per source table), "
               "kafka (Debezium JSON), pulsar (Debezium JSON), pravega (Debezium JSON). Exit codes: 0 done, 1 the job failed while running, 2 the "
               "config or a start-up check is wrong. Docs: docs/ in the repository (make docs builds the site).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("run", help="run a job: snapshot, then the change log, into the sinks",
                       description="Run a job: a snapshot of the captured tables, then their change log "
                                   "(MySQL/MariaDB binlog, PostgreSQL WAL through pgoutput), into each sink "
                                   "(Delta Lake, Kafka, Pulsar, Pravega), exactly once. Resumes from its checkpoint.")
    p.add_argument("--config", required=True, help="the job's YAML file")
    p.add_argument("--once", action="store_true",
                   help="write everything available now, then exit (else run until SIGINT/SIGTERM)")
    p.add_argument("--failover", action="store_true",
                   help="accept a new source.hostname/port for this checkpoint: a promoted replica of "
                        "the server it was made on (MySQL/MariaDB with GTIDs; offsets are found there "
                        "by GTID, docs/operating/failover.md)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("status", help="where a job stands: per table phase, chunks, rows, log position, lag")
    p.add_argument("--config", required=True, help="the job's YAML file")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.add_argument("--offline", action="store_true",
                   help="do not ask the source for its position (the lag is then the last commit's age)")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("validate", help="check a job file without running it",
                       description="Check a job file (its source: MySQL, MariaDB or PostgreSQL; its sinks: "
                                   "Delta, Kafka, Pulsar, Pravega) without running it; with --check-connection, also connect to "
                                   "the source and list its grants, log settings, retention and tables, each "
                                   "missing prerequisite with the statement that fixes it.")
    p.add_argument("--config", required=True, help="the job's YAML file")
    p.add_argument("--check-connection", action="store_true",
                   help="also connect and run the start-up checks (settings, privileges, tables)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("demo", help="the job end to end: a throwaway MariaDB or PostgreSQL into Delta or Kafka")
    p.add_argument("--scale", type=float, default=0.1,
                   help="TPC-DS scale factor (0.1 = 10,000 customers, 1 = 100,000)")
    p.add_argument("--sink", choices=("delta", "kafka", "pulsar", "pravega"), default="delta",
                   help="capture into Delta (default), or into a throwaway Kafka or Pulsar broker or Pravega "
                   "server as Debezium JSON")
    p.add_argument("--source", choices=("mysql", "postgres"), default="mysql",
                   help="capture from a throwaway MariaDB (default) or PostgreSQL")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("sql", help="run a SQL query over the job's Delta tables by name (db.table, db.table_changelog)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="the job's YAML file (its catalog is <state_dir>/catalog)")
    where.add_argument("--catalog", help="the catalog folder itself (needs no job file; make demo prints it)")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="table (default), or json lines / csv for scripts")
    p.add_argument("query", help='e.g. "SELECT count(*) FROM shop.orders"')
    p.set_defaults(func=_cmd_sql)

    p = sub.add_parser("follow-topic", help="keep Delta tables up to date from the job's stream-store topics")
    p.add_argument("--config", required=True, help="the job's YAML file (its stream-store sink and source)")
    p.add_argument("--sink", help="the sink type to follow when the job has several stream-store sinks "
                   "(default: the first)")
    p.add_argument("--target", required=True, help="root of the Delta tables (<target>/<db>/<table>)")
    p.add_argument("--checkpoint", help="the query's checkpoint (default <target>/_checkpoints/follow-topic)")
    p.add_argument("--once", action="store_true", help="read what the topics hold now, then exit")
    p.add_argument("--max-offsets-per-trigger", type=int, help="messages per micro-batch at most")
    p.set_defaults(func=_cmd_follow_topic)

    p = sub.add_parser("pipeline", help="run a Spark Declarative Pipeline once, with the project's jars and a kept catalog")
    p.add_argument("action", choices=("run",), help="run: one update of every flow, as spark-pipelines run")
    p.add_argument("--spec", default="spark-pipeline.yml", help="the pipeline spec (default ./spark-pipeline.yml)")
    p.add_argument("--full-refresh-all", action="store_true", help="reset every table and checkpoint first")
    p.add_argument("--dry-run", action="store_true", help="check the graph without running any flow")
    p.set_defaults(func=_cmd_pipeline)

    from cdc.app.sandbox import SANDBOXES

    p = sub.add_parser("sandbox", help="a throwaway MariaDB, PostgreSQL, Kafka, Pulsar or Pravega (temp folder, free ports) "
                       "until Ctrl-C",
                       description="Start a throwaway server until Ctrl-C, in a temp folder on a free port: "
                                   "mysql (MariaDB, configured for CDC, with a CDC user), postgres (PostgreSQL, "
                                   "wal_level=logical, with a CDC role), kafka (one KRaft broker), pulsar (a "
                                   "standalone broker with deduplication on) or pravega (the standalone server, data "
                                   "in memory; with --durable DIR, four JVMs that keep their data in DIR). It prints the export line that the getting-started pages use "
                                   "(pulsar: the sink's service_url and admin_url; pravega: its controller_uri).")
    p.add_argument("kind", choices=sorted(SANDBOXES), help="which server")
    p.add_argument("--durable", metavar="DIR",
                   help="pravega only: ZooKeeper, a bookie, the controller and the segment store as four "
                        "JVMs whose data (and ports) live in DIR, kept after Ctrl-C and found again by the "
                        "next start with the same DIR; a SIGKILL of its processes loses nothing")
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
