"""Throw-away TLS material for tests: a CA and server certificates it signs, made by ``openssl``.

The ``openssl`` command-line tool is used because it is on every machine the tests run on (it
ships with the OS) and needs no Python dependency. Keys are EC P-256, certificates last one day
and carry what strict verifiers ask for (Python 3.13's ``VERIFY_X509_STRICT``, grpc's BoringSSL):
CA basic constraints and key usage on the CA; subject alternative names, server-auth extended
key usage and authority/subject key identifiers on the server certificate.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertificateAuthority", "ServerCertificate", "make_ca"]

_DAYS = "1"


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make test certificates "
                           "(Debian package openssl)")
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True,
                            timeout=60, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stderr}")


@dataclass(frozen=True)
class ServerCertificate:
    """A server's PEM certificate and private key (unencrypted)."""

    certificate: Path
    private_key: Path


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA: ``certificate`` is what a client is told to trust
    (``OTEL_EXPORTER_OTLP_CERTIFICATE``)."""

    certificate: Path
    private_key: Path

    def issue_server(self, name: str = "server",
                     hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> ServerCertificate:
        """A server certificate for ``hosts`` (IP addresses and DNS names), signed by this CA,
        written next to the CA's files as ``{name}.pem`` / ``{name}.key``."""
        folder = self.certificate.parent
        sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}"
                        for h in hosts)
        (folder / f"{name}.ext").write_text(
            f"subjectAltName={sans}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={hosts[0]}", cwd=folder)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", self.certificate.name,
                 "-CAkey", self.private_key.name, "-CAcreateserial", "-days", _DAYS,
                 "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=folder)
        return ServerCertificate(folder / f"{name}.pem", folder / f"{name}.key")


def make_ca(folder: Path, name: str = "test CA") -> CertificateAuthority:
    """A new CA in ``folder`` (created if missing): ``ca.pem`` and ``ca.key``."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", _DAYS, "-sha256",
             "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=folder)
    return CertificateAuthority(folder / "ca.pem", folder / "ca.key")
