"""Who may infer on the local stack: a signing key, the key set Envoy checks tokens against, and
a token for the demo client (``INFERLINE_STACK_AUTH=true``).

    python -m inferline_stack.auth [DIR]      (``make token``; DIR defaults to .run/auth)

Into DIR, EC P-256 (ES256), each written owner-only where secret:

- ``signing.key``: the private key tokens are signed with (PEM, 0600);
- ``jwks.json``: its public half as a JSON Web Key Set, what Envoy's ``jwt_authn`` reads;
- ``token``: a token of :data:`ISSUER` for :data:`AUDIENCE`, valid for :data:`LIFETIME_S` (0600),
  made again when it has less than a day left.

Idempotent: the key is kept, so tokens made before stay valid. Nothing here is for production:
there, an identity provider signs the tokens and Envoy reads its published key set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

DEFAULT_DIR = Path(".run") / "auth"
ISSUER = "inferline-local"
AUDIENCE = "inferline"
ALGORITHM = "ES256"
KEY_ID = "inferline-local-1"
LIFETIME_S = 30 * 24 * 3600
RENEW_BEFORE_S = 24 * 3600


@dataclass(frozen=True)
class AuthFiles:
    directory: Path

    @property
    def key(self) -> Path:
        return self.directory / "signing.key"

    @property
    def jwks(self) -> Path:
        return self.directory / "jwks.json"

    @property
    def token(self) -> Path:
        return self.directory / "token"

    def read_token(self) -> str:
        return self.token.read_text(encoding="utf-8").strip()


def mint(
    key_pem: bytes,
    *,
    issuer: str = ISSUER,
    audience: str = AUDIENCE,
    lifetime_s: float = LIFETIME_S,
    now: float | None = None,
    claims: Mapping[str, Any] | None = None,
) -> str:
    """A token signed with ``key_pem``, issued ``now`` (default: now), expiring ``lifetime_s``
    later (negative: already expired)."""
    issued = int(time.time() if now is None else now)
    payload = {"iss": issuer, "aud": audience, "sub": "demo-client", "iat": issued,
               "exp": issued + int(lifetime_s), **(claims or {})}  # fmt: skip
    return jwt.encode(payload, key_pem, algorithm=ALGORITHM, headers={"kid": KEY_ID})


def new_key() -> bytes:
    """A new EC P-256 private key, PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def key_set(key_pem: bytes) -> dict[str, Any]:
    """The JSON Web Key Set of ``key_pem``'s public half."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the signing key is not an EC key")
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {"keys": [{**jwk, "kid": KEY_ID, "alg": ALGORITHM, "use": "sig"}]}


def _write(path: Path, data: bytes, mode: int) -> None:
    """``data`` into ``path`` whole (a reader never sees half of it), with ``mode``."""
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    partial.replace(path)


def _expires(token: str) -> float:
    claims = jwt.decode(token, options={"verify_signature": False})
    return float(claims.get("exp", 0))


def ensure(directory: Path = DEFAULT_DIR, now: float | None = None) -> AuthFiles:
    """The key (kept when there), its key set, and a token with more than a day left."""
    files = AuthFiles(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not files.key.exists():
        _write(files.key, new_key(), 0o600)
        files.token.unlink(missing_ok=True)  # signed by the old key
    key_pem = files.key.read_bytes()
    _write(files.jwks, json.dumps(key_set(key_pem), indent=2).encode() + b"\n", 0o644)
    clock = time.time() if now is None else now
    if not files.token.exists() or _expires(files.read_token()) - clock < RENEW_BEFORE_S:
        _write(files.token, mint(key_pem, now=clock).encode() + b"\n", 0o600)
    return files


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print("usage: python -m inferline_stack.auth [DIR]", file=sys.stderr)
        return 2
    files = ensure(Path(args[0]) if args else DEFAULT_DIR)
    print(
        f"token (issuer {ISSUER}, audience {AUDIENCE}, {ALGORITHM}): {files.token}\n"
        f"keys Envoy checks it against: {files.jwks}\n"
        f'use it: python -m demo_client load --token "$(cat {files.token})"'
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
