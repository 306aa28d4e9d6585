"""The local stack's signing key, key set and token (``make token``)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import jwt
import pytest

from inferline_stack import auth


def verify(token: str, jwks: Path, leeway: float = 0) -> dict[str, object]:
    """``token``'s claims, checked as Envoy checks them: against the key set's key, the issuer
    and the audience."""
    [key] = jwt.PyJWKSet.from_dict(json.loads(jwks.read_text())).keys
    claims: dict[str, object] = jwt.decode(
        token, key.key, algorithms=[auth.ALGORITHM], audience=auth.AUDIENCE, issuer=auth.ISSUER,
        leeway=leeway,
    )  # fmt: skip
    return claims


def test_the_token_verifies_against_the_key_set_and_the_secrets_are_owner_only(
    tmp_path: Path,
) -> None:
    files = auth.ensure(tmp_path)
    claims = verify(files.read_token(), files.jwks)
    assert claims["sub"] == "demo-client"
    assert int(str(claims["exp"])) - time.time() > auth.LIFETIME_S - 60
    for secret in (files.key, files.token):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert "d" not in json.loads(files.jwks.read_text())["keys"][0]  # no private part published


def test_ensure_keeps_the_key_and_a_token_with_time_left(tmp_path: Path) -> None:
    first = auth.ensure(tmp_path)
    key, token = first.key.read_bytes(), first.read_token()
    again = auth.ensure(tmp_path)
    assert again.key.read_bytes() == key and again.read_token() == token


def test_a_token_about_to_expire_is_made_again_with_the_same_key(tmp_path: Path) -> None:
    files = auth.ensure(tmp_path)
    old, key = files.read_token(), files.key.read_bytes()
    later = time.time() + auth.LIFETIME_S - auth.RENEW_BEFORE_S / 2
    auth.ensure(tmp_path, now=later)
    assert files.read_token() != old and files.key.read_bytes() == key
    assert verify(files.read_token(), files.jwks, leeway=auth.LIFETIME_S)["iat"] == int(later)


def test_a_new_key_drops_the_token_the_old_one_signed(tmp_path: Path) -> None:
    files = auth.ensure(tmp_path)
    old = files.read_token()
    files.key.unlink()
    auth.ensure(tmp_path)
    with pytest.raises(jwt.InvalidSignatureError):
        verify(old, files.jwks)
    verify(files.read_token(), files.jwks)


def test_an_expired_or_foreign_token_does_not_verify(tmp_path: Path) -> None:
    files = auth.ensure(tmp_path)
    key = files.key.read_bytes()
    with pytest.raises(jwt.ExpiredSignatureError):
        verify(auth.mint(key, now=time.time() - 7200, lifetime_s=3600), files.jwks)
    with pytest.raises(jwt.InvalidIssuerError):
        verify(auth.mint(key, issuer="someone-else"), files.jwks)
    with pytest.raises(jwt.InvalidSignatureError):
        verify(auth.mint(auth.new_key()), files.jwks)


def test_the_command_line_says_where_the_token_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert auth.main([str(tmp_path / "auth")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "auth" / "token") in out and "--token" in out
    assert auth.main(["--help"]) == 2
