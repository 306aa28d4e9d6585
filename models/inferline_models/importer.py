"""Import an ONNX image classifier into the Triton model repository, behind the wire contract.

``python -m inferline_models add --onnx FILE --labels FILE --name NAME [...]`` lands here, in
four steps; only the last writes. Each refuses what it cannot serve with a
:class:`~inferline_models.import_settings.ModelImportError` that names the file and what to do
(:mod:`inferline_models.import_settings`: the options, and the refusals that name a setting):

1. :func:`~inferline_models.onnx_graph.load_network` reads the file and finds its one image input
   and one output;
2. :func:`~inferline_models.input_plan.plan` decides, from the graph and the options, how pixels
   become the network's input (size, layout, colour order, normalisation, dtype) - refusing what
   the decoders cannot feed;
3. :func:`prepare` wraps the network (:mod:`inferline_models.wrapping`), decides logits or
   probabilities if asked to, checks the result with ``onnx.checker`` and runs it once in ONNX
   Runtime (CPU) on a batch of 2 (:mod:`inferline_models.trial_run`);
4. :func:`install` writes ``1/model.onnx``, ``config.pbtxt``, ``labels.txt`` and
   ``inferline.json`` into a staging directory and renames it into place.

Nothing is written before every check passed. The built-in models go the same way
(:mod:`inferline_models.export`), so the path ``make model`` takes is the one users take.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import onnx

from inferline.catalog import CARD_FILE, LABELS_FILE, ModelCard, write_card
from inferline_models.import_settings import ImportOptions, ModelImportError, SettingError
from inferline_models.input_plan import INPUT_TYPES, plan
from inferline_models.onnx_graph import load_network, make_batch_dynamic
from inferline_models.repository import (
    CONFIG_FILE,
    INPUT_NAME,
    OUTPUT_NAME,
    model_dir,
    onnx_file,
    render_config,
    staged_model_dir,
)
from inferline_models.trial_run import check_runs, detect_output_kind
from inferline_models.wrapping import wrap_classifier

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class PreparedClassifier:
    """A wrapped, checked classifier, ready for :func:`install`."""

    model: onnx.ModelProto
    card: ModelCard
    labels: tuple[str, ...]
    max_batch_size: int

    def config(self) -> str:
        return render_config(
            self.card.name, self.max_batch_size, size=self.card.crop, classes=self.card.classes
        )


def read_labels(path: Path) -> tuple[str, ...]:
    """One class name per non-empty line, as the catalog reads ``labels.txt``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelImportError(f"cannot read labels file {path}: {exc}") from exc
    labels = tuple(line.strip() for line in lines if line.strip())
    if not labels:
        raise ModelImportError(f"labels file {path} has no labels (one class name per line)")
    return labels


def prepare(
    onnx_path: Path,
    labels_path: Path,
    options: ImportOptions,
    *,
    source: Mapping[str, Any] | None = None,
    progress: Progress = _quiet,
) -> PreparedClassifier:
    """Read, plan, wrap and check; nothing is written. ``source`` (default: the file's name)
    goes into the model card with the options."""
    labels = read_labels(labels_path)
    network = load_network(onnx_path)
    progress(f"read {onnx_path}: {network.description}")
    decided = plan(network, options, len(labels))
    make_batch_dynamic(network.model)
    if network.fixed_batch is not None:
        progress(f"batch axis fixed at {network.fixed_batch}: made dynamic")
    steps = ", ".join(decided.pre.steps()) or "as they are"
    progress(f"wrapping: uint8 RGB NCHW {decided.size}x{decided.size} pixels -> {steps} -> network")

    kind = options.output_kind
    if kind == "auto":
        kind = detect_output_kind(network, decided.pre)
    how = "detected" if options.output_kind == "auto" else "as given"
    progress(f"output: {kind} ({how}){': appending a Softmax' if kind == 'logits' else ''}")
    model = wrap_classifier(network.model, decided.pre, softmax=kind == "logits")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelImportError(f"{onnx_path}: the wrapped model fails onnx.checker: {exc}") from exc
    check_runs(network, model, len(labels))
    progress(
        f"checked: onnx.checker; ONNX Runtime (CPU) batch of 2 -> [2, {len(labels)}] "
        "finite probabilities, rows sum to 1"
    )
    recorded = {
        "size": decided.size,
        "resize": decided.resize,
        "input_dtype": INPUT_TYPES[decided.pre.dtype],
        "channels": options.channels,
        "layout": options.layout,
        "normalisation": dict(options.normalisation.given) if options.normalisation else None,
        "output_kind": kind if options.output_kind != "auto" else f"{kind} (detected)",
        "max_batch_size": options.max_batch_size,
    }
    if network.fixed_batch is not None:
        recorded["fixed_batch_made_dynamic"] = network.fixed_batch
    card = ModelCard(
        name=options.name,
        resize=decided.resize,
        crop=decided.size,
        classes=len(labels),
        input=INPUT_NAME,
        output=OUTPUT_NAME,
        source={**(source or {"file": onnx_path.name}), "options": recorded},
    )
    return PreparedClassifier(model, card, labels, options.max_batch_size)


def install(
    prepared: PreparedClassifier,
    repository: Path,
    *,
    extra_files: Mapping[str, str] | None = None,
) -> Path:
    """Write the model's directory (staged, then renamed into place); returns it."""
    name = prepared.card.name
    with staged_model_dir(repository, name) as staging:
        path = onnx_file(staging)
        path.parent.mkdir(parents=True)
        onnx.save_model(prepared.model, str(path))
        (staging / CONFIG_FILE).write_text(prepared.config(), encoding="utf-8")
        write_card(staging, prepared.card, prepared.labels)
        for file, text in (extra_files or {}).items():
            (staging / file).write_text(text, encoding="utf-8")
    return model_dir(repository, name)


def import_classifier(
    onnx_path: Path,
    labels_path: Path,
    options: ImportOptions,
    repository: Path,
    *,
    force: bool = False,
    progress: Progress = _quiet,
) -> Path:
    """The ``add`` command: refuse an existing model unless ``force``, prepare, install."""
    if model_dir(repository, options.name).exists() and not force:
        raise SettingError(
            "force",
            "model {model} exists in {repository}; {force} replaces it",
            model=options.name,
            repository=repository,
        )
    prepared = prepare(onnx_path, labels_path, options, progress=progress)
    written = install(prepared, repository)
    progress(f"wrote {written} ({', '.join(_written_files())})")
    return written


def _written_files() -> list[str]:
    return [str(onnx_file(Path())), CONFIG_FILE, LABELS_FILE, CARD_FILE]
