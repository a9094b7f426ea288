"""Throwaway TLS material for tests, made with the ``openssl`` command-line tool.

:func:`make_certs` writes into a folder: a CA, a server certificate signed by it (SAN
``IP:127.0.0.1, DNS:localhost``), a client certificate signed by it, and an unrelated second CA
with a client certificate of its own (for "wrong CA is refused" tests). Keys are ECDSA P-256, so a
full set takes a few tens of milliseconds; fixtures still make one set per test session.
No Python dependency: the ``cryptography`` package is deliberately not used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CLIENT_COMMON_NAME", "SERVER_COMMON_NAME", "CertBundle", "make_certs"]

SERVER_COMMON_NAME = "localhost"
CLIENT_COMMON_NAME = "nsqclient-test-client"
_DAYS = "30"


@dataclass(frozen=True)
class CertBundle:
    """Paths of PEM files made by :func:`make_certs`."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path
    other_ca_key: Path
    other_client_cert: Path
    other_client_key: Path
    client_common_name: str = CLIENT_COMMON_NAME


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("the openssl command-line tool is needed to make test certificates")
    result = subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=30
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{result.stderr}")


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _make_ca(directory: Path, name: str, common_name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "req", "-x509", *_EC_KEY, "-keyout", key.name, "-out", cert.name, "-days", _DAYS,
        "-subj", f"/CN={common_name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return cert, key


def _make_leaf(
    directory: Path,
    name: str,
    common_name: str,
    ca: tuple[Path, Path],
    extensions: str,
) -> tuple[Path, Path]:
    cert, key, csr = (directory / f"{name}{ext}" for ext in (".pem", ".key", ".csr"))
    ext_file = directory / f"{name}.ext"
    ext_file.write_text(extensions)
    _openssl(
        "req", "-new", *_EC_KEY, "-keyout", key.name, "-out", csr.name,
        "-subj", f"/CN={common_name}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", csr.name, "-CA", ca[0].name, "-CAkey", ca[1].name,
        "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
        "-days", _DAYS, "-extfile", ext_file.name, "-out", cert.name,
        cwd=directory,
    )  # fmt: skip
    csr.unlink()
    ext_file.unlink()
    return cert, key


# Key identifiers too: Python 3.13's default context verifies with VERIFY_X509_STRICT, which
# requires an authority key identifier in every certificate.
_SERVER_EXT = (
    "basicConstraints=CA:FALSE\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid,issuer\n"
    "keyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=serverAuth\n"
    "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
)
_CLIENT_EXT = (
    "basicConstraints=CA:FALSE\n"
    "subjectKeyIdentifier=hash\n"
    "authorityKeyIdentifier=keyid,issuer\n"
    "keyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=clientAuth\n"
)


def make_certs(directory: Path) -> CertBundle:
    """Write a fresh CA, server, client and second-CA set into ``directory`` (created if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(directory, "ca", "nsqclient test CA")
    other_ca = _make_ca(directory, "other-ca", "nsqclient unrelated test CA")
    server = _make_leaf(directory, "server", SERVER_COMMON_NAME, ca, _SERVER_EXT)
    client = _make_leaf(directory, "client", CLIENT_COMMON_NAME, ca, _CLIENT_EXT)
    other_client = _make_leaf(directory, "other-client", CLIENT_COMMON_NAME, other_ca, _CLIENT_EXT)
    return CertBundle(
        directory=directory,
        ca_cert=ca[0],
        ca_key=ca[1],
        server_cert=server[0],
        server_key=server[1],
        client_cert=client[0],
        client_key=client[1],
        other_ca_cert=other_ca[0],
        other_ca_key=other_ca[1],
        other_client_cert=other_client[0],
        other_client_key=other_client[1],
    )
