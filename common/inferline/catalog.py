"""The image classifiers of a Triton model repository, as the pipeline sees them. No gRPC here.

Each classifier's directory holds, beside Triton's ``config.pbtxt`` and ``1/model.onnx``, a
*model card* (``inferline.json``) with what the services need and Triton does not say: the
decoding geometry (shorter side, square crop) and the input and output tensor names; its
labels are Triton's ``labels.txt``. ``python -m inferline_models`` writes both; middleman and
the local stack read them, so adding or removing a model is a change of files, not of code.

The wire contract every card describes: input uint8 ``[N, 3, crop, crop]`` RGB, output FP32
probabilities ``[N, classes]`` (normalisation and layout live inside the model's graph).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CARD_FILE = "inferline.json"
LABELS_FILE = "labels.txt"
CARD_FORMAT = 1


class CatalogError(ValueError):
    """A model card is missing, unreadable or inconsistent; the message names the file."""


@dataclass(frozen=True)
class ModelCard:
    """One classifier: its Triton name, tensors, decoding geometry and class count."""

    name: str
    resize: int  # shorter side, before the centre crop
    crop: int  # the square the model takes
    classes: int
    input: str = "INPUT"
    output: str = "PROBS"
    # How the graph was made (the import's options, the source file): for people, not code.
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.crop <= self.resize:
            raise CatalogError(
                f"model {self.name!r}: crop ({self.crop}) must be positive and <= resize "
                f"({self.resize})"
            )
        if self.classes < 1:
            raise CatalogError(f"model {self.name!r}: classes must be >= 1, got {self.classes}")

    def to_json(self) -> str:
        return json.dumps({"format": CARD_FORMAT, **asdict(self)}, indent=2) + "\n"


def write_card(directory: Path, card: ModelCard, labels: tuple[str, ...]) -> None:
    """Write ``inferline.json`` and ``labels.txt`` into a model's directory."""
    if len(labels) != card.classes:
        raise CatalogError(f"model {card.name!r}: {len(labels)} labels for {card.classes} classes")
    (directory / CARD_FILE).write_text(card.to_json(), encoding="utf-8")
    (directory / LABELS_FILE).write_text("\n".join(labels) + "\n", encoding="utf-8")


def read_card(directory: Path) -> tuple[ModelCard, tuple[str, ...]]:
    """The card and labels of the model in ``directory`` (whose name is the model's)."""
    path = directory / CARD_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        labels = tuple(
            line.strip()
            for line in (directory / LABELS_FILE).read_text(encoding="utf-8").splitlines()
            if line.strip()
        )
    except OSError as exc:
        raise CatalogError(f"cannot read model {directory.name!r}: {exc}") from exc
    except ValueError as exc:
        raise CatalogError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.pop("format", None) != CARD_FORMAT:
        raise CatalogError(f"{path}: not a model card of format {CARD_FORMAT}")
    try:
        card = ModelCard(**data)
    except TypeError as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    if card.name != directory.name:
        raise CatalogError(f"{path}: model name {card.name!r} does not match its directory")
    if len(labels) != card.classes:
        raise CatalogError(
            f"{directory / LABELS_FILE} has {len(labels)} labels; the card says {card.classes}"
        )
    return card, labels


def classifiers(repository: Path) -> list[str]:
    """Names of the models in ``repository`` that have a model card, sorted (a hidden folder is
    a model being written, not one to serve)."""
    if not repository.is_dir():
        return []
    cards = repository.glob(f"*/{CARD_FILE}")
    return sorted(p.parent.name for p in cards if not p.parent.name.startswith("."))
