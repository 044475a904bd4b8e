"""Add compiled bytecode to the zips Spark's Python processes import PySpark from, and leave out
PySpark's tests.

Run: ``.venv/bin/python scripts/pyspark_bytecode.py [SPARK_HOME]`` (``scripts/setup.sh`` does, for
the virtualenv's PySpark, after every install; default SPARK_HOME: the ``pyspark`` package).

Every Python process Spark starts (each daemon that forks task workers, one per worker module:
tasks, the data source's lookup, creation and read planning; the streaming source's planner) has
``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on its ``PYTHONPATH``, so it imports
PySpark from them, not from site-packages. Python never caches bytecode for a module imported from
a zip: each of those processes compiles PySpark's sources again, 0.5-1.6 s of CPU apiece here
(py-spy of a catch-up run: ``_compile_source (<frozen zipimport>)``, about a fifth of the CPU the
job's Python processes spent). A zip that holds ``module.pyc`` next to ``module.py`` is read from
the bytecode instead (zipimport's own search order).

The bytecode is written hash-checked (PEP 552): the importer hashes the source in the zip and
falls back to compiling it when they differ, and an interpreter of another version rejects the
file by its magic number and compiles the source, as before. So a stale or foreign ``.pyc`` costs
the speed-up and nothing else.

The rewrite also leaves out PySpark's own test modules (``*/tests/*``: 1,785 of pyspark.zip's 2,575
entries with bytecode), which no Spark process imports. Each of those processes calls
``importlib.invalidate_caches()`` once (``pyspark.worker_util.setup_spark_files``, when it first
puts Spark's files folder on its path), and Python 3.11's zip importer then reads the zip's whole
directory again, once for every package imported from it (15 in a task worker): 0.43 s of CPU per
process with the tests in the zip, 0.11 s without them. The ``.py`` sources stay, for tracebacks.

The zip is rewritten next to itself and moved into place in one rename; a zip that already holds
bytecode for this interpreter and no test module is left alone.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

MAGIC = importlib.util.MAGIC_NUMBER


def is_test(name: str) -> bool:
    """Whether the zip entry ``name`` lies in a ``tests`` package (``pyspark/sql/tests/x.py``)."""
    return "tests" in name.split("/")[:-1]


def _has_bytecode(z: zipfile.ZipFile) -> bool:
    pycs = [n for n in z.namelist() if n.endswith(".pyc")]
    return bool(pycs) and z.read(pycs[0])[:4] == MAGIC


def has_bytecode(path: Path) -> bool:
    """Whether ``path`` already holds ``.pyc`` entries for this interpreter."""
    with zipfile.ZipFile(path) as z:
        return _has_bytecode(z)


def is_rewritten(path: Path) -> bool:
    """Whether ``path`` holds bytecode for this interpreter and no test module (:func:`add_bytecode`)."""
    with zipfile.ZipFile(path) as z:
        return not any(is_test(n) for n in z.namelist()) and _has_bytecode(z)


def add_bytecode(path: Path) -> int:
    """Rewrite the zip at ``path`` with a hash-checked ``.pyc`` next to each ``.py`` and without
    test modules; the count of modules compiled."""
    tmp = path.with_name(path.name + ".tmp")
    added = 0
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.endswith(".pyc") or is_test(info.filename):
                continue  # another interpreter's bytecode (replaced below), or a test module
            data = src.read(info)
            dst.writestr(info, data)
            if not info.filename.endswith(".py"):
                continue
            try:
                code = compile(data, info.filename, "exec", dont_inherit=True)
            except SyntaxError:  # a file this Python cannot compile: it stays source-only
                continue
            pyc = zipfile.ZipInfo(info.filename[:-3] + ".pyc", info.date_time)
            pyc.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(pyc, bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), checked=True)))
            added += 1
    os.replace(tmp, path)
    return added


def main() -> None:
    if len(sys.argv) > 1:
        home = Path(sys.argv[1])
    else:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or spec.origin is None:
            raise SystemExit("pyspark is not installed in this interpreter; pass SPARK_HOME")
        home = Path(spec.origin).parent
    zips = sorted((home / "python" / "lib").glob("*.zip"))
    if not zips:
        raise SystemExit(f"no {home}/python/lib/*.zip: is {home} a Spark home or the pyspark package?")
    for path in zips:
        if is_rewritten(path):
            print(f"pyspark-bytecode: {path.name} already has bytecode for this Python and no tests")
            continue
        try:
            added = add_bytecode(path)
        except OSError as exc:  # read-only install: Spark works as before, only slower to start
            print(f"pyspark-bytecode: WARNING: {path} not rewritten ({exc})", file=sys.stderr)
            continue
        print(f"pyspark-bytecode: {path.name}: {added} modules compiled")


if __name__ == "__main__":
    main()
