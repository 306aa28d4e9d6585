"""What the import is told - its settings - and how it refuses.

:class:`ImportOptions` holds the ``add`` command's options, :func:`normalisation`,
:func:`parse_floats` and :func:`parse_size` read them from text, and :data:`SETTINGS` names them.
Every step of the import refuses with a :class:`ModelImportError` that names the file and what to
do; one about a setting is a :class:`SettingError`, which names settings as this API does
(``std``, ``output_kind``) and lets a caller name them its own way (the command line: its flags).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

from inferline_models.repository import MAX_BATCH_SIZE

Channels = Literal["RGB", "BGR"]
Layout = Literal["NCHW", "NHWC"]
OutputKind = Literal["auto", "probabilities", "logits"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


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
