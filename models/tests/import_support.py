"""What the import tests share: the files they hand the importer and the options they take."""

from __future__ import annotations

from pathlib import Path

import onnx

from inferline_models.import_settings import ImportOptions, normalisation


def labels_file(directory: Path, count: int) -> Path:
    path = directory / f"labels{count}.txt"
    path.write_text("".join(f"class {i}\n" for i in range(count)), encoding="utf-8")
    return path


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save_model(model, str(path))
    return path


def affine(scale: float, offset: float) -> ImportOptions:
    return ImportOptions(name="m", normalisation=normalisation(scale=(scale,), offset=(offset,)))
