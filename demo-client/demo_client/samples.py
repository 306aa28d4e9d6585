"""A sample image set built from photos that ship inside PyPI wheels (no downloads).

Sources: scikit-image's ``skimage.data`` (only images bundled in the wheel, never the
ones it fetches with pooch) and matplotlib's sample data. Both are imported lazily:
they are the ``samples`` extra, not the client's own dependencies (its image carries the set
this module built, not them).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)

DEFAULT_DEST = Path(".run/samples")
JPEG_QUALITY = 90
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})

Image = npt.NDArray[np.uint8]


class SamplesError(Exception):
    """The sample set cannot be built (a missing package, an unwritable directory)."""


@dataclass(frozen=True)
class Sample:
    """One image of the set: a file name (its suffix picks the format) and a loader."""

    name: str
    load: Callable[[], Image]


def _skimage(name: str) -> Callable[[], Image]:
    def load() -> Image:
        import skimage.data

        image = getattr(skimage.data, name)()
        if isinstance(image, tuple):  # stereo_motorcycle: (left, right, disparity)
            image = image[0]
        return np.asarray(image, dtype=np.uint8)

    return load


def _matplotlib(filename: str) -> Callable[[], Image]:
    def load() -> Image:
        from matplotlib import cbook

        path = Path(str(cbook.get_sample_data(filename, asfileobj=False)))
        data = np.fromfile(path, dtype=np.uint8)
        bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
        if bgr is None:
            raise ValueError(f"matplotlib sample {filename!r} does not decode")
        return np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)

    return load


# Photos (mostly of ImageNet-ish things) that load offline from the installed wheels.
SAMPLES: tuple[Sample, ...] = (
    Sample("chelsea.jpg", _skimage("chelsea")),  # a tabby cat
    Sample("coffee.jpg", _skimage("coffee")),  # a cup of coffee
    Sample("astronaut.jpg", _skimage("astronaut")),
    Sample("rocket.jpg", _skimage("rocket")),
    Sample("motorcycle.jpg", _skimage("stereo_motorcycle")),
    Sample("camera.jpg", _skimage("camera")),  # the cameraman, greyscale
    Sample("clock.jpg", _skimage("clock")),
    Sample("hubble_deep_field.jpg", _skimage("hubble_deep_field")),
    Sample("retina.jpg", _skimage("retina")),
    Sample("moon.jpg", _skimage("moon")),
    Sample("brick.jpg", _skimage("brick")),
    Sample("grace_hopper.jpg", _matplotlib("grace_hopper.jpg")),
    Sample("coins.png", _skimage("coins")),
    Sample("colorwheel.png", _skimage("colorwheel")),
)


def encode(image: Image, suffix: str) -> bytes:
    """Encode an RGB/greyscale/RGBA uint8 image as ``suffix`` (``.jpg`` or ``.png``), 3 channels."""
    if image.ndim == 2:
        bgr = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    elif image.shape[2] == 4:
        bgr = cv2.cvtColor(image, cv2.COLOR_RGBA2BGR)
    else:
        bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if suffix in (".jpg", ".jpeg") else []
    ok, buf = cv2.imencode(suffix, bgr, params)
    if not ok:
        raise ValueError(f"cannot encode image as {suffix}")
    return bytes(buf)


def is_complete(path: Path) -> bool:
    """True if ``path`` exists and decodes as an image."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError:
        return False
    return data.size > 0 and cv2.imdecode(data, cv2.IMREAD_UNCHANGED) is not None


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        Path(tmp).chmod(0o644)  # mkstemp makes it 0600; the set is meant to be shared
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_samples(
    dest: Path = DEFAULT_DEST,
    samples: tuple[Sample, ...] = SAMPLES,
    written: list[Path] | None = None,
) -> list[Path]:
    """Write the sample set into ``dest``; return every sample's path.

    Idempotent: a file that is already there and decodes is kept. Files are written
    atomically, so an interrupted run never leaves a truncated image behind. Paths that
    were actually (re)written are appended to ``written`` when given. Raises
    ``SamplesError`` with a message a user can act on.
    """
    paths: list[Path] = []
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for sample in samples:
            path = dest / sample.name
            paths.append(path)
            if is_complete(path):
                logger.debug("keeping %s", path)
                continue
            _write_atomic(path, encode(sample.load(), path.suffix.lower()))
            logger.debug("wrote %s", path)
            if written is not None:
                written.append(path)
    except ImportError as exc:
        raise SamplesError(
            f"{exc.name or exc} is not installed: the sample photos come from scikit-image "
            "and matplotlib (pip install 'inferline-demo-client[samples]'), or pass --images "
            "DIR with photos of your own"
        ) from exc
    except (OSError, ValueError) as exc:
        raise SamplesError(f"cannot build samples in {dest}: {exc}") from exc
    return paths


def image_files(directory: Path) -> list[Path]:
    """The image files directly inside ``directory`` (by suffix), sorted by name."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m demo_client.samples [DEST]``: build the set and say what was written."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print("usage: python -m demo_client.samples [DEST]  (default: .run/samples)")
        return 0 if args and args[0] in ("-h", "--help") else 2
    dest = Path(args[0]) if args else DEFAULT_DEST
    written: list[Path] = []
    try:
        paths = build_samples(dest, written=written)
    except SamplesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    print(f"{len(paths)} sample images in {dest} ({len(written)} written)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
