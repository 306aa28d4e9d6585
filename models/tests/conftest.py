"""Shared fixtures: one model repository per test session, and a cat photo as the model sees it."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest
from skimage.data import chelsea

from inferline_models.export import DEFAULT_REPOSITORY, build_repository, is_fresh

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`build/model_repository` when its stamp is fresh, else a new export (slow) in a tmp dir."""
    existing = REPO_ROOT / DEFAULT_REPOSITORY
    if is_fresh(existing):
        return existing
    repository = tmp_path_factory.mktemp("model_repository")
    assert build_repository(repository)
    return repository


@pytest.fixture(scope="session")
def cat_classes() -> frozenset[int]:
    """ImageNet-1k domestic cats: tabby, tiger cat, Persian, Siamese, Egyptian cat."""
    return frozenset(range(281, 286))


@pytest.fixture(scope="session")
def cat_chw() -> npt.NDArray[np.uint8]:
    """skimage's chelsea: shorter side to 256 (INTER_LINEAR), centre crop 224, RGB, CHW uint8."""
    photo = np.asarray(chelsea(), dtype=np.uint8)  # type: ignore[no-untyped-call]
    h, w = photo.shape[:2]
    scale = 256 / min(h, w)
    size = (round(w * scale), round(h * scale))
    resized = cv2.resize(photo, size, interpolation=cv2.INTER_LINEAR)
    h, w = resized.shape[:2]
    top, left = (h - 224) // 2, (w - 224) // 2
    crop = resized[top : top + 224, left : left + 224]
    return np.ascontiguousarray(crop.transpose(2, 0, 1), dtype=np.uint8)
