"""Import an ONNX image classifier into the Triton model repository, behind the wire contract.

``python -m inferline_models add --onnx FILE --labels FILE --name NAME [...]`` lands here, in
four steps; only the last writes. Each refuses what it cannot serve with a
:class:`ModelImportError` that names the file and what to do; one about a setting is a
:class:`SettingError`, which names settings as this module's API does (``std``,
``output_kind``) and lets a caller name them its own way (the command line: its flags):

1. :func:`load_network` reads the file and finds its one image input and one output;
2. :func:`plan` decides, from the graph and the options, how pixels become the network's input
   (size, layout, colour order, normalisation, dtype) - refusing what the decoders cannot feed;
3. :func:`prepare` wraps the network (:mod:`inferline_models.wrapping`), decides logits or
   probabilities if asked to, checks the result with ``onnx.checker`` and runs it once in ONNX
   Runtime (CPU) on a batch of 2;
4. :func:`install` writes ``1/model.onnx``, ``config.pbtxt``, ``labels.txt`` and
   ``inferline.json`` into a staging directory and renames it into place.

Nothing is written before every check passed. The built-in models go the same way
(:mod:`inferline_models.export`), so the path ``make model`` takes is the one users take.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from google.protobuf.message import DecodeError
from onnx import TensorProto
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from inferline.catalog import CARD_FILE, LABELS_FILE, ModelCard, write_card
from inferline_models.repository import (
    CONFIG_FILE,
    INPUT_NAME,
    MAX_BATCH_SIZE,
    OUTPUT_NAME,
    model_dir,
    onnx_file,
    render_config,
    staged_model_dir,
)
from inferline_models.wrapping import BATCH, Preprocessing, default_opset, wrap_classifier

Progress = Callable[[str], None]
Channels = Literal["RGB", "BGR"]
Layout = Literal["NCHW", "NHWC"]
OutputKind = Literal["auto", "probabilities", "logits"]

MIN_OPSET = 7  # per-channel Mul/Add broadcasting; Cast's numeric "to"
SUM_TOLERANCE = 1e-3  # |row sum - 1| of a probabilities output
_INPUT_TYPES: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.UINT8: "uint8",
}
_OUTPUT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ORT_ERRORS: tuple[type[Exception], ...] = (
    ort_errors.Fail,
    ort_errors.InvalidArgument,
    ort_errors.InvalidGraph,
    ort_errors.NotImplemented,
    ort_errors.RuntimeException,
    RuntimeError,
    ValueError,
)


class ModelImportError(ValueError):
    """A model the import path refuses; the message names the file and what to do."""

    def render(self, names: Mapping[str, str]) -> str:
        """The message, each setting it names called as ``names`` calls it."""
        del names  # this message names no setting
        return str(self)


class SettingError(ModelImportError):
    """A refusal about a setting (one of :data:`SETTINGS`): ``setting`` is the one to change.

    ``why`` is a :meth:`str.format` template: a field that is a setting names it, ``str()`` as the
    setting's own name (``std``, ``output_kind``), :meth:`render` as a caller calls it; any other
    field is a key of ``values``.
    """

    def __init__(self, setting: str, why: str, **values: object) -> None:
        if setting not in SETTINGS or values.keys() & SETTINGS:
            raise TypeError(f"not a setting, or a value named as one: {setting}, {set(values)}")
        self.setting, self.why, self.values = setting, why, values
        super().__init__(self.render({}))

    def render(self, names: Mapping[str, str]) -> str:
        named = {setting: names.get(setting, setting) for setting in SETTINGS}
        return self.why.format_map({**named, **self.values})


def _quiet(_: str) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class Normalisation:
    """``y = x * scale + offset`` per R, G, B channel on 0-255 pixels, and how it was asked for."""

    scale: tuple[float, float, float]
    offset: tuple[float, float, float]
    given: Mapping[str, list[float]]  # the options as given, for the model card

    @classmethod
    def mean_std(cls, mean: Sequence[float], std: Sequence[float]) -> Normalisation:
        """torchvision's convention: ``y = (x / 255 - mean) / std``."""
        m, s = _triple("mean", mean), _triple("std", std)
        if min(s) <= 0:
            raise SettingError("std", "{std} must be positive, got {got}", got=_show(s))
        return cls(
            scale=_as_triple(1.0 / (255.0 * v) for v in s),
            offset=_as_triple(-a / b for a, b in zip(m, s, strict=True)),
            given={"mean": list(m), "std": list(s)},
        )

    @classmethod
    def affine(cls, scale: Sequence[float], offset: Sequence[float]) -> Normalisation:
        """Pixel units: ``y = x * scale + offset``."""
        s, o = _triple("scale", scale), _triple("offset", offset)
        return cls(scale=s, offset=o, given={"scale": list(s), "offset": list(o)})


def normalisation(
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    scale: Sequence[float] | None = None,
    offset: Sequence[float] | None = None,
) -> Normalisation | None:
    """The one normalisation the options ask for (``None``: none given)."""
    by_stats = mean is not None or std is not None
    by_affine = scale is not None or offset is not None
    if by_stats and by_affine:
        raise SettingError(
            "normalisation",
            "{mean}/{std} and {scale}/{offset} both given: pass one normalisation, not both",
        )
    if by_stats:
        if mean is None or std is None:
            raise SettingError(
                "std" if std is None else "mean", "{mean} and {std} go together: pass both"
            )
        return Normalisation.mean_std(mean, std)
    if by_affine:
        return Normalisation.affine(scale or (1.0,), offset or (0.0,))
    return None


def parse_floats(text: str) -> tuple[float, ...]:
    """``"0.5"``, ``"0.485,0.456,0.406"`` or fractions (``"1/128"``, ``"-127/128"``)."""
    try:
        values = tuple(float(Fraction(v.strip())) for v in text.split(","))
    except (ValueError, ZeroDivisionError):
        raise ModelImportError(f"not a number or comma-separated numbers: {text!r}") from None
    return values


def parse_size(text: str) -> int:
    """``"224"`` or ``"224x224"``; a non-square size is refused (the decoders crop squares)."""
    parts = text.lower().split("x")
    try:
        sides = [int(p) for p in parts]
    except ValueError:
        raise SettingError(
            "size", "{size} {text!r}: expected N or NxN, e.g. 224", text=text
        ) from None
    if len(sides) not in (1, 2) or min(sides) < 1:
        raise SettingError(
            "size", "{size} {text!r}: expected N or NxN with N >= 1, e.g. 224", text=text
        )
    if len(set(sides)) != 1:
        raise SettingError(
            "size",
            "{size} {text}: only square inputs are supported (inferline's decoders centre-crop "
            "a square); export the model for a square input",
            text=text,
        )
    return sides[0]


@dataclasses.dataclass(frozen=True)
class ImportOptions:
    """The ``add`` command's options; ``None`` means "from the graph" or "the default"."""

    name: str
    size: int | None = None
    resize: int | None = None
    normalisation: Normalisation | None = None
    channels: Channels = "RGB"
    layout: Layout = "NCHW"
    output_kind: OutputKind = "auto"
    max_batch_size: int = MAX_BATCH_SIZE

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.max_batch_size < 1:
            raise SettingError(
                "max_batch_size",
                "{max_batch_size} must be >= 1, got {got}",
                got=self.max_batch_size,
            )


# What a SettingError names: the fields of ImportOptions, the parts normalisation() takes, and
# import_classifier's force.
SETTINGS = frozenset(
    {f.name for f in dataclasses.fields(ImportOptions)}
    | {"mean", "std", "scale", "offset", "force"}
)


@dataclasses.dataclass(frozen=True)
class Network:
    """The user's graph, read and checked: its one input and one output."""

    path: Path
    model: onnx.ModelProto
    input: onnx.ValueInfoProto
    output: onnx.ValueInfoProto
    fixed_batch: int | None  # the input's batch size when the graph fixes one
    description: str  # its input and output as the file has them, for a progress line


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`plan` decided: the geometry and the preprocessing."""

    size: int
    resize: int
    pre: Preprocessing


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


def load_network(path: Path) -> Network:
    """Read ``path``; its graph must have exactly one input and one output."""
    try:
        model = onnx.load(str(path))
    except DecodeError as exc:
        raise ModelImportError(f"{path} is not an ONNX model: {exc}") from exc
    except OSError as exc:
        raise ModelImportError(f"cannot read {path}: {exc}") from exc
    if not model.ir_version or not model.graph.node:
        raise ModelImportError(f"{path} is not an ONNX model: no IR version or no graph nodes")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelImportError(f"{path} is not a valid ONNX model: {exc}") from exc
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise ModelImportError(
            f"{path} uses ONNX opset {opset}; the import path needs opset >= {MIN_OPSET}: "
            "re-export it with a newer opset"
        )
    model = _without_initializer_inputs(model)
    inputs, outputs = list(model.graph.input), list(model.graph.output)
    if len(inputs) != 1:
        raise ModelImportError(
            f"{path} has {len(inputs)} inputs ({_names(inputs)}); the import path takes "
            "exactly one image input"
        )
    if len(outputs) != 1:
        raise ModelImportError(
            f"{path} has {len(outputs)} outputs ({_names(outputs)}); the import path takes "
            "exactly one output of class scores [batch, classes]"
        )
    description = (
        f"input {_tensor(inputs[0])}, output {_tensor(outputs[0])}; "
        f"opset {opset}, IR version {model.ir_version}"
    )
    dims = _dims(inputs[0])
    fixed_batch = dims[0] if dims and isinstance(dims[0], int) else None
    return Network(path, model, inputs[0], outputs[0], fixed_batch, description)


def plan(network: Network, options: ImportOptions, labels: int) -> Plan:
    """Check the input and output against the options; decide the preprocessing."""
    dtype = _input_type(network)
    size = _size(network, _spatial_dims(network, options.layout), options.size)
    resize = _resize(size, options.resize)
    _check_output(network, labels)
    _check_normalisation(network, dtype, options.normalisation)
    return Plan(size=size, resize=resize, pre=_preprocessing(size, dtype, options))


def _input_type(network: Network) -> int:
    """The input's element type, one the wrapping can cast pixels to."""
    dtype = network.input.type.tensor_type.elem_type
    if dtype not in _INPUT_TYPES:
        raise ModelImportError(
            f"{network.path}: unsupported input type {_type_name(dtype)}: the import path accepts "
            f"{', '.join(_INPUT_TYPES.values())}"
        )
    return dtype


def _spatial_dims(network: Network, layout: Layout) -> list[int | str | None]:
    """Height and width of a rank-4 input with 3 channels where ``layout`` puts them."""
    net_in = network.input
    dims = _dims(net_in)
    if dims is None or len(dims) != 4:
        raise SettingError(
            "layout",
            "{path}: input {tensor} has the wrong rank ({rank}): the import path takes rank-4 "
            "images, [batch, 3, H, W] ({layout} NCHW) or [batch, H, W, 3] ({layout} NHWC)",
            path=network.path,
            tensor=_tensor(net_in),
            rank=_rank(dims),
        )
    channel_axis, spatial = (3, dims[1:3]) if layout == "NHWC" else (1, dims[2:4])
    channels = dims[channel_axis]
    if channels == 3:
        return spatial
    other: Layout = "NHWC" if layout == "NCHW" else "NCHW"
    other_axis = 3 if other == "NHWC" else 1
    hint = f"; its axis {other_axis} is 3: pass {{layout}} {other}" if dims[other_axis] == 3 else ""
    # A dynamic channel axis is fed 3 channels, unless the graph looks like the other layout.
    if isinstance(channels, int) or hint:
        raise SettingError(
            "layout",
            "{path}: input {tensor} has {count} channels at axis {axis} ({given}), not 3" + hint,
            path=network.path,
            tensor=_tensor(net_in),
            count=_show_dim(channels),
            axis=channel_axis,
            given=layout,
        )
    return spatial


def _resize(size: int, given: int | None) -> int:
    """The shorter side to resize to: ``given``, or ImageNet's 256/224 of the crop."""
    resize = round(size * 256 / 224) if given is None else given
    if resize < size:
        raise SettingError(
            "resize",
            "{resize} {resize_to} is smaller than the input size {size_is}",
            resize_to=resize,
            size_is=size,
        )
    return resize


def _check_output(network: Network, labels: int) -> None:
    """Class scores: rank 2, floats, as many classes as labels where the graph fixes them."""
    path, net_out = network.path, network.output
    out_dims = _dims(net_out)
    if out_dims is None or len(out_dims) != 2:
        raise ModelImportError(
            f"{path}: output {_tensor(net_out)} has the wrong rank ({_rank(out_dims)}): the "
            "import path takes class scores of rank 2, [batch, classes]"
        )
    if isinstance(out_dims[1], int) and out_dims[1] != labels:
        raise ModelImportError(
            f"{path}: output {_tensor(net_out)} has {out_dims[1]} classes but the labels file "
            f"has {labels} labels"
        )
    if net_out.type.tensor_type.elem_type not in _OUTPUT_TYPES:
        raise ModelImportError(
            f"{path}: output type {_type_name(net_out.type.tensor_type.elem_type)} is not a "
            "float type: the import path takes float32, float16 or float64 scores"
        )


def _check_normalisation(network: Network, dtype: int, norm: Normalisation | None) -> None:
    """uint8 pixels go in as they are; float inputs need to be told how they are normalised."""
    if dtype == TensorProto.UINT8 and norm is not None:
        raise SettingError(
            "normalisation",
            "{path} takes uint8 pixels, which cannot be normalised on the way in: drop "
            "{mean}/{std} and {scale}/{offset}",
            path=network.path,
        )
    if dtype != TensorProto.UINT8 and norm is None:
        raise SettingError(
            "normalisation",
            "{path} takes {dtype} input: say how 0-255 pixels are normalised, {mean} R,G,B "
            "{std} R,G,B (torchvision: (x/255 - mean)/std) or {scale} S {offset} O (x*S + O); "
            "{scale} 1 {offset} 0 keeps raw 0-255 values",
            path=network.path,
            dtype=_INPUT_TYPES[dtype],
        )


def _preprocessing(size: int, dtype: int, options: ImportOptions) -> Preprocessing:
    """What the wrapping does to uint8 RGB NCHW pixels before the network sees them."""
    norm = options.normalisation
    return Preprocessing(
        size=size,
        scale=None if norm is None else norm.scale,
        offset=None if norm is None else norm.offset,
        bgr=options.channels == "BGR",
        nhwc=options.layout == "NHWC",
        dtype=dtype,
    )


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
    _make_batch_dynamic(network.model)
    if network.fixed_batch is not None:
        progress(f"batch axis fixed at {network.fixed_batch}: made dynamic")
    steps = ", ".join(decided.pre.steps()) or "as they are"
    progress(f"wrapping: uint8 RGB NCHW {decided.size}x{decided.size} pixels -> {steps} -> network")

    kind = options.output_kind
    if kind == "auto":
        kind = _detect_output_kind(network, decided.pre)
    how = "detected" if options.output_kind == "auto" else "as given"
    progress(f"output: {kind} ({how}){': appending a Softmax' if kind == 'logits' else ''}")
    model = wrap_classifier(network.model, decided.pre, softmax=kind == "logits")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelImportError(f"{onnx_path}: the wrapped model fails onnx.checker: {exc}") from exc
    _check_runs(network, model, len(labels))
    progress(
        f"checked: onnx.checker; ONNX Runtime (CPU) batch of 2 -> [2, {len(labels)}] "
        "finite probabilities, rows sum to 1"
    )
    recorded = {
        "size": decided.size,
        "resize": decided.resize,
        "input_dtype": _INPUT_TYPES[decided.pre.dtype],
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


def check_name(name: str) -> None:
    """A Triton model name that is also a plain directory name, and not the simulated GPU's."""
    if not _NAME.fullmatch(name):
        raise SettingError(
            "name",
            "model name {given!r}: use letters, digits, '_', '.' and '-', starting with a letter "
            "or digit",
            given=name,
        )
    if "simulated" in name:
        raise SettingError(
            "name",
            "model name {given!r}: names containing 'simulated' are kept for the simulated GPU",
            given=name,
        )


def _written_files() -> list[str]:
    return [str(onnx_file(Path())), CONFIG_FILE, LABELS_FILE, CARD_FILE]


def _detect_output_kind(network: Network, pre: Preprocessing) -> Literal["probabilities", "logits"]:
    """Probabilities when every row of a few random images is non-negative and sums to 1."""
    bare = wrap_classifier(network.model, pre, softmax=False)
    scores = _run(network, bare, _pixels(3, pre.size, seed=1))
    sums = scores.sum(axis=1)
    probabilities = bool(
        np.all(np.isfinite(scores))
        and np.all(scores >= 0)
        and np.all(np.abs(sums - 1) <= SUM_TOLERANCE)
    )
    return "probabilities" if probabilities else "logits"


def _check_runs(network: Network, model: onnx.ModelProto, labels: int) -> None:
    size = _size_of(model)
    probs = _run(network, model, _pixels(2, size, seed=0))
    if probs.ndim != 2 or probs.shape[0] != 2:
        raise ModelImportError(
            f"{network.path}: the wrapped model answers shape {list(probs.shape)} for a batch of "
            f"2; expected [2, {labels}]"
        )
    if probs.shape[1] != labels:
        raise ModelImportError(
            f"{network.path}: the model outputs {probs.shape[1]} classes but the labels file has "
            f"{labels} labels"
        )
    if not np.all(np.isfinite(probs)):
        raise ModelImportError(f"{network.path}: the model answers NaN or infinite scores")
    worst = float(np.max(np.abs(probs.sum(axis=1) - 1)))
    if worst > SUM_TOLERANCE or np.any(probs < 0):
        raise SettingError(
            "output_kind",
            "{path}: {output_kind} probabilities, but rows are not probabilities (|sum - 1| up "
            "to {worst:.3g}, min {least:.3g}): pass {output_kind} logits (or auto)",
            path=network.path,
            worst=worst,
            least=float(probs.min()),
        )


def _run(network: Network, model: onnx.ModelProto, pixels: npt.NDArray[np.uint8]) -> Any:
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failure is reported below, in words of our own
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        (scores,) = session.run([OUTPUT_NAME], {INPUT_NAME: pixels})
    except _ORT_ERRORS as exc:
        if network.fixed_batch is not None:
            raise ModelImportError(
                f"{network.path} was exported with a fixed batch size of {network.fixed_batch} "
                f"and does not run with a batch of {len(pixels)} once that axis is made dynamic "
                f"({_first_line(exc)}): export it with a dynamic batch axis, e.g. "
                "torch.onnx.export(..., dynamic_axes={'input': {0: 'batch'}, 'output': "
                "{0: 'batch'}}), or tf2onnx with a None batch dimension"
            ) from exc
        raise ModelImportError(
            f"{network.path}: ONNX Runtime cannot run the wrapped model on a batch of "
            f"{len(pixels)}: {_first_line(exc)}"
        ) from exc
    return np.asarray(scores, dtype=np.float32)


def _pixels(batch: int, size: int, seed: int) -> npt.NDArray[np.uint8]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(batch, 3, size, size), dtype=np.uint8)


def _size_of(model: onnx.ModelProto) -> int:
    (graph_input,) = model.graph.input
    return int(graph_input.type.tensor_type.shape.dim[2].dim_value)


def _size(network: Network, spatial: Sequence[int | str | None], given: int | None) -> int:
    """The square's side: the graph's fixed height and width, or ``given`` where they are not."""
    path, tensor = network.path, _tensor(network.input)
    height, width = spatial
    if isinstance(height, int) and isinstance(width, int):
        if height != width:
            raise ModelImportError(
                f"{path}: input {tensor} is {height}x{width}: only square inputs are "
                "supported (inferline's decoders centre-crop a square)"
            )
        if given is not None and given != height:
            raise SettingError(
                "size",
                "{path}: {size} {given} but input {tensor} is fixed at {side}x{side}: drop "
                "{size} or pass {size} {side}",
                path=path,
                given=given,
                tensor=tensor,
                side=height,
            )
        return height
    if given is None:
        raise SettingError(
            "size",
            "{path}: input '{input}' has dynamic height/width; pass {size}",
            path=path,
            input=network.input.name,
        )
    for side in (height, width):
        if isinstance(side, int) and side != given:
            raise SettingError(
                "size",
                "{path}: {size} {given} but input {tensor} fixes a side at {side}",
                path=path,
                given=given,
                tensor=tensor,
                side=side,
            )
    return given


def _without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Old exporters list weights as graph inputs too; they are not inputs to feed."""
    weights = {i.name for i in model.graph.initializer}
    if not any(i.name in weights for i in model.graph.input):
        return model
    if model.ir_version < 4:  # from IR 4 an initializer need not be an input
        model.ir_version = 4
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def _make_batch_dynamic(model: onnx.ModelProto) -> None:
    """Turn a fixed batch axis of the input and output into ``batch``.

    Shapes recorded for intermediate values would still say the old batch: they are dropped
    (ONNX Runtime infers them again). Whether the graph itself assumes the old batch (a
    hard-coded Reshape) only a run with another batch size tells.
    """
    changed = False
    for value in (*model.graph.input, *model.graph.output):
        shape = value.type.tensor_type.shape
        if shape.dim and shape.dim[0].HasField("dim_value"):
            shape.dim[0].dim_param = BATCH  # clears dim_value (a oneof)
            changed = True
    if changed:
        del model.graph.value_info[:]


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """The dims (int, a symbolic name, or None for unknown); None when the rank is unknown."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [
        int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
        for d in tensor.shape.dim
    ]


def _tensor(value: onnx.ValueInfoProto) -> str:
    dims = _dims(value)
    shape = "?" if dims is None else "[" + ", ".join(_show_dim(d) for d in dims) + "]"
    return f"'{value.name}' {_type_name(value.type.tensor_type.elem_type)} {shape}"


def _show_dim(dim: int | str | None) -> str:
    return "?" if dim is None else str(dim)


def _rank(dims: Sequence[object] | None) -> str:
    return "unknown" if dims is None else str(len(dims))


def _type_name(elem_type: int) -> str:
    return str(TensorProto.DataType.Name(elem_type))


def _names(values: Sequence[onnx.ValueInfoProto]) -> str:
    return ", ".join(f"'{v.name}'" for v in values)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _triple(setting: str, values: Sequence[float]) -> tuple[float, float, float]:
    """One value for all three channels, or one each (R, G, B)."""
    if len(values) == 1:
        return (float(values[0]),) * 3
    if len(values) == 3:
        return _as_triple(values)
    raise SettingError(
        setting,
        f"{{{setting}}} takes 1 or 3 comma-separated values, got {{got}}",
        got=len(values),
    )


def _as_triple(values: Any) -> tuple[float, float, float]:
    a, b, c = (float(v) for v in values)
    return (a, b, c)


def _show(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)
