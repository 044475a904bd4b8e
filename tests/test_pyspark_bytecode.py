"""scripts/pyspark_bytecode.py: a zip with bytecode imports from it, never runs stale code, and
leaves out the test modules."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pyspark_bytecode.py"
spec = importlib.util.spec_from_file_location("pyspark_bytecode", SCRIPT)
assert spec is not None and spec.loader is not None
bytecode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bytecode)


def _imported(zip_path: Path) -> tuple[str, str]:
    """(the module's ``VALUE``, the file it was loaded from), in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", "import pkg.mod as m; print(m.VALUE); print(m.__file__)"],
                         env={"PYTHONPATH": str(zip_path)}, capture_output=True, text=True, check=True)
    value, origin = out.stdout.split()
    return value, origin


def test_a_zip_with_bytecode_is_imported_from_it(tmp_path: Path) -> None:
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", "VALUE = 'first'\n")
        z.writestr("pkg/data.txt", "kept")
        z.writestr("pkg/tests/__init__.py", "")
        z.writestr("pkg/tests/test_mod.py", "import pkg.mod\n")
        z.writestr("pkg/testsuite.py", "VALUE = 'not a tests package'\n")
    assert _imported(path)[1].endswith("mod.py")  # zipimport compiles the source every time
    assert not bytecode.has_bytecode(path) and not bytecode.is_rewritten(path)

    assert bytecode.add_bytecode(path) == 3
    assert bytecode.has_bytecode(path) and bytecode.is_rewritten(path)
    value, origin = _imported(path)
    assert value == "first" and origin.endswith("mod.pyc")
    with zipfile.ZipFile(path) as z:
        assert z.read("pkg/data.txt") == b"kept"
        assert sorted(z.namelist()) == ["pkg/__init__.py", "pkg/__init__.pyc", "pkg/data.txt", "pkg/mod.py",
                                        "pkg/mod.pyc", "pkg/testsuite.py", "pkg/testsuite.pyc"]


def test_a_zip_with_bytecode_and_tests_is_rewritten_again(tmp_path: Path) -> None:
    """A zip that an earlier setup gave bytecode, with its tests still in, is not left alone."""
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/tests/test_a.py", "")
    with zipfile.ZipFile(path, "a") as z:  # what the earlier setup wrote: bytecode, tests kept
        z.writestr("pkg/__init__.pyc", bytecode.MAGIC + bytes(12))
    assert bytecode.has_bytecode(path) and not bytecode.is_rewritten(path)
    bytecode.add_bytecode(path)
    assert bytecode.is_rewritten(path)


def test_bytecode_of_another_source_is_not_run(tmp_path: Path) -> None:
    """The bytecode is hash-checked: a zip whose source changed after it was compiled (a package
    upgrade that kept our .pyc) runs the new source."""
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", "VALUE = 'old'\n")
    bytecode.add_bytecode(path)
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries["pkg/mod.py"] = b"VALUE = 'new'\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    assert _imported(path)[0] == "new"
