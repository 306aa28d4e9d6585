"""The public listener's filters: tokens checked, load shed while middleman is saturated, and
liveness and readiness left open to both."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from inferline_envoy.binary import validate
from inferline_envoy.params import LOCAL, SHED_MESSAGE, EnvoyParams
from inferline_envoy.render import AUTH_PROVIDER, render
from inferline_stack import auth


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_auth_checks_tokens_on_the_public_listener_only_and_leaves_probes_open(
    tmp_path: Path,
) -> None:
    files = auth.ensure(tmp_path)
    params = dataclasses.replace(
        LOCAL, auth_jwks_file=str(files.jwks), auth_issuer="iss", auth_audiences="a, b"
    )
    config = render(params)
    ok, output = validate(config)  # the real binary loads the key set
    assert ok, output
    listeners = by_name(config["static_resources"]["listeners"])

    def filters(name: str) -> list[dict[str, Any]]:
        manager = listeners[name]["filter_chains"][0]["filters"][0]["typed_config"]
        names: list[dict[str, Any]] = manager["http_filters"]
        return names

    jwt = filters("middleman")[0]
    assert jwt["name"] == "envoy.filters.http.jwt_authn"  # before the router
    for hop in ("preprocess", "batcher", "triton"):  # inside, behind Envoy: no tokens
        assert [f["name"] for f in filters(hop)] == ["envoy.filters.http.router"]
    provider = jwt["typed_config"]["providers"][AUTH_PROVIDER]
    assert provider["issuer"] == "iss" and provider["audiences"] == ["a", "b"]
    assert provider["local_jwks"] == {"filename": str(files.jwks)}
    rules = jwt["typed_config"]["rules"]
    open_paths = [r["match"] for r in rules if "requires" not in r]
    assert {"prefix": "/grpc.health.v1.Health/"} in open_paths
    assert {"path": "/inference.GRPCInferenceService/ModelReady"} in open_paths
    assert rules[-1] == {"match": {"prefix": "/"}, "requires": {"provider_name": "inferline"}}


def public_manager(params: EnvoyParams) -> dict[str, Any]:
    listener = render(params)["static_resources"]["listeners"][0]
    manager: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return manager


def test_the_public_listener_sheds_after_the_token_check_and_before_the_router(
    tmp_path: Path,
) -> None:
    jwks = str(auth.ensure(tmp_path).jwks)
    with_auth = public_manager(dataclasses.replace(LOCAL, auth_jwks_file=jwks))
    assert [f["name"] for f in with_auth["http_filters"]] == [
        "envoy.filters.http.jwt_authn",  # a request without a good token counts for nothing
        "envoy.filters.http.admission_control",
        "envoy.filters.http.router",
    ]
    manager = public_manager(LOCAL)
    [shed, _] = manager["http_filters"]
    criteria = shed["typed_config"]["success_criteria"]
    assert 8 not in criteria["grpc_criteria"]["grpc_success_status"]  # only "saturated" fails
    assert len(criteria["grpc_criteria"]["grpc_success_status"]) == 16
    ranges = criteria["http_criteria"]["http_success_status"]
    assert [range(r["start"], r["end"]) for r in ranges if 429 in range(r["start"], r["end"])] == []
    grpc_reply, rest_reply = manager["local_reply_config"]["mappers"]
    headers = {h["header"]["key"]: h["header"]["value"] for h in grpc_reply["headers_to_add"]}
    assert headers == {"grpc-status": "8", "grpc-message": SHED_MESSAGE}
    assert rest_reply["status_code"] == 429
    assert rest_reply["body_format_override"]["json_format"] == {"error": SHED_MESSAGE}
    hops = render(LOCAL)["static_resources"]["listeners"][1:]
    for hop in hops:  # the inner hops never shed: middleman's admission decided already
        inner = hop["filter_chains"][0]["filters"][0]["typed_config"]
        assert [f["name"] for f in inner["http_filters"]] == ["envoy.filters.http.router"]


def test_without_shedding_or_auth_the_public_listener_only_routes() -> None:
    manager = public_manager(dataclasses.replace(LOCAL, shed=False))
    assert [f["name"] for f in manager["http_filters"]] == ["envoy.filters.http.router"]
    assert "local_reply_config" not in manager
