"""Every shell and YAML example of README.md and the getting-started pages, run as written.

A page's fenced blocks run in order in one bash (``set -euo pipefail``), in a temp folder of its
own, against this session's servers (the ``mysql_server``, ``postgres_server`` and ``kafka_broker``
fixtures, started by the same code as ``python -m cdc sandbox``):

* a ``sh`` block runs as it is; a ``yaml title="NAME"`` block is written to the file NAME where it
  stands (a YAML block without a title fails the test: a reader could not tell where it goes);
* a ``text`` block right after a ``sh`` block is that block's output: each of its lines must be a
  line the block printed, in the same order;
* the variables come from the ``export`` lines the sandboxes print (:mod:`cdc.app.sandbox`), made
  for this session's servers, so the pages and the sandboxes cannot disagree on a name;
* the commands in :data:`NOT_RUN` (the sandbox itself, ``make setup``) are not run; each says why.
  Blocks in other languages (``ini``, ``sql``: a server's own settings) are not run either.

README's quick start must be the getting-started page's blocks, verbatim, so one run covers both.
A page takes one or two job runs and one ``python -m cdc sql`` at most (a Spark driver each,
about 10 s on a quiet machine).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdc.app.sandbox import kafka_lines, mysql_lines, postgres_lines
from cdc.app.sandbox.kafka import KafkaSandbox
from cdc.app.sandbox.mysql import Sandbox
from cdc.app.sandbox.postgres import PostgresSandbox

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "getting-started"

NOT_RUN = {
    "make setup": "the tests run in the environment it made",
    "source .venv/bin/activate": "the test puts .venv/bin first on PATH",
    "python -m cdc sandbox mysql": "this session's MariaDB is started by the same code; its export line is set",
    "python -m cdc sandbox postgres": "this session's PostgreSQL is started by the same code; its export lines are set",
    "python -m cdc sandbox kafka": "this session's broker is started by the same code; its export line is set",
    "make demo": "tests/test_demo.py runs the demo as `make demo` does",
    "make test": "CI runs it",
}

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[a-z]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    lang: str
    title: str | None
    body: str
    line: int  # where it starts in its page, for messages

    def commands(self) -> list[str]:
        """Its lines without comments and blank lines (``sh`` only)."""
        return [c for c in (ln.split(" #")[0].strip() for ln in self.body.splitlines()) if c and not c.startswith("#")]

    def skipped(self) -> bool:
        """Whether this ``sh`` block is one of :data:`NOT_RUN` (a block holds them alone)."""
        known = [c in NOT_RUN for c in self.commands()]
        assert all(known) or not any(known), f"line {self.line}: give {self.commands()} a block of their own"
        return all(known)


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order, their indentation removed."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        title = re.search(r'title="([^"]+)"', m["attrs"])
        indent = len(m["indent"])
        body = "".join(ln[indent:] if ln.strip() else ln for ln in m["body"].splitlines(keepends=True))
        out.append(Block(m["lang"], title[1] if title else None, body, text.count("\n", 0, m.start()) + 1))
    return out


def runnable(page_blocks: list[Block]) -> list[Block]:
    """The blocks this test runs or writes, with their expected outputs (``text`` after ``sh``)."""
    def runs(b: Block) -> bool:
        return b.lang == "sh" and not b.skipped()

    for b in page_blocks:
        assert b.lang != "yaml" or b.title, f"line {b.line}: a YAML example needs title=\"<file name>\""
    return [b for i, b in enumerate(page_blocks)
            if b.lang == "yaml" or runs(b) or (b.lang == "text" and i and runs(page_blocks[i - 1]))]


def run_page(page: Path, cwd: Path, exports: list[str], before: tuple[Block, ...] = ()) -> str:
    """Run ``page``'s examples (after ``before``, blocks of another page it builds on) in ``cwd``;
    returns what they printed. Fails naming the block whose output is not the page's."""
    todo = [*before, *runnable(blocks(page))]
    script = ["set -euo pipefail", *exports]
    for n, b in enumerate(todo):
        script.append(f"echo '::block {n}::'")
        if b.lang == "yaml":
            script.append(f"cat > {b.title} <<'__DOCS_EOF__'\n{b.body}__DOCS_EOF__")
        elif b.lang == "sh":
            script.append(b.body)
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=_env(cwd), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{page.name}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    printed = _by_block(done.stdout)
    for n, b in enumerate(todo):
        if b.lang == "text":
            _assert_lines_in_order(b, printed.get(n - 1, []), page)
    return done.stdout


def _by_block(stdout: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    current = -1
    for line in stdout.splitlines():
        marker = re.fullmatch(r"::block (\d+)::", line)
        if marker:
            current = int(marker[1])
        else:
            out.setdefault(current, []).append(line.rstrip())
    return out


def _assert_lines_in_order(expected: Block, printed: list[str], page: Path) -> None:
    at = 0
    for want in (ln.rstrip() for ln in expected.body.splitlines() if ln.strip()):
        while at < len(printed) and printed[at] != want:
            at += 1
        assert at < len(printed), (f"{page.name} line {expected.line}: the block before printed no line "
                                   f"{want!r} (in order):\n" + "\n".join(printed))
        at += 1


def _env(cwd: Path) -> dict[str, str]:
    """The environment of a reader who ran ``make setup`` and activated .venv. HOME is the page's
    own, holding DuckDB's delta extension where ``INSTALL delta`` would put it (this machine has no
    route to DuckDB's extension site); the extension comes from its PyPI package (the dev extra)."""
    import duckdb
    import duckdb_extension_delta

    home = cwd / "home"
    folder = home / ".duckdb" / "extensions" / f"v{duckdb.__version__}" / "linux_amd64"
    if not folder.exists():
        folder.mkdir(parents=True)
        (built,) = Path(duckdb_extension_delta.__file__).parent.glob("extensions/*/delta.duckdb_extension")
        (folder / built.name).symlink_to(built)
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "HOME": str(home), "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")])}


def _exports(lines: list[str]) -> list[str]:
    return [ln.strip() for ln in lines if ln.strip().startswith("export ")]


@contextlib.contextmanager
def _fresh_shop(mysql: Sandbox | None = None, postgres: PostgresSandbox | None = None) -> Iterator[None]:
    """The pages create database ``shop``: none before, none after (PostgreSQL's with its slots)."""
    def drop() -> None:
        if mysql is not None:
            mysql.drop_database("shop")
        if postgres is not None:
            postgres.drop_database("shop")

    drop()
    try:
        yield
    finally:
        drop()


@pytest.mark.slow  # four Spark drivers in a row (two runs, two queries): about a minute on 2 cores
def test_mysql_page_then_reading_page_run_as_written(tmp_path: Path, mysql_server: Sandbox) -> None:
    """The quick start, then the reading page on the tables it made (one test: one quick start)."""
    exports = _exports(mysql_lines(mysql_server))
    with _fresh_shop(mysql=mysql_server):
        printed = run_page(PAGES / "mysql-delta.md", tmp_path, exports)
        assert "job.yaml: valid;" in printed and (tmp_path / "lake" / "shop" / "orders" / "_delta_log").is_dir()
        run_page(PAGES / "reading.md", tmp_path, exports)


def test_readme_quick_start_is_the_mysql_pages_examples() -> None:
    """README's examples are the MySQL page's, verbatim and in order (that page runs above), or
    commands of :data:`NOT_RUN`."""
    page = [b for b in blocks(PAGES / "mysql-delta.md") if b.lang in ("sh", "yaml", "text")]
    at = 0
    for b in blocks(ROOT / "README.md"):
        if b.lang not in ("sh", "yaml", "text") or (b.lang == "sh" and b.skipped()):
            continue
        while at < len(page) and (page[at].lang, page[at].title, page[at].body) != (b.lang, b.title, b.body):
            at += 1
        assert at < len(page), f"README.md line {b.line}: this {b.lang} block is not, in order, one of mysql-delta.md's"


def test_postgres_into_delta_page_runs_as_written(tmp_path: Path, postgres_server: PostgresSandbox) -> None:
    with _fresh_shop(postgres=postgres_server):
        printed = run_page(PAGES / "postgres-delta.md", tmp_path, _exports(postgres_lines(postgres_server)))
    assert "pg-job.yaml: valid;" in printed


def test_kafka_page_runs_as_written(tmp_path: Path, mysql_server: Sandbox, kafka_broker: KafkaSandbox) -> None:
    """The Kafka page builds on the MySQL page's table (its step 3)."""
    table = next(b for b in blocks(PAGES / "mysql-delta.md") if "CREATE TABLE shop.orders" in b.body)
    with _fresh_shop(mysql=mysql_server):
        run_page(PAGES / "kafka.md", tmp_path, _exports(mysql_lines(mysql_server) + kafka_lines(kafka_broker)),
                 before=(table,))


def test_every_getting_started_page_is_run_here() -> None:
    run = {"mysql-delta.md", "reading.md", "postgres-delta.md", "kafka.md"}
    assert {p.name for p in PAGES.glob("*.md")} == run, "a new getting-started page needs a test here"
