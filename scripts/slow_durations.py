"""Write tests/slow_durations.json from the JUnit XML of a ``make test`` (or ``make test-slow``) run.

The file gives each slow test's seconds; tests/conftest.py starts the slow tests longest first
under pytest-xdist (``deal_slow_first``). Refresh it after a CI rehearsal when slow tests were
added or their times moved:

    CI=true PYTEST_ADDOPTS="--junitxml=/tmp/ci.xml" bash .ci/run   # the XML of its last make target
    python scripts/slow_durations.py /tmp/ci.xml
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "tests" / "slow_durations.json"


def node_id(case: ET.Element) -> str:
    """pytest's node id of a JUnit test case (``tests.test_x`` + ``test_y[p]`` for a module-level test)."""
    return f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit_xml", type=Path)
    args = parser.parse_args()
    cases = ET.parse(args.junit_xml).getroot().iter("testcase")
    seconds = {node_id(c): round(float(c.get("time", 0))) for c in cases if c.find("skipped") is None}
    if not seconds:
        raise SystemExit(f"{args.junit_xml} holds no test that ran")
    TARGET.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")
    print(f"wrote {TARGET}: {len(seconds)} tests, {sum(seconds.values()) / 60:.0f} min in all")


if __name__ == "__main__":
    main()
