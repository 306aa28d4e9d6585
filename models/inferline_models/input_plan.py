"""How pixels become the network's input: the import's plan, decided from the graph and options.

:func:`plan` checks the network's input and output against the options and decides the square's
size, the resize before the crop and the :class:`~inferline_models.wrapping.Preprocessing`
(layout, colour order, normalisation, dtype) - refusing what the decoders cannot feed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from onnx import TensorProto

from inferline_models.import_settings import (
    ImportOptions,
    Layout,
    ModelImportError,
    Normalisation,
    SettingError,
)
from inferline_models.onnx_graph import (
    Network,
    dims_of,
    show_dim,
    show_rank,
    show_tensor,
    type_name,
)
from inferline_models.wrapping import Preprocessing

INPUT_TYPES: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.UINT8: "uint8",
}
_OUTPUT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`plan` decided: the geometry and the preprocessing."""

    size: int
    resize: int
    pre: Preprocessing


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
    if dtype not in INPUT_TYPES:
        raise ModelImportError(
            f"{network.path}: unsupported input type {type_name(dtype)}: the import path accepts "
            f"{', '.join(INPUT_TYPES.values())}"
        )
    return dtype


def _spatial_dims(network: Network, layout: Layout) -> list[int | str | None]:
    """Height and width of a rank-4 input with 3 channels where ``layout`` puts them."""
    net_in = network.input
    dims = dims_of(net_in)
    if dims is None or len(dims) != 4:
        raise SettingError(
            "layout",
            "{path}: input {tensor} has the wrong rank ({rank}): the import path takes rank-4 "
            "images, [batch, 3, H, W] ({layout} NCHW) or [batch, H, W, 3] ({layout} NHWC)",
            path=network.path,
            tensor=show_tensor(net_in),
            rank=show_rank(dims),
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
            tensor=show_tensor(net_in),
            count=show_dim(channels),
            axis=channel_axis,
            given=layout,
        )
    return spatial


def _size(network: Network, spatial: Sequence[int | str | None], given: int | None) -> int:
    """The square's side: the graph's fixed height and width, or ``given`` where they are not."""
    path, tensor = network.path, show_tensor(network.input)
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
    out_dims = dims_of(net_out)
    if out_dims is None or len(out_dims) != 2:
        raise ModelImportError(
            f"{path}: output {show_tensor(net_out)} has the wrong rank ({show_rank(out_dims)}): "
            "the import path takes class scores of rank 2, [batch, classes]"
        )
    if isinstance(out_dims[1], int) and out_dims[1] != labels:
        raise ModelImportError(
            f"{path}: output {show_tensor(net_out)} has {out_dims[1]} classes but the labels file "
            f"has {labels} labels"
        )
    if net_out.type.tensor_type.elem_type not in _OUTPUT_TYPES:
        raise ModelImportError(
            f"{path}: output type {type_name(net_out.type.tensor_type.elem_type)} is not a "
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
            dtype=INPUT_TYPES[dtype],
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
