"""The placements as rendered: where images are decoded (components/in-pod, components/in-process;
the base alone is the remote placement).

in-pod, the overlays' default, checked on both overlays and the `everything` render: the Triton
pod holds Triton and a preprocess container sharing a Memory emptyDir at /dev/shm, both as uid
1000; Triton's start writes a fresh owner-only access token there and execs Triton on loopback
with its shared-memory protocol restricted to it (the rendered command is run here, with a
stand-in for tritonserver); the preprocess calls that Triton with that token file; Service
triton's `grpc` port is the preprocess's; no preprocess pool; middleman in-pod. in-process: no
preprocess anywhere. How middleman dials the batchers, and the hops the network policies allow in
each placement: test_placement_hops.py.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s.tests.manifests import (
    DEFAULT_PLACEMENT,
    ENVOY_URL,
    K8S,
    NAMESPACE,
    OVERLAYS,
    PLACEMENTS,
    PROXYLESS_URL,
    Container,
    containers,
    find,
    render,
)
from k8s.tests.test_policy import quantity

IN_POD_TARGETS = (*(f"overlays/{o}" for o in OVERLAYS), "everything")
NO_PREPROCESS_TARGETS = ("components/in-process", "everything/in-process")
TRITON_UID = 1000  # the official image's triton-server user (k8s/CONTRACT.md)
SHM = "/dev/shm"
TOKEN_KEY = "triton-access-token"
RESTRICTED = "shared-memory,model-repository"
# A preprocess shared-memory slot holds max_batch images of up to 320 x 320 (its config's
# SLOT_SIDE) when INFERLINE_PREPROCESS_SHM_SLOT_BYTES is 0; max_batch is 64 unless set.
SLOT_SIDE, MAX_BATCH = 320, 64


def pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", "triton")["spec"]["template"]["spec"]
    return spec


def container(objects: list[dict[str, Any]], name: str) -> Container:
    [found] = [
        c
        for c in containers([find(objects, "Deployment", "triton")])
        if c.kind == "containers" and c.name == name
    ]
    return found


def uid_gid(c: Container) -> tuple[int, int]:
    """The uid and gid a container runs as: its own securityContext's, else the pod's."""
    own, shared = c.spec.get("securityContext") or {}, c.pod.get("securityContext") or {}
    return (
        int(own.get("runAsUser", shared.get("runAsUser", -1))),
        int(own.get("runAsGroup", shared.get("runAsGroup", -1))),
    )


def mount(c: Container, path: str) -> dict[str, Any]:
    [found] = [m for m in c.spec.get("volumeMounts") or [] if m["mountPath"] == path]
    return dict(found)


# -- in-pod: the GPU pod --------------------------------------------------------------------------


@pytest.mark.parametrize("target", IN_POD_TARGETS)
def test_the_gpu_pod_is_triton_and_preprocess_sharing_dev_shm(target: str) -> None:
    objects = render(target)
    spec = pod(objects)
    assert [c["name"] for c in spec["containers"]] == ["triton", "preprocess"]
    triton, preprocess = container(objects, "triton"), container(objects, "preprocess")
    assert triton.image.startswith("nvcr.io/nvidia/tritonserver:")
    assert re.fullmatch(r"inferline/preprocess(-gpu)?:[^:]+", preprocess.image), preprocess.image
    # One volume at /dev/shm in both, memory-backed and bounded.
    volumes = {v["name"]: v for v in spec["volumes"]}
    names = {mount(c, SHM)["name"] for c in (triton, preprocess)}
    assert len(names) == 1, f"two different volumes at {SHM}: {names}"
    [name] = names
    assert not any(mount(c, SHM).get("readOnly") for c in (triton, preprocess))
    empty_dir = volumes[name]["emptyDir"]
    assert empty_dir["medium"] == "Memory"
    assert quantity(empty_dir["sizeLimit"]) >= 256 * 2**20, empty_dir
    # Owner-only files (the ring, the token): both containers are the same user.
    assert uid_gid(triton) == uid_gid(preprocess) == (TRITON_UID, TRITON_UID)
    assert (
        preprocess.spec["securityContext"]["runAsUser"],
        preprocess.spec["securityContext"]["runAsGroup"],
    ) == (TRITON_UID, TRITON_UID), "the preprocess image's own user is 10001: set it here"
    # The ring fits: slots x slot bytes, with room to spare for the token and Triton's own use.
    env = preprocess.env()
    slots = int(env.get("INFERLINE_PREPROCESS_SHM_SLOTS", "4"))
    slot_bytes = int(env.get("INFERLINE_PREPROCESS_SHM_SLOT_BYTES", "0")) or (
        int(env.get("INFERLINE_PREPROCESS_MAX_BATCH", MAX_BATCH)) * 3 * SLOT_SIDE**2
    )
    assert slots * slot_bytes <= quantity(empty_dir["sizeLimit"]) / 2, (slots, slot_bytes)
    # …and counts against the preprocess container's memory, which writes it.
    limit = quantity(preprocess.spec["resources"]["limits"]["memory"])
    assert slots * slot_bytes <= limit / 4


@pytest.mark.parametrize("target", IN_POD_TARGETS)
def test_the_pods_preprocess_calls_its_own_triton_with_the_token(target: str) -> None:
    objects = render(target)
    triton, preprocess = container(objects, "triton"), container(objects, "preprocess")
    env = preprocess.env()
    grpc_port = next(
        a.split("=", 1)[1] for a in triton.spec["args"] if a.startswith("--grpc-port=")
    )
    assert env["INFERLINE_PREPROCESS_TRITON_URL"] == f"127.0.0.1:{grpc_port}"
    token_file = env["INFERLINE_PREPROCESS_TRITON_TOKEN_FILE"]
    assert token_file == triton.env()["INFERLINE_TRITON_TOKEN_FILE"]
    assert Path(token_file).parent == Path(SHM)
    assert env["INFERLINE_PREPROCESS_HOST"] == "0.0.0.0"
    assert int(env["INFERLINE_PREPROCESS_PORT"]) == preprocess.port("grpc")
    assert int(env["INFERLINE_PREPROCESS_METRICS_PORT"]) == preprocess.port("prep-metrics")
    # No GPU of its own (the device plugin gives the pod's to Triton): OpenCV on the CPUs.
    assert env["INFERLINE_PREPROCESS_BACKEND"] == "opencv"
    assert "nvidia.com/gpu" not in str(preprocess.spec["resources"])
    # Its health follows Triton's readiness: its probes wait as long as Triton's startup may.
    startup = triton.spec["startupProbe"]
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    for probe in ("startupProbe", "livenessProbe"):
        spec = preprocess.spec[probe]
        assert spec["grpc"] == {"port": preprocess.probe_port()}
        assert spec["periodSeconds"] * spec["failureThreshold"] >= allowed, probe


def run_triton_start(triton: Container, tmp_path: Path, name: str) -> tuple[list[str], Path]:
    """Triton's rendered args, run as the NGC entrypoint runs them (``exec "$@"``) with the token
    file in ``tmp_path`` and a stand-in ``tritonserver`` that records its arguments."""
    folder = tmp_path / name
    (folder / "bin").mkdir(parents=True)
    record = folder / "argv.json"
    stand_in = folder / "bin" / "tritonserver"
    stand_in.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n",
        encoding="utf-8",
    )
    stand_in.chmod(0o755)
    token_file = folder / "shm" / "triton-access-token"
    token_file.parent.mkdir()
    # Its literal values (a ConfigMap's, as components/model-store's, are the kubelet's to read).
    literal = {k: v for k, v in triton.env().items() if isinstance(v, str)}
    env = {**literal, "INFERLINE_TRITON_TOKEN_FILE": str(token_file)}
    env["PATH"] = f"{folder / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    result = subprocess.run(
        triton.spec["args"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    argv: list[str] = json.loads(record.read_text(encoding="utf-8"))
    return argv, token_file


@pytest.mark.parametrize("target", IN_POD_TARGETS)
def test_triton_starts_on_loopback_with_a_fresh_owner_only_token(
    target: str, tmp_path: Path
) -> None:
    objects = render(target)
    triton = container(objects, "triton")
    args = triton.spec["args"]
    assert args[:2] == ["sh", "-c"], "a shell in front of the entrypoint's exec"
    remote = container(render("everything/remote"), "triton")

    # The base's arguments, unchanged, then the in-pod ones (and components/tracing's, in the
    # renders that have it, after the base's in either placement).
    def untraced(argv: list[str]) -> list[str]:
        return [a for a in argv if not a.startswith("--trace-config=")]

    assert untraced(args[4:]) == untraced(remote.spec["args"]), "the base's arguments are kept"
    argv, token_file = run_triton_start(triton, tmp_path, "first")
    token = token_file.read_text(encoding="utf-8")
    assert re.fullmatch(r"[0-9a-f]{48}", token), token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert not list(token_file.parent.glob("*.new")), "written atomically, nothing left over"
    base = untraced(remote.spec["args"])
    assert untraced(argv)[: len(base) - 1] == base[1:]
    assert "--grpc-address=127.0.0.1" in argv
    for flag in ("--grpc-restricted-protocol", "--http-restricted-api"):
        assert f"{flag}={RESTRICTED}:{TOKEN_KEY}={token}" in argv, (flag, argv)
    # A restarted container gets a new token (the preprocess reads the file again).
    _, again = run_triton_start(triton, tmp_path, "second")
    assert again.read_text(encoding="utf-8") != token
    # The file the script writes is the one the preprocess reads, on the shared volume.
    assert triton.env()["INFERLINE_TRITON_TOKEN_FILE"].startswith(f"{SHM}/")
    # Its gRPC port is no port of the pod (loopback); HTTP (probes) and metrics stay.
    assert {p["name"] for p in triton.spec["ports"]} == {"http", "metrics"}


@pytest.mark.parametrize("target", IN_POD_TARGETS)
def test_service_triton_is_the_pods_preprocess(target: str) -> None:
    """eds fills Envoy's triton cluster from Service triton's EndpointSlices, port `grpc`: the
    port of that name in the pod is the preprocess's."""
    objects = render(target)
    [port] = [p for p in find(objects, "Service", "triton")["spec"]["ports"] if p["name"] == "grpc"]
    named = [
        (c["name"], p["containerPort"])
        for c in pod(objects)["containers"]
        for p in c.get("ports") or []
        if p.get("name") == port["targetPort"]
    ]
    assert named == [("preprocess", 8091)], named
    assert port["port"] == 8091


@pytest.mark.parametrize("target", IN_POD_TARGETS)
def test_no_preprocess_pool_and_middleman_sends_encoded_images(target: str) -> None:
    objects = render(target)
    pool = [o for o in objects if o["metadata"]["name"] == "preprocess"]
    assert not pool, [(o["kind"], o["metadata"]["name"]) for o in pool]
    [middleman] = [c for c in containers([find(objects, "Deployment", "middleman")])
                   if c.name == "middleman"]  # fmt: skip
    env = middleman.env()
    assert env["INFERLINE_MIDDLEMAN_PLACEMENT"] == "in-pod"
    assert not env.get("INFERLINE_MIDDLEMAN_PREPROCESS_URL")
    assert env["INFERLINE_MIDDLEMAN_TRITON_URL"] in (PROXYLESS_URL, ENVOY_URL), "the batcher"
    # The only preprocess is the one in each Triton pod.
    where = {c.workload for c in containers(objects) if c.image.startswith("inferline/preprocess")}
    assert where == {f"Deployment {NAMESPACE}/triton"}


def overlay_components(overlay: str) -> list[str]:
    """The components of the overlay's pipeline/ (its per-cluster ones, above it, patch no
    preprocess: k8s/tests/test_namespace.py)."""
    path = K8S / "overlays" / overlay / "pipeline" / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    return [Path(c).name for c in kustomization["components"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_ends_with_the_default_placement(overlay: str) -> None:
    """A placement removes what the components before it add for the preprocess pool: last."""
    names = overlay_components(overlay)
    assert [n for n in names if n in PLACEMENTS] == [DEFAULT_PLACEMENT]
    assert names[-1] == DEFAULT_PLACEMENT, names


# -- in-process: no preprocess at all -------------------------------------------------------------


@pytest.mark.parametrize("target", NO_PREPROCESS_TARGETS)
def test_in_process_renders_with_no_preprocess_anywhere(target: str) -> None:
    objects = render(target)
    named = [(o["kind"], o["metadata"]["name"]) for o in objects if "preprocess" in
             o["metadata"]["name"]]  # fmt: skip
    assert not named, named
    for c in containers(objects):
        assert c.name != "preprocess" and not c.image.startswith("inferline/preprocess"), c.where
        # Nothing configured to call or be a preprocess. (eds still announces Service
        # preprocess: none, an empty cluster, as Envoy's one bootstrap has a cluster and a
        # listener, 8081, of that name, which no policy lets anyone reach.)
        env = {k: v for k, v in c.env().items() if k != "INFERLINE_EDS_SERVICES"}
        assert "preprocess" not in str(env).lower(), f"{c.where}: {env}"
        assert "preprocess" not in str(c.spec.get("args", [])), c.where
    [middleman] = [c for c in containers([find(objects, "Deployment", "middleman")])
                   if c.name == "middleman"]  # fmt: skip
    env = middleman.env()
    assert env["INFERLINE_MIDDLEMAN_PLACEMENT"] == "in-process"
    assert not env.get("INFERLINE_MIDDLEMAN_PREPROCESS_URL")
    assert env["INFERLINE_MIDDLEMAN_TRITON_URL"] == PROXYLESS_URL, "the tensors to the batchers"
    # It decodes videos now: a stream spool that fits its /tmp.
    tmp = next(v for v in middleman.pod["volumes"] if v["name"] == mount(middleman, "/tmp")["name"])
    cap = int(env["INFERLINE_MIDDLEMAN_MAX_VIDEO_STREAM_BYTES"])
    assert cap <= quantity(tmp["emptyDir"]["sizeLimit"]) / 2
    # Triton as in the base: Envoy reaches its gRPC port.
    triton = container(objects, "triton")
    assert triton.spec["args"][0] == "tritonserver" and triton.port("grpc") == 8001
