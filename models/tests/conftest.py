"""Shared fixtures: the built models (one repository per model and test session), and a cat
photo as a model sees it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest
from skimage.data import chelsea

from inferline_models.export import DEFAULT_REPOSITORY, build_repository, is_fresh

REPO_ROOT = Path(__file__).resolve().parents[2]


def built_repository(model: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`build/model_repository` when its ``model`` is fresh, else a new export (slow) in a tmp
    dir: the tests never write into `build/`."""
    existing = REPO_ROOT / DEFAULT_REPOSITORY
    if is_fresh(existing, model):
        return existing
    repository = tmp_path_factory.mktemp(f"{model}_repository")
    assert build_repository(repository, [model])
    return repository


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with efficientnet_lite0, the default model."""
    return built_repository("efficientnet_lite0", tmp_path_factory)


@pytest.fixture(scope="session")
def lite2_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with efficientnet_lite2."""
    return built_repository("efficientnet_lite2", tmp_path_factory)


@pytest.fixture(scope="session")
def cat_classes() -> frozenset[int]:
    """ImageNet-1k domestic cats: tabby, tiger cat, Persian, Siamese, Egyptian cat."""
    return frozenset(range(281, 286))


def cat_crop(resize: int = 256, crop: int = 224) -> npt.NDArray[np.uint8]:
    """skimage's chelsea as the decoders feed a model: shorter side to ``resize``
    (INTER_LINEAR), centre crop ``crop``, RGB, CHW uint8."""
    photo = np.asarray(chelsea(), dtype=np.uint8)  # type: ignore[no-untyped-call]
    h, w = photo.shape[:2]
    scale = resize / min(h, w)
    size = (round(w * scale), round(h * scale))
    resized = cv2.resize(photo, size, interpolation=cv2.INTER_LINEAR)
    h, w = resized.shape[:2]
    top, left = (h - crop) // 2, (w - crop) // 2
    square = resized[top : top + crop, left : left + crop]
    return np.ascontiguousarray(square.transpose(2, 0, 1), dtype=np.uint8)


@pytest.fixture(scope="session")
def cat_at() -> Callable[[int, int], npt.NDArray[np.uint8]]:
    """``cat_at(resize, crop)``: the cat for a model of that geometry (its model card's)."""
    return cat_crop


@pytest.fixture(scope="session")
def cat_chw() -> npt.NDArray[np.uint8]:
    """The cat for a 224 model: shorter side 256, centre crop 224, RGB, CHW uint8."""
    return cat_crop(256, 224)
