"""The rendered cpu overlay's pipeline, run as podman pods: what `make deploy` would start.

Every pod started from ``kubectl kustomize`` output with its command, args, environment,
volumes and security context as rendered (tools.pods); Services are DNS names on the pods'
network; the clients are the demo client's own image (as a pod would run it) and this machine
(as a user behind a port-forward would).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton_http
from PIL import Image

from inferline_testing import media
from inferline_testing.waits import wait_until
from tests.containers.support import (
    FIGURES,
    Load,
    envoy_ip,
    exec_in,
    metric,
    reference,
    summary_line,
)
from tools.containers.engine import Engine
from tools.pods.runner import Cluster

TRITON_HTTP = 8000
PREPROCESS_METRICS = 9181
IMAGES_DECODED = "inferline_preprocess_images_total"
TOKEN_FILE = "/dev/shm/triton-access-token"  # components/in-pod: written by Triton's start


def test_every_pod_is_ready_within_its_probes_budget(pipeline: Cluster) -> None:
    for record in pipeline.records.values():
        for container in record.containers:
            assert container.ready, f"{record.name}/{container.name} is not ready"
            assert container.ready_s is not None and container.budget_s is not None
            assert container.ready_s < container.budget_s, f"{record.name}/{container.name}"


def test_every_container_runs_as_its_security_context_says(
    pipeline: Cluster, engine: Engine
) -> None:
    """The uid the manifest sets, every capability dropped, no new privileges, and a root
    file system that refuses writes."""
    for record in pipeline.records.values():
        pod = pipeline.manifests.pod(record.deployment, record.index)
        for spec in pod.containers:
            name = f"{record.name}-{spec.name}"
            status = dict(
                line.split(":", 1)
                for line in exec_in(engine, name, "cat", "/proc/1/status").splitlines()
            )
            wanted = (spec.spec.get("securityContext") or {}).get(
                "runAsUser", pod.security.get("runAsUser")
            )
            assert status["Uid"].split()[0] == str(wanted), name
            assert int(status["CapEff"].strip(), 16) == 0, f"{name} keeps capabilities"
            assert status["NoNewPrivs"].strip() == "1", name
            write = engine.run("exec", name, "sh", "-c", "echo x > /write-check", check=False)
            assert write.returncode != 0 and "Read-only file system" in write.stderr, name


def test_a_cat_is_classified_over_grpc_by_the_demo_client_image_through_envoy(
    pipeline: Cluster, engine: Engine, tmp_path: Path
) -> None:
    cat = tmp_path / "cat.jpg"
    cat.write_bytes(media.cat_jpeg())
    cat.chmod(0o644)
    done = engine.run(
        "run", "--rm", f"--network={pipeline.network}", "--read-only",
        f"--mount=type=bind,source={cat},destination=/data/cat.jpg,ro=true",
        reference("demo-client"), "classify", "--json", "--target", "envoy:8080",
        "/data/cat.jpg", timeout=180,
    )  # fmt: skip
    (classes,) = json.loads(done.stdout).values()
    assert classes[0]["index"] in media.CAT_CLASSES, classes


def test_a_cat_is_classified_over_rest_through_envoy(pipeline: Cluster) -> None:
    image = media.cat_jpeg()
    with triton_http.InferenceServerClient(f"{envoy_ip(pipeline)}:8080") as client:
        tensor = triton_http.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[image]], dtype=np.object_), binary_data=True)
        result = client.infer("classifier", [tensor])
    probabilities = result.as_numpy("PROBABILITIES")
    assert probabilities is not None and int(probabilities[0].argmax()) in media.CAT_CLASSES


def test_a_triton_image_client_classifies_at_the_gpu_pods_triton(pipeline: Cluster) -> None:
    """What NVIDIA's image_client.py (tritonclient's examples) does against a model: its
    checks on the model's metadata and configuration (one input of 3 dims behind the batch
    dimension, NCHW or NHWC; one FP32 vector output), a resized uint8 image in that layout,
    and Triton's classification extension (``class_count``) for the top classes."""
    ip = pipeline.records["triton-0"].ip
    with triton_http.InferenceServerClient(f"{ip}:{TRITON_HTTP}") as client:
        metadata = client.get_model_metadata("efficientnet_lite0")
        config = client.get_model_config("efficientnet_lite0")
        (described,) = metadata["inputs"]
        (output,) = metadata["outputs"]
        assert output["datatype"] == "FP32" and len(described["shape"]) == 4
        assert config["input"][0]["format"] == "FORMAT_NCHW"
        _, c, h, w = described["shape"]
        rgb = Image.fromarray(media.photo("chelsea")).convert("RGB").resize((w, h))
        batch = np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)[np.newaxis]
        assert batch.shape == (1, c, h, w)
        tensor = triton_http.InferInput(described["name"], list(batch.shape), described["datatype"])
        tensor.set_data_from_numpy(batch)
        wanted = triton_http.InferRequestedOutput(output["name"], class_count=3)
        result = client.infer("efficientnet_lite0", [tensor], outputs=[wanted])
    top = result.as_numpy(output["name"])
    assert top is not None
    score, index, label = top.reshape(-1)[0].decode().split(":")
    assert int(index) in media.CAT_CLASSES and float(score) > 0, (score, index, label)


def test_the_gpu_pods_containers_hand_over_through_their_shared_memory(
    pipeline: Cluster, engine: Engine
) -> None:
    """Triton's container writes the access token to the pod's /dev/shm, the preprocess's
    container reads it and registers its ring there, both owner-only (uid 1000); Triton holds
    the regions, and refuses to list them to a caller without the token."""
    ip = pipeline.records["triton-0"].ip
    for container in ("triton-0-triton", "triton-0-preprocess"):
        listing = exec_in(engine, container, "stat", "-c", "%a %u %n", TOKEN_FILE, *[
            f"/dev/shm/inferline-preprocess-{i}" for i in range(4)
        ])  # fmt: skip
        for line in listing.splitlines():
            assert line.startswith("600 1000 "), f"{container}: {line}"
    token = exec_in(engine, "triton-0-preprocess", "cat", TOKEN_FILE).strip()
    status = f"http://{ip}:{TRITON_HTTP}/v2/systemsharedmemory/status"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(status, timeout=10)
    assert refused.value.code == 403
    request = urllib.request.Request(status, headers={"triton-access-token": token})
    with urllib.request.urlopen(request, timeout=10) as answer:
        regions = json.loads(answer.read())
    assert {r["key"] for r in regions} >= {f"/inferline-preprocess-{i}" for i in range(4)}


def test_a_second_gpu_pod_takes_traffic_within_seconds(pipeline: Cluster, engine: Engine) -> None:
    with Load(engine, pipeline.network, seconds=45) as load:
        first = pipeline.records["triton-0"].ip
        wait_until(lambda: metric(first, PREPROCESS_METRICS, IMAGES_DECODED) > 0, 120, "load")
        (started,), _ = pipeline.scale("triton", 2)
        published = time.monotonic()  # the runner wrote its EndpointSlice: eds pushes it
        wait_until(
            lambda: metric(started.ip, PREPROCESS_METRICS, IMAGES_DECODED) > 0,
            30,
            "the second GPU pod's first decoded image",
        )
        took = time.monotonic() - published
        pipeline.scale("triton", 1)  # drained under load: terminating, then SIGTERM
    assert load.summary["errors"] == 0, load.summary
    ready = max(c.ready_s or 0.0 for c in started.containers)
    FIGURES["second GPU pod: ready after its start"] = f"{ready:.1f} s"
    FIGURES["second GPU pod: first request after its endpoint was published"] = f"{took:.2f} s"
    FIGURES["scale-up and drain under load"] = summary_line(load.summary)


def test_a_gpu_pod_killed_under_load_fails_no_request(pipeline: Cluster, engine: Engine) -> None:
    pipeline.scale("triton", 2)
    with Load(engine, pipeline.network, seconds=40) as load:
        victim = pipeline.records["triton-1"].ip
        wait_until(lambda: metric(victim, PREPROCESS_METRICS, IMAGES_DECODED) > 0, 120, "load")
        pipeline.kill("triton-1")
    pipeline.scale("triton", 1)
    FIGURES["one of two GPU pods killed (SIGKILL) under load"] = summary_line(load.summary)
    assert load.summary["errors"] == 0, load.summary
    assert int(str(load.summary["requests"])) > 0
