"""scripts/jvm_archive.py: Spark's signed jars lose their signatures (the JDK archives no class
from a signed jar) and nothing else."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "jvm_archive.py"
spec = importlib.util.spec_from_file_location("jvm_archive", SCRIPT)
assert spec is not None and spec.loader is not None
jvm_archive = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jvm_archive)

needs_jdk = pytest.mark.skipif(not (shutil.which("keytool") and shutil.which("jarsigner")),
                               reason="needs the JDK's keytool and jarsigner")


def _entries(jar: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(jar) as z:
        return {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}


def _verify(jar: Path) -> str:
    return subprocess.run(["jarsigner", "-verify", str(jar)], capture_output=True, text=True).stdout


@pytest.fixture
def signed_jar(tmp_path: Path) -> Path:
    """A jar with a manifest and a class-like entry, signed by the JDK's jarsigner."""
    jar = tmp_path / "lib.jar"
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: test\r\n\r\n")
        z.writestr("org/example/A.class", b"\xca\xfe\xba\xbe" + bytes(range(256)) * 8)
        z.writestr("org/example/data.txt", "kept")
    store = tmp_path / "keys.p12"
    subprocess.run(["keytool", "-genkeypair", "-keystore", str(store), "-storepass", "secret1", "-alias", "me",
                    "-keyalg", "RSA", "-dname", "CN=test", "-validity", "1"], check=True, capture_output=True)
    subprocess.run(["jarsigner", "-keystore", str(store), "-storepass", "secret1", str(jar), "me"],
                   check=True, capture_output=True)
    assert "jar verified" in _verify(jar)
    return jar


@needs_jdk
def test_a_signed_jar_loses_its_signatures_and_nothing_else(signed_jar: Path) -> None:
    before = _entries(signed_jar)
    assert {"META-INF/ME.SF", "META-INF/ME.RSA"} <= set(before)
    assert b"SHA-256-Digest" in before["META-INF/MANIFEST.MF"]

    assert jvm_archive.unsign(signed_jar)

    after = _entries(signed_jar)
    assert "jar is unsigned" in _verify(signed_jar)
    assert set(after) == set(before) - {"META-INF/ME.SF", "META-INF/ME.RSA"}
    assert {n: d for n, d in after.items() if not n.startswith("META-INF/")} == \
        {n: d for n, d in before.items() if not n.startswith("META-INF/")}
    assert after["META-INF/MANIFEST.MF"] == b"Manifest-Version: 1.0\nCreated-By: test\n"  # the digests are gone
    assert not list(signed_jar.parent.glob("*.unsigning"))


@needs_jdk
def test_an_unsigned_jar_is_left_alone(signed_jar: Path) -> None:
    jvm_archive.unsign(signed_jar)
    os.utime(signed_jar, (1_000_000_000, 1_000_000_000))
    content = signed_jar.read_bytes()

    assert not jvm_archive.unsign(signed_jar)
    assert signed_jar.stat().st_mtime == 1_000_000_000  # an archive dumped from it stays valid
    assert signed_jar.read_bytes() == content


def test_signature_entries_are_told_apart() -> None:
    assert jvm_archive.is_signature("META-INF/JANINO.SF")
    assert jvm_archive.is_signature("META-INF/x.rsa")
    assert jvm_archive.is_signature("META-INF/KEY.EC")
    assert not jvm_archive.is_signature("META-INF/MANIFEST.MF")
    assert not jvm_archive.is_signature("META-INF/maven/x/pom.SF")  # not in META-INF itself
    assert not jvm_archive.is_signature("org/example/A.RSA")


def test_setup_left_no_signed_jar_in_spark() -> None:
    from cdc.spark.session import jvm_archive as archive

    if archive() is None:
        pytest.skip("`make setup` built no class archive here")
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    assert jars
    signed = [j.name for j in jars if any(jvm_archive.is_signature(n) for n in zipfile.ZipFile(j).namelist())]
    assert signed == []  # their classes would stay out of the archive
