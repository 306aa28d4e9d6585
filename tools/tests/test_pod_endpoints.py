"""The runner as the EndpointSlice controller, without podman: the slices it writes for the cpu
overlay's Services, read by eds's own mapping (eds.sources.endpointslice.endpoints), and the
endpoints file it replaces in one rename."""

from __future__ import annotations

import dataclasses
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from eds.cache import Endpoint, Health
from eds.sources import endpointslice
from tools.pods import endpoints
from tools.pods.manifests import Manifests
from tools.pods.spec import WEIGHT_ANNOTATION, Pod

ROOT = Path(__file__).resolve().parents[2]


def endpoints_of(
    service: Mapping[str, Any], members: Iterable[tuple[Pod, str, str]], port_name: str
) -> dict[str, Endpoint]:
    """What eds makes of the runner's slice, by pod name; weights as the runner looks them up
    (the pod's annotation, keyed by the slice's pod UID)."""
    chosen = list(members)
    weights = {
        f"podman-{p.name}": endpointslice.parse_weight(p.weight, p.name) for p, _, _ in chosen
    }
    slice_ = endpoints.endpoint_slice(service, chosen)
    assert endpointslice.service_of(slice_) == service["metadata"]["name"]
    assert endpointslice.pods_of([slice_]) == sorted(
        (f"podman-{p.name}", p.name) for p, _, _ in chosen
    )
    return {e.name: e for e in endpointslice.endpoints([slice_], port_name, weights)}


def test_ready_terminating_and_starting_pods_are_healthy_draining_and_unhealthy(
    cpu: Manifests,
) -> None:
    service = cpu.services()["triton"]
    members = [
        (cpu.pod("triton", 0), "10.88.0.10", "ready"),
        (cpu.pod("triton", 1), "10.88.0.11", "terminating"),
        (cpu.pod("triton", 2), "10.88.0.12", "starting"),
    ]
    found = endpoints_of(service, members, "grpc")
    assert {name: (e.address, e.health) for name, e in found.items()} == {
        "triton-0": ("10.88.0.10", Health.HEALTHY),
        "triton-1": ("10.88.0.11", Health.DRAINING),
        "triton-2": ("10.88.0.12", Health.UNHEALTHY),
    }


def test_the_slices_conditions_are_the_controllers(cpu: Manifests) -> None:
    members = [
        (cpu.pod("eds", 0), "10.88.0.2", "ready"),
        (cpu.pod("eds", 1), "10.88.0.3", "terminating"),
        (cpu.pod("eds", 2), "10.88.0.4", "starting"),
    ]
    slice_ = endpoints.endpoint_slice(cpu.services()["eds"], members)
    assert slice_["metadata"]["labels"] == {"kubernetes.io/service-name": "eds"}
    assert [e["conditions"] for e in slice_["endpoints"]] == [
        {"ready": True, "serving": True, "terminating": False},
        {"ready": False, "serving": True, "terminating": True},
        {"ready": False, "serving": False, "terminating": False},
    ]
    assert [e["targetRef"]["name"] for e in slice_["endpoints"]] == ["eds-0", "eds-1", "eds-2"]


def test_the_triton_services_grpc_port_is_the_preprocess_in_the_pod(cpu: Manifests) -> None:
    # The Service's targetPort is the name "grpc": in the in-pod render only the preprocess
    # container beside Triton has a port of that name (Triton's own gRPC is on 127.0.0.1).
    service = cpu.services()["triton"]
    assert service["spec"]["ports"][0]["targetPort"] == "grpc"
    pod = cpu.pod("triton", 0)
    slice_ = endpoints.endpoint_slice(service, [(pod, "10.88.0.10", "ready")])
    assert slice_["ports"] == [{"name": "grpc", "port": 8091, "protocol": "TCP"}]
    (endpoint,) = endpoints_of(service, [(pod, "10.88.0.10", "ready")], "grpc").values()
    assert endpoint.port == 8091


def test_a_named_target_port_on_any_container_of_the_pod_is_found(cpu: Manifests) -> None:
    pod = cpu.pod("triton", 0)
    preprocess_first = dataclasses.replace(pod, containers=pod.containers[::-1])
    slice_ = endpoints.endpoint_slice(
        cpu.services()["triton"], [(preprocess_first, "10.0.0.1", "ready")]
    )
    assert slice_["ports"] == [{"name": "grpc", "port": 8091, "protocol": "TCP"}]


def test_each_service_port_resolves_its_own_target(cpu: Manifests) -> None:
    pod = cpu.pod("middleman", 0)
    rest = endpoints.endpoint_slice(
        cpu.services()["middleman-rest"], [(pod, "10.88.0.20", "ready")]
    )
    assert rest["ports"] == [{"name": "http", "port": 8093, "protocol": "TCP"}]
    grpc = endpoints.endpoint_slice(cpu.services()["middleman"], [(pod, "10.88.0.20", "ready")])
    assert grpc["ports"] == [{"name": "grpc", "port": 8090, "protocol": "TCP"}]


def test_a_numeric_or_missing_target_port_is_taken_as_it_is(cpu: Manifests) -> None:
    pod = cpu.pod("eds", 0)
    service = {
        "metadata": {"name": "plain"},
        "spec": {"ports": [{"name": "a", "port": 80, "targetPort": 18000}, {"port": 9183}]},
    }
    slice_ = endpoints.endpoint_slice(service, [(pod, "10.88.0.2", "ready")])
    assert slice_["ports"] == [
        {"name": "a", "port": 18000, "protocol": "TCP"},
        {"name": "", "port": 9183, "protocol": "TCP"},
    ]


def test_a_target_port_no_container_names_is_left_out(cpu: Manifests) -> None:
    service = {
        "metadata": {"name": "x"},
        "spec": {"ports": [{"name": "grpc", "port": 1, "targetPort": "nope"}]},
    }
    slice_ = endpoints.endpoint_slice(service, [(cpu.pod("eds", 0), "10.88.0.2", "ready")])
    assert slice_["ports"] == []
    assert endpointslice.endpoints([slice_], "grpc") == ()


def test_weights_come_from_the_pods_annotation(cpu: Manifests) -> None:
    service = cpu.services()["triton"]
    template = cpu.pod("triton", 0)
    assert template.annotations[WEIGHT_ANNOTATION] == "1"  # the render's
    heavy = dataclasses.replace(
        cpu.pod("triton", 1), annotations={**template.annotations, WEIGHT_ANNOTATION: "3"}
    )
    bare = dataclasses.replace(cpu.pod("triton", 2), annotations={})
    members = [
        (template, "10.88.0.10", "ready"),
        (heavy, "10.88.0.11", "ready"),
        (bare, "10.88.0.12", "ready"),
    ]
    found = endpoints_of(service, members, "grpc")
    assert {name: e.weight for name, e in found.items()} == {
        "triton-0": 1,
        "triton-1": 3,
        "triton-2": 1,
    }


# --- write_atomically ----------------------------------------------------------------------------


def test_write_atomically_leaves_the_file_readable_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "endpoints" / "endpoints.yaml"
    endpoints.write_atomically(target, "clusters: {}\n")
    assert target.read_text("utf-8") == "clusters: {}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["endpoints.yaml"]


def test_write_atomically_replaces_what_was_there(tmp_path: Path) -> None:
    target = tmp_path / "endpoints.yaml"
    target.write_text("old and longer\n", "utf-8")
    target.chmod(0o600)
    before = target.stat().st_ino
    endpoints.write_atomically(target, "new\n")
    assert target.read_text("utf-8") == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert target.stat().st_ino != before  # a rename, not a rewrite in place
    assert [p.name for p in tmp_path.iterdir()] == ["endpoints.yaml"]


def test_write_atomically_takes_a_mode(tmp_path: Path) -> None:
    target = tmp_path / "private"
    endpoints.write_atomically(target, "x", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
