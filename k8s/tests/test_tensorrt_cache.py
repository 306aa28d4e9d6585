"""TensorRT's engine cache: where config.pbtxt says ONNX Runtime writes engines, the Triton pod has
a writable volume, and components/tensorrt-cache makes it one that outlives the pod, in a folder
per Triton image (an engine of another TensorRT version does not load).

Not proven here (no GPU with TensorRT on this machine): a second pod loading the engine the
first one built instead of building it again.
"""

from __future__ import annotations

from typing import Any

import pytest

from inferline_models.repository import TENSORRT_CACHE_PATH, parse_config, render_config
from k8s.tests.manifests import OVERLAYS, find, render

TARGETS = (*(f"overlays/{name}" for name in OVERLAYS), "everything", "components/tensorrt-cache")


def triton(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Triton's pod spec and its container."""
    spec: dict[str, Any] = find(objects, "Deployment", "triton")["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "triton"]
    return spec, container


def cache_volume(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The mount at the cache path and the volume it mounts."""
    spec, container = triton(objects)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TENSORRT_CACHE_PATH]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def test_the_model_config_caches_engines_and_timings_at_the_pods_path() -> None:
    text = render_config()
    parse_config(text)
    for key in ("trt_engine_cache_path", "trt_timing_cache_path"):
        assert f'key: "{key}" value: "{TENSORRT_CACHE_PATH}"' in text


@pytest.mark.parametrize("target", TARGETS)
def test_triton_can_write_where_engines_are_cached(target: str) -> None:
    mount, volume = cache_volume(render(target))
    assert not mount.get("readOnly", False)
    assert "emptyDir" in volume or "persistentVolumeClaim" in volume


@pytest.mark.parametrize("target", [f"overlays/{name}" for name in OVERLAYS])
def test_without_the_component_the_cache_lives_and_dies_with_the_pod(target: str) -> None:
    _, volume = cache_volume(render(target))
    assert "emptyDir" in volume


def test_the_component_keeps_engines_on_a_shared_volume_per_triton_image() -> None:
    objects = render("components/tensorrt-cache")
    mount, volume = cache_volume(objects)
    claim = volume["persistentVolumeClaim"]["claimName"]
    assert "ReadWriteMany" in find(objects, "PersistentVolumeClaim", claim)["spec"]["accessModes"]

    _, container = triton(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert mount["subPathExpr"] == "$(INFERLINE_TENSORRT_CACHE_KEY)"
    tag = container["image"].rpartition(":")[2]
    key = env["INFERLINE_TENSORRT_CACHE_KEY"]
    assert key == tag, (
        f"components/tensorrt-cache keys the cache by Triton image {key} but Triton runs "
        f"{container['image']}: change INFERLINE_TENSORRT_CACHE_KEY with the image"
    )
