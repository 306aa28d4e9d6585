"""A local certificate authority and the certificates the stack serves TLS and mTLS with.

    python -m inferline_stack.certs [DIR]      (``make certs``; DIR defaults to .run/certs)

Made with the ``openssl`` command line (no Python crypto package to pin), EC P-256, into DIR:

- ``ca.crt`` / ``ca.key``: the local CA every other certificate is signed by;
- ``public.crt`` / ``.key``: Envoy's public listener (``localhost``, ``127.0.0.1``);
- ``envoy-client.crt`` / ``.key``: the client certificate Envoy (and the stack's own readiness
  checks) present to the services under mTLS;
- ``<service>.crt`` / ``.key`` for middleman, preprocess, batcher, triton and eds (the control
  plane, whose xDS stream is mTLS too): each service's server certificate, naming the service
  (Envoy checks that name) and ``localhost``/``127.0.0.1``.

Idempotent: what exists is kept; a new CA (the old one was deleted) remakes everything.
Keys are written 0600. Nothing here is for production: there, cert-manager or your PKI issues
the certificates, and these file names are only the settings' values.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = Path(".run") / "certs"
SERVICES = ("middleman", "preprocess", "batcher", "triton", "eds")
PUBLIC, CLIENT, CA = "public", "envoy-client", "ca"
DAYS = 825  # what browsers and macOS accept for a leaf
LOCAL_NAMES = ("DNS:localhost", "IP:127.0.0.1")


class CertError(RuntimeError):
    """openssl is missing or refused; the message says which command."""


@dataclass(frozen=True)
class Certs:
    """Where each file of a certificate directory is."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / f"{CA}.crt"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise CertError("no openssl on PATH: install it (Debian: apt-get install openssl)")
    result = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(path))  # fmt: skip
    path.chmod(0o600)


def _make_ca(certs: Certs) -> None:
    key = certs.key(CA)
    _new_key(key)
    _openssl("req", "-x509", "-new", "-key", str(key), "-out", str(certs.ca),
             "-days", str(DAYS * 4), "-subj", "/O=inferline/CN=inferline local CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip


def _make_leaf(certs: Certs, name: str, names: Sequence[str], usage: str) -> None:
    key, cert = certs.key(name), certs.cert(name)
    _new_key(key)
    with tempfile.TemporaryDirectory(prefix="inferline-certs-") as tmp:
        csr, ext = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
                 f"extendedKeyUsage={usage}"]  # fmt: skip
        if names:
            lines.append("subjectAltName=" + ",".join(names))
        ext.write_text("\n".join(lines) + "\n", encoding="utf-8")
        _openssl("req", "-new", "-key", str(key), "-out", str(csr),
                 "-subj", f"/O=inferline/CN={name}")  # fmt: skip
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(certs.ca),
                 "-CAkey", str(certs.key(CA)), "-set_serial", str(int.from_bytes(os.urandom(8))),
                 "-days", str(DAYS), "-extfile", str(ext), "-out", str(cert))  # fmt: skip


def leaves() -> dict[str, tuple[tuple[str, ...], str]]:
    """name -> (subject alternative names, extended key usage) of every leaf certificate."""
    made: dict[str, tuple[tuple[str, ...], str]] = {PUBLIC: (LOCAL_NAMES, "serverAuth")}
    made[CLIENT] = (("DNS:envoy",), "clientAuth")
    for service in SERVICES:
        # serverAuth for Envoy's connections; clientAuth so a replica may call another directly.
        made[service] = ((f"DNS:{service}", *LOCAL_NAMES), "serverAuth,clientAuth")
    return made


def ensure(directory: Path = DEFAULT_DIR) -> Certs:
    """Make what is missing in ``directory``; keep what is there. Returns its layout."""
    certs = Certs(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fresh_ca = not (certs.ca.is_file() and certs.key(CA).is_file())
    if fresh_ca:
        _make_ca(certs)
    for name, (names, usage) in leaves().items():
        if fresh_ca or not (certs.cert(name).is_file() and certs.key(name).is_file()):
            _make_leaf(certs, name, names, usage)
    return certs


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    directory = Path(args[0]) if args else DEFAULT_DIR
    try:
        certs = ensure(directory)
    except CertError as exc:
        sys.stderr.write(f"make certs: {exc}\n")
        return 1
    sys.stdout.write(
        f"certificates in {certs.dir} (CA: {certs.ca}); "
        "INFERLINE_STACK_TLS=true make up runs the stack with them\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
