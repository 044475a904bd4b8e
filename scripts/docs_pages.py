"""The docs site's generated pages: the configuration reference and the command-line reference.

``docs/reference/configuration.md`` is :func:`cdc.app.config.config_reference` (what ``python -m
cdc config-reference`` prints) under a fixed introduction; ``docs/reference/cli.md`` is the
``--help`` of ``python -m cdc`` and of each of its commands. ``python scripts/docs_pages.py``
rewrites both; ``--check`` exits 1 when one differs from the code (tests/test_docs.py runs it), so a
new key, sink or command reaches the site or fails the tests.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ["COLUMNS"] = "100"  # argparse wraps the help texts at the terminal's width: fix it

CONFIGURATION_INTRO = """\
# Configuration reference

A job is one YAML file with three parts: `source:`, the database to capture; `sink:`, where the
changes go (one sink, or a list of sinks, each of which gets every change exactly once); and the
job's own keys, such as `checkpoint`. Each source and sink type adds its own keys to the ones
every type shares.

- Any string may use `${ENV_VAR}`; write secrets that way, or in a file (`source.password_file`),
  never in the YAML.
- An unknown key is an error, and so is a value out of range: `python -m cdc validate --config
  job.yaml` prints one `error:` line per problem, naming the key's path (`source.chunk_size`).
- `python -m cdc config-reference` prints this reference. The page is generated from the config
  models, so it lists every key the code accepts.

Examples: the job files of [Getting started](../getting-started/mysql-delta.md), and `configs/` in
the repository.

"""

CLI_INTRO = """\
# Command-line reference

`python -m cdc <command>` (also installed as `spark-cdc`) runs every command. `spark-submit
cdc_job.py --config job.yaml` is `run` on a cluster ([Deploying on a cluster](../operating/deployment.md)).

Exit codes: 0 done; 2 the configuration or a start-up check is wrong (one `error:` line per
problem on stderr, naming the fix; nothing was written); 1 the job failed while running.
[Troubleshooting](../operating/troubleshooting.md) explains each `error:` line.

The sections below are each command's `--help`, generated from the code.

"""


def configuration_page() -> str:
    from cdc.app.config import config_reference

    return CONFIGURATION_INTRO + config_reference()


def cli_page() -> str:
    from cdc.app.cli import build_parser

    parser = build_parser()
    parts = [CLI_INTRO, "## python -m cdc\n\n```text\n" + parser.format_help().rstrip() + "\n```\n"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts.append(f"\n## python -m cdc {name}\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    return "".join(parts)


PAGES = {"docs/reference/configuration.md": configuration_page, "docs/reference/cli.md": cli_page}


def main() -> int:
    from readme_tables import sync  # benchmarks/: the same write-or-check as the benchmark tables

    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--check", action="store_true", help="exit 1 when a page differs from the code")
    args = p.parse_args()
    stale = sync({name: render() for name, render in PAGES.items()}, args.check)
    if args.check and stale:
        print(f"{', '.join(stale)}: generated from the code, and stale: run python scripts/docs_pages.py",
              file=sys.stderr)
        return 1
    if not args.check:
        print(f"{len(PAGES)} pages generated" + (f" ({', '.join(stale)} changed)" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
