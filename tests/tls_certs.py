"""Throwaway TLS material for tests: a CA, a server certificate and a client certificate.

Made with the ``openssl`` command line (the ``cryptography`` package is not a dependency) in a
temp folder. The server certificate names ``127.0.0.1`` and ``localhost`` (SAN), so clients in
``verify-full`` mode accept it for the sandboxes' loopback address; the client certificate's CN
is the CDC user name, for MariaDB's ``REQUIRE X509`` and PostgreSQL's ``cert`` authentication.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one CA, a server certificate and a client certificate it signed."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr[-1000:]}")


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(cert),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=folder)
    return cert, key


def _signed(folder: Path, name: str, cn: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    key, csr, cert, ext = (folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem",
                           folder / f"{name}.ext")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", str(key), "-out", str(csr),
             cwd=folder)
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-days", "2", "-sha256", "-extfile", str(ext), "-out", str(cert), cwd=folder)
    key.chmod(0o600)
    return cert, key


def make_tls_files(folder: Path, client_cn: str = "cdc") -> TlsFiles:
    """A CA and the server and client certificates it signs, written under ``folder``.

    Raises:
        RuntimeError: the ``openssl`` command is missing or failed.
    """
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make test certificates (apt-get install openssl)")
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "ca")
    server = _signed(folder, "server", "127.0.0.1", ca,
                     "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                     "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    client = _signed(folder, "client", client_cn, ca,
                     "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                     "extendedKeyUsage=clientAuth\n")
    return TlsFiles(ca=ca[0], server_cert=server[0], server_key=server[1], client_cert=client[0],
                    client_key=client[1])


def other_ca(folder: Path) -> Path:
    """A CA that signed nothing the servers present (for the wrong-CA case)."""
    folder.mkdir(parents=True, exist_ok=True)
    return _ca(folder, "other-ca")[0]
