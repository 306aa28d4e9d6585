"""components/model-store and components/model-store-pvc: the models apart from images.

Rendered on the gpu overlay, then run: the real Triton server (PyTriton's binary) starts with the
rendered Triton container's arguments and environment, its ConfigMap pointing at S3's API
(moto's server) or Cloud Storage's (gcp-storage-emulator) on loopback, and serves a model it read
from there; middleman's rendered init container runs as written against the same S3 store and
leaves the model cards, and nothing else, where middleman reads them.

Not proven here: the real S3 and GCS (their credentials: IRSA, Workload Identity, a key in the
Secret), the cards fetched from `gs://` (obstore's Cloud Storage client speaks the XML API, which
the emulator lacks), and a storage class that offers ReadOnlyMany for the PVC.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferline import store
from inferline.catalog import ModelCard, write_card
from inferline_testing.object_stores import S3_ENV, gcs_server, s3_server
from inferline_testing.ports import free_port
from inferline_testing.servers import running
from k8s.tests.manifests import K8S, documents, find, kustomize

READY_TIMEOUT_S = 120.0
PROBE_CONFIG = """\
name: "probe"
backend: "python"
max_batch_size: 8
input [ { name: "IN", data_type: TYPE_UINT8, dims: [ 4 ] } ]
output [ { name: "OUT", data_type: TYPE_UINT8, dims: [ 4 ] } ]
"""
PROBE_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
# The rendered flags that bind ports; the test gives Triton free ones instead.
PORT_FLAGS = ("--grpc-port=", "--http-port=", "--metrics-port=", "--grpc-address=")


def render_with(component: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The gpu overlay with ``component`` on top (plain kubectl kustomize)."""
    folder = tmp_path / "overlay"
    folder.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(K8S / "overlays" / "gpu", folder)],
        "components": [os.path.relpath(K8S / "components" / component, folder)],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), "utf-8")
    return documents(kustomize(folder))


def pod(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def container(spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    (found,) = [
        c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name
    ]
    return dict(found)


# The downward API's fields a container's environment may name (middleman's POD_NAME).
POD_FIELDS = {"metadata.name": "pod-0", "metadata.namespace": "inferline"}


def environment(
    spec: Mapping[str, Any], objects: list[dict[str, Any]], secret: Mapping[str, str]
) -> dict[str, str]:
    """A container's environment as the kubelet gives it: values (``$(NAME)`` of a variable
    declared before expanded), ConfigMap keys, the pod's fields (POD_FIELDS), and the Secret's
    keys (``secret``) through envFrom."""
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        if "configMapRef" in source:  # optional: components/tracing's, when it is there
            ref = source["configMapRef"]
            assert ref.get("optional") is True, ref
            named = [o for o in objects if o["kind"] == "ConfigMap"
                     and o["metadata"]["name"] == ref["name"]]  # fmt: skip
            env.update(named[0]["data"] if named else {})
            continue
        assert source["secretRef"] == {"name": "model-store-credentials", "optional": True}
        env.update(secret)
    for variable in spec.get("env", []):
        if "value" in variable:
            env[variable["name"]] = expand(variable["value"], env)
        elif "fieldRef" in variable["valueFrom"]:
            env[variable["name"]] = POD_FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = variable["valueFrom"]["configMapKeyRef"]
            env[variable["name"]] = find(objects, "ConfigMap", ref["name"])["data"][ref["key"]]
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(NAME)`` expansion of a command or argument."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


def with_store(objects: list[dict[str, Any]], uri: str) -> list[dict[str, Any]]:
    """``objects`` with ConfigMap model-store naming ``uri`` (what an overlay's generator sets)."""
    find(objects, "ConfigMap", "model-store")["data"]["uri"] = uri
    return objects


def probe_repository(root: Path) -> Path:
    """A model Triton loads with its Python backend, with a model card beside it."""
    (root / "probe" / "1").mkdir(parents=True)
    (root / "probe" / "config.pbtxt").write_text(PROBE_CONFIG)
    (root / "probe" / "1" / "model.py").write_text(PROBE_MODEL)
    card = ModelCard(name="probe", resize=4, crop=4, classes=2)
    write_card(root / "probe", card, ("low", "high"))
    return root


def tritonserver() -> tuple[Path, Path]:
    """PyTriton's server binary and the Python backend (with this interpreter's stub)."""
    import pytriton  # a pinned dependency (requirements-dev.txt): missing fails, never skips

    root = Path(pytriton.__file__).parent / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return root / "bin" / "tritonserver", root / "python_backend_stubs" / version


def backends(tmp_path: Path) -> Path:
    binary, stubs = tritonserver()
    python = tmp_path / "backends" / "python"
    python.mkdir(parents=True)
    for path in [*(binary.parents[1] / "backends" / "python").iterdir(), *stubs.iterdir()]:
        (python / path.name).symlink_to(path)
    return tmp_path / "backends"


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def serve_and_infer(args: list[str], env: Mapping[str, str], tmp_path: Path) -> dict[str, Any]:
    """Start Triton with ``args`` (the rendered ones, on free ports), wait for model probe, and
    return its answer to one request."""
    binary, _ = tritonserver()
    http, grpc, metrics = free_port(), free_port(), free_port()
    argv = [
        str(binary),
        *[a for a in args if not a.startswith(PORT_FLAGS)],
        f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}",
        "--grpc-address=127.0.0.1", "--http-address=127.0.0.1",
        f"--backend-directory={backends(tmp_path)}",
    ]  # fmt: skip
    # The Python backend's stub: this interpreter's libpython, and its packages (numpy) through
    # the venv's python first on PATH.
    stub_env = {
        "LD_LIBRARY_PATH": str(sysconfig.get_config_var("LIBDIR")),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    base = f"http://127.0.0.1:{http}/v2/models/probe"
    body = {
        "inputs": [{"name": "IN", "shape": [1, 4], "datatype": "UINT8", "data": [7, 0, 255, 1]}]
    }
    request = urllib.request.Request(f"{base}/infer", data=json.dumps(body).encode(), method="POST")
    log = tmp_path / "triton.log"
    with running(
        "triton", argv, lambda: ready(f"{base}/ready"), log, env={**env, **stub_env},
        timeout_s=READY_TIMEOUT_S,
    ), urllib.request.urlopen(request, timeout=30) as reply:  # fmt: skip
        answer: dict[str, Any] = json.loads(reply.read())
    return answer


def triton_args(
    objects: list[dict[str, Any]], secret: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The Triton container's own arguments (from `tritonserver` on, after the in-pod wrapper),
    expanded, and its environment."""
    spec = container(pod(objects, "triton"), "triton")
    env = environment(spec, objects, secret)
    args = spec["args"][spec["args"].index("tritonserver") + 1 :]
    return [expand(a, env) for a in args], env


@pytest.fixture(scope="module")
def store_objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render_with("model-store", tmp_path_factory.mktemp("render"))


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[Any]:
    with s3_server(tmp_path / "moto.log") as server:
        yield server


# -- components/model-store --------------------------------------------------------------------


def test_triton_and_middleman_read_the_store_the_configmap_names(
    store_objects: list[dict[str, Any]],
) -> None:
    triton = pod(store_objects, "triton")
    assert [c["name"] for c in triton["initContainers"]] == ["preflight"]  # no copy of the image
    assert "/models" not in {m["mountPath"] for m in container(triton, "triton")["volumeMounts"]}
    args, _ = triton_args(store_objects, {})
    uri = find(store_objects, "ConfigMap", "model-store")["data"]["uri"]
    assert f"--model-repository={uri}" in args
    store.parse(uri)  # the default is a store's URI, in the form both readers take

    cards = container(pod(store_objects, "middleman"), "model-cards")
    assert (
        cards["image"]
        == find(store_objects, "Deployment", "middleman")["spec"]["template"]["spec"]["containers"][
            0
        ]["image"]
    )  # middleman's own image: inferline.store is in it
    command = [expand(a, environment(cards, store_objects, {})) for a in cards["command"]]
    assert command == ["python", "-m", "inferline.store", "cards", uri, "/repository"]


def test_the_network_policy_lets_both_pods_reach_the_store(
    store_objects: list[dict[str, Any]],
) -> None:
    policy = find(store_objects, "NetworkPolicy", "model-store")["spec"]
    (selector,) = policy["podSelector"]["matchExpressions"]
    assert sorted(selector["values"]) == ["middleman", "triton"]
    (rule,) = policy["egress"]
    assert {(p["port"], p["protocol"]) for p in rule["ports"]} >= {(443, "TCP"), (53, "UDP")}


def test_the_rendered_triton_serves_a_model_from_s3(
    store_objects: list[dict[str, Any]], s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    uri = s3.uri("repository")
    store.publish(probe_repository(tmp_path / "repository"), uri)
    args, env = triton_args(with_store(store_objects, uri), S3_ENV)
    answer = serve_and_infer(args, env, tmp_path)
    assert answer["outputs"][0]["data"] == [7, 0, 255, 1]


def test_the_rendered_triton_serves_a_model_from_cloud_storage(
    store_objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    with gcs_server(tmp_path / "gcs.log") as gcs:
        gcs.upload(probe_repository(tmp_path / "repository"), "repository")
        args, env = triton_args(with_store(store_objects, gcs.uri("repository")), gcs.env)
        answer = serve_and_infer(args, env, tmp_path)
    assert answer["outputs"][0]["data"] == [7, 0, 255, 1]


def test_middlemans_init_container_leaves_the_cards_and_no_weights(
    store_objects: list[dict[str, Any]], s3: Any, tmp_path: Path
) -> None:
    uri = s3.uri("repository")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "inferline.store",
            "publish",
            str(probe_repository(tmp_path / "r")),
            uri,
        ],
        env={**os.environ, **S3_ENV},
        check=True,
        capture_output=True,
    )
    cards = container(pod(with_store(store_objects, uri), "middleman"), "model-cards")
    env = environment(cards, store_objects, S3_ENV)
    command = [expand(a, env) for a in cards["command"]]
    assert command[0] == "python"
    destination = tmp_path / "repository-volume"
    command = [sys.executable, *command[1:-1], str(destination)]
    subprocess.run(command, env={**os.environ, **env}, check=True, capture_output=True)
    files = sorted(
        p.relative_to(destination).as_posix() for p in destination.rglob("*") if p.is_file()
    )
    assert files == ["probe/inferline.json", "probe/labels.txt"]


def test_a_store_without_cards_fails_the_init_container_naming_it(
    store_objects: list[dict[str, Any]], s3: Any, tmp_path: Path
) -> None:
    uri = s3.uri("empty")
    cards = container(pod(with_store(store_objects, uri), "middleman"), "model-cards")
    env = environment(cards, store_objects, S3_ENV)
    command = [
        sys.executable,
        *[expand(a, env) for a in cards["command"]][1:-1],
        str(tmp_path / "v"),
    ]
    result = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    assert result.returncode == 1
    assert f"{uri}: no model cards" in result.stderr


# -- components/model-store-pvc ----------------------------------------------------------------


def test_the_pvc_is_mounted_read_only_where_triton_and_middleman_read(tmp_path: Path) -> None:
    objects = render_with("model-store-pvc", tmp_path)
    claim = find(objects, "PersistentVolumeClaim", "models")["spec"]
    assert {"ReadOnlyMany", "ReadWriteMany"} & set(claim["accessModes"])
    for name, reader in (("triton", "triton"), ("middleman", "middleman")):
        spec = pod(objects, name)
        assert not {c["name"] for c in spec.get("initContainers", [])} & {"models", "model-cards"}
        (volume,) = [v for v in spec["volumes"] if v["name"] == "models"]
        assert volume == {
            "name": "models",
            "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
        }
        (mount,) = [m for m in container(spec, reader)["volumeMounts"] if m["name"] == "models"]
        env = environment(container(spec, reader), objects, {})
        read_from = (
            expand("$(INFERLINE_MODEL_REPOSITORY)", env)
            if name == "triton"
            else env["INFERLINE_MIDDLEMAN_REPOSITORY"]
        )
        assert mount["mountPath"] == read_from
