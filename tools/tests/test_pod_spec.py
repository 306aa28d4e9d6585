"""tools.pods, pure: quantities, the kubelet's $(VAR) expansion and probes. The cpu overlay as
pods: test_pod_overlay.py; the security context: test_pod_security.py; ConfigMaps and Secrets:
test_pod_configmaps.py."""

from __future__ import annotations

import pytest

from tools.pods import spec
from tools.pods.environment import expand
from tools.pods.spec import Probe, SpecError

# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quantity", "cores"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        (2, 2.0),
        ("1.5", 1.5),
        ("250m", 0.25),
        ("0.1", 0.1),
        ("1m", 0.001),
    ],
)
def test_parse_cpu(quantity: object, cores: float) -> None:
    assert spec.parse_cpu(quantity) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("quantity", "size"),
    [
        ("256Mi", 256 * 2**20),
        ("1Gi", 2**30),
        ("4Gi", 4294967296),
        ("1G", 10**9),
        ("129e6", 129_000_000),
        ("128974848", 128974848),
        (1024, 1024),
        ("64Ki", 65536),
        ("1.5Gi", 1610612736),
        ("500M", 500_000_000),
        ("2k", 2000),
    ],
)
def test_parse_memory(quantity: object, size: int) -> None:
    assert spec.parse_memory(quantity) == size


@pytest.mark.parametrize("quantity", ["", "abc", "1Gi", "-1", "2 cores", "1.2.3", ".", "1e3"])
def test_bad_cpu_quantities_are_spec_errors(quantity: str) -> None:
    with pytest.raises(SpecError, match="CPU quantity"):
        spec.parse_cpu(quantity)


@pytest.mark.parametrize("quantity", ["", "abc", "1GB", "1gi", "-1Gi", "1.2.3", ".", "Gi", "1 Gi"])
def test_bad_memory_quantities_are_spec_errors(quantity: str) -> None:
    with pytest.raises(SpecError, match="memory quantity"):
        spec.parse_memory(quantity)


# --- $(VAR) --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)", "one"),
        ("--model-repository=$(A)/models", "--model-repository=one/models"),
        ("$(A)$(B)", "onetwo"),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("x$(UNDEFINED)y$(A)", "x$(UNDEFINED)yone"),
        ("$$(A)", "$(A)"),  # escaped: the literal
        ("$$$(A)", "$one"),
        ("$$", "$"),
        ("cost: $5 and $A and ${A}", "cost: $5 and $A and ${A}"),  # not $(…): as written
        ("$(A", "$(A"),  # not closed
        ("$(EMPTY)", ""),
        ("token=$(od -An -N24 /dev/urandom)", "token=$(od -An -N24 /dev/urandom)"),
        ("(A) $ (A) $(A))", "(A) $ (A) one)"),
        ("$(A$(B))", "$(A$(B))"),  # the name runs to the first ")": A$(B, undefined
    ],
)
def test_expand_follows_the_kubelet(text: str, expanded: str) -> None:
    assert expand(text, {"A": "one", "B": "two", "EMPTY": ""}) == expanded


# --- probes --------------------------------------------------------------------------------------

PORTS = {"http": 8000, "grpc": 8091}


def test_a_grpc_probe_with_its_timing() -> None:
    found = spec.probe(
        {"grpc": {"port": 8091, "service": "readiness"}, "periodSeconds": 5, "failureThreshold": 2},
        PORTS,
        "here",
    )
    assert found == Probe(
        kind="grpc", port=8091, service="readiness", period_s=5.0, failure_threshold=2
    )
    assert found.budget_s == 10.0


def test_an_http_probe_resolves_a_named_port() -> None:
    found = spec.probe(
        {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "initialDelaySeconds": 3},
        PORTS,
        "here",
    )
    assert found is not None
    assert (found.kind, found.port, found.scheme) == ("http", 8000, "HTTP")
    assert found.path == "/v2/health/ready"
    assert found.budget_s == 3 + 10 * 3  # the kubelet's defaults: every 10 s, 3 failures


def test_a_tcp_probe_takes_a_port_number_as_text() -> None:
    found = spec.probe({"tcpSocket": {"port": "9000"}, "timeoutSeconds": 2}, PORTS, "here")
    assert found == Probe(kind="tcp", port=9000, timeout_s=2.0)


def test_an_exec_probe_keeps_its_command() -> None:
    found = spec.probe(
        {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 2, "failureThreshold": 150},
        PORTS,
        "here",
    )
    assert found is not None and found.kind == "exec" and found.command == ("cat", "/tmp/ready")
    assert found.budget_s == 300.0


def test_no_probe_is_none() -> None:
    assert spec.probe(None, PORTS, "here") is None
    assert spec.probe({}, PORTS, "here") is None


def test_an_unknown_port_name_or_probe_kind_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"^pod x readinessProbe: port 'metrics' is not a number"):
        spec.probe({"httpGet": {"port": "metrics"}}, PORTS, "pod x readinessProbe")
    with pytest.raises(SpecError, match="a probe of no kind the runner knows"):
        spec.probe({"periodSeconds": 5}, PORTS, "here")
