"""The command-line interface: ``python -m cdc <command>``.

Commands:
  demo     start a throwaway MariaDB and a local Spark session and prove the set-up works.
  version  print versions of spark-cdc and the engines it uses.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from cdc import __version__


def _cmd_version(_: argparse.Namespace) -> int:
    import deltalake
    import pyarrow
    import pyspark

    print(f"spark-cdc {__version__}")
    print(f"pyspark {pyspark.__version__}, deltalake {deltalake.__version__}, pyarrow {pyarrow.__version__}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from cdc.demo import run_demo

    return run_demo(scale=args.scale)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cdc",
        description="spark-cdc: MySQL/MariaDB change data capture into Delta Lake on Apache Spark.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("version", help="print versions of spark-cdc and its engines")
    p.set_defaults(func=_cmd_version)

    p = sub.add_parser("demo", help="throwaway MariaDB + local Spark: prove the set-up end to end")
    p.add_argument("--scale", type=int, default=1, help="TPC-DS scale factor for the demo data")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.func(args))
