"""The docs stay true to the code: generated pages equal what the code generates, the command
line names every source and sink, and troubleshooting explains every error the job raises.

No server and no Spark: each test reads files or runs a script (a few seconds in all). The examples
of README and the getting-started pages run in tests/test_examples.py; the site builds in CI
(`make docs`).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from binlog.registry import source_configs
from cdc.app.cli import build_parser
from sinks.registry import SINK_NAMES

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_configuration_and_cli_references_are_generated_from_the_code() -> None:
    check = _run("scripts/docs_pages.py", "--check")
    assert check.returncode == 0, check.stderr


def test_the_benchmark_tables_are_the_results_json() -> None:
    """README's and the performance pages' tables are generated (benchmarks/readme_tables.py), never typed."""
    check = _run("benchmarks/readme_tables.py", "--check")
    assert check.returncode == 0, check.stderr


def _kinds() -> list[str]:
    """Every registered ``source.type`` and ``sink.type``."""
    return sorted(source_configs()) + sorted(SINK_NAMES)


@pytest.mark.parametrize("command", [None, "run", "validate", "sandbox"])
def test_the_help_texts_name_every_source_and_sink(command: str | None) -> None:
    """The main help and the commands about a job name every registered source and sink type
    (`demo` names its own choices); `sandbox` names the servers it starts."""
    parser = build_parser()
    if command is not None:
        parser = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    text = parser.format_help().lower()
    if command == "sandbox":  # a throwaway server for each kind that has one
        assert all(name in text for name in ("mariadb", "postgresql", "kafka")), text
        return
    missing = [kind for kind in _kinds() if kind not in text]
    assert not missing, f"`python -m cdc {command or ''} --help` does not name {missing}"


def test_the_package_description_names_every_source_and_sink() -> None:
    found = re.search(r'^description = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found, "pyproject.toml has no one-line description"
    description = found[1].lower()
    assert all(kind in description for kind in _kinds()), description
    assert "mariadb" in description


def _error_classes() -> set[str]:
    """Every class in the packages that derives, directly or not, from CdcError (read from the
    source: no import needed)."""
    bases: dict[str, set[str]] = {}
    for package in ("cdc", "chunking", "binlog", "sinks"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases.setdefault(node.name, set()).update(
                        b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                        if isinstance(b, (ast.Name, ast.Attribute)))
    errors, grown = {"CdcError"}, True
    while grown:
        more = {name for name, of in bases.items() if of & errors} - errors
        errors |= more
        grown = bool(more)
    return errors - {"CdcError"}


def test_troubleshooting_explains_every_error_the_job_raises() -> None:
    """Each error class has a row in docs/operating/troubleshooting.md (its last column names the
    class): a new error reaches the page, or this test fails."""
    page = (ROOT / "docs" / "operating" / "troubleshooting.md").read_text()
    classes = _error_classes()
    assert {"ConfigError", "BinlogPurged", "KafkaCommitFailed"} <= classes, classes
    missing = sorted(c for c in classes if f"`{c}`" not in page)
    assert not missing, f"docs/operating/troubleshooting.md does not explain {missing}"
