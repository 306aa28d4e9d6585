"""tools.pods, pure: a pod's and a container's securityContext as ``podman create`` options
(user, groups, capabilities, seccomp), and what the runner refuses."""

from __future__ import annotations

from typing import Any

import pytest

from tools.pods import spec
from tools.pods.create import security_args
from tools.pods.manifests import Manifests
from tools.pods.spec import SpecError

# --- the security context ------------------------------------------------------------------------


def pod_of(
    container: dict[str, Any], security: dict[str, Any] | None = None
) -> tuple[spec.Pod, spec.Container]:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "securityContext": security or {},
                    "containers": [{"name": "app", "image": "example/web:1", **container}],
                },
            }
        },
    }
    pod = Manifests([deployment]).pod("web", 0)
    return pod, pod.containers[0]


def test_run_as_non_root_refuses_a_root_uid() -> None:
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True, "runAsUser": 0}})
    with pytest.raises(SpecError, match=r"^web-0 container app: runAsNonRoot, and .* as root"):
        security_args(pod, app, "1000")
    pod, app = pod_of({}, {"runAsNonRoot": True})
    with pytest.raises(SpecError, match=r"^web-0 container app: .* would run as root"):
        security_args(pod, app, "0:0")  # the image's user is root


def test_run_as_non_root_refuses_an_image_user_it_cannot_verify() -> None:
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True}})
    with pytest.raises(SpecError, match=r"^web-0 container app: .*'nobody' is not numeric"):
        security_args(pod, app, "nobody")
    with pytest.raises(SpecError, match=r"^web-0 container app: .*'root' is not numeric"):
        security_args(pod, app, "")


def test_run_as_non_root_accepts_a_numeric_user() -> None:
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True}})
    assert security_args(pod, app, "10001") == []  # the image's user, as it is
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}})
    assert security_args(pod, app, "nobody") == ["--user=1000"]


def test_the_containers_security_context_wins_over_the_pods() -> None:
    pod, app = pod_of(
        {"securityContext": {"runAsUser": 2000, "runAsGroup": 3000}},
        {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 4000, "supplementalGroups": [5000]},
    )
    assert security_args(pod, app, "") == [
        "--user=2000:3000",
        "--group-add=4000",
        "--group-add=5000",
    ]


def test_capabilities_and_privileges() -> None:
    pod, app = pod_of(
        {
            "securityContext": {
                "privileged": True,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            }
        }
    )
    assert security_args(pod, app, "") == [
        "--privileged",
        "--cap-drop=all",
        "--cap-add=net_bind_service",
    ]


@pytest.mark.parametrize(
    ("profile", "args"),
    [
        (None, []),
        ({"type": "RuntimeDefault"}, []),
        ({"type": "Unconfined"}, ["--security-opt=seccomp=unconfined"]),
    ],
)
def test_seccomp_profiles_the_runner_maps(profile: dict[str, str] | None, args: list[str]) -> None:
    pod, app = pod_of({"securityContext": {"seccompProfile": profile} if profile else {}})
    assert security_args(pod, app, "") == args


def test_a_localhost_seccomp_profile_is_refused() -> None:
    profile = {"type": "Localhost", "localhostProfile": "profiles/strict.json"}
    pod, app = pod_of({}, {"seccompProfile": profile})
    with pytest.raises(SpecError, match=r"^web-0 container app: seccompProfile Localhost"):
        security_args(pod, app, "")
