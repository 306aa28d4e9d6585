"""Which image classifiers middleman serves, and what each needs: the Triton model it calls,
that model's tensors, its decoding geometry and its labels. No gRPC here.

Each model is served under its Triton name; the default one also as ``classifier`` (and
``classifier_video`` classifies video frames with it). A model's description comes from its
model card in the model repository (:mod:`inferline.catalog`); a model without a card there
(the simulated GPU, or no repository at all) takes middleman's own settings: resize, crop,
labels file, tensor names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from inferline import catalog
from inferline.imaging.decode import Geometry
from inferline.labels import load_labels
from middleman.config import Config
from middleman.models import MODEL, VIDEO_MODEL

EVERY = "*"  # Config.models: every classifier in the repository


@dataclass(frozen=True)
class Classifier:
    """One Triton model as middleman calls it."""

    model: str  # its name at Triton (and the batcher)
    input: str
    output: str
    geometry: Geometry
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Classifiers:
    """Every public image model name -> the classifier it calls; ``default`` is ``classifier``."""

    default: Classifier
    by_name: Mapping[str, Classifier]

    @property
    def names(self) -> tuple[str, ...]:
        """The public models: ``classifier``, each model by name, ``classifier_video``."""
        return (*self.by_name, VIDEO_MODEL)

    @property
    def distinct(self) -> tuple[Classifier, ...]:
        """Each Triton model once."""
        return tuple({c.model: c for c in self.by_name.values()}.values())


def names_to_serve(config: Config) -> list[str]:
    """The Triton models to serve: the default first, then ``config.models``."""
    if config.models == EVERY:
        more = catalog.classifiers(Path(config.repository)) if config.repository else []
    else:
        more = [name.strip() for name in config.models.split(",") if name.strip()]
    return list(dict.fromkeys([config.triton_model, *more]))


def load(config: Config) -> Classifiers:
    """Read every served model's card (raises catalog.CatalogError naming the file)."""
    models = [describe(name, config) for name in names_to_serve(config)]
    return build(models)


def build(models: Sequence[Classifier]) -> Classifiers:
    """``models[0]`` is the default; names clashing with the public ones are refused."""
    by_name: dict[str, Classifier] = {MODEL: models[0]}
    for classifier in models:
        if classifier.model in (MODEL, VIDEO_MODEL):
            raise catalog.CatalogError(
                f"a model may not be called {classifier.model!r}: middleman serves that name"
            )
        by_name[classifier.model] = classifier
    return Classifiers(models[0], MappingProxyType(by_name))


def describe(name: str, config: Config) -> Classifier:
    """``name`` from its model card, or (no card) from middleman's own settings."""
    directory = Path(config.repository) / name
    if config.repository and (directory / catalog.CARD_FILE).is_file():
        card, labels = catalog.read_card(directory)
        return Classifier(name, card.input, card.output, Geometry(card.resize, card.crop), labels)
    if config.repository and config.models != EVERY and name != config.triton_model:
        raise catalog.CatalogError(
            f"model {name!r} has no {catalog.CARD_FILE} in {config.repository}: build or add it "
            "with `python -m inferline_models`, or leave it out of INFERLINE_MIDDLEMAN_MODELS"
        )
    return Classifier(
        name,
        config.triton_input,
        config.triton_output,
        config.geometry,
        load_labels(config.labels_file),
    )
