"""The peak memory of decoding images, measured in a process of its own.

``python -m inferline_testing.peak_memory FILE...`` decodes each file with
:func:`inferline.imaging.decode.decode_image` (the default geometry and limits) and prints one
JSON object per line: the
file, what came out (a shape, or the refusal's kind) and ``peak_bytes``, how far the process's
peak resident memory (VmHWM) rose above its resident memory just before that decode. The peak is
reset before each file (``/proc/self/clear_refs``), so each figure is that decode's alone and
counts native memory (libjpeg's, OpenCV's), which tracemalloc does not see. Linux only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from inferline.imaging.decode import DecodeError, Geometry, Limits, decode_image
from inferline_testing.procfs import process_usage


def measure(data: bytes, geometry: Geometry, limits: Limits) -> dict[str, object]:
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) back to the current RSS
    before = process_usage(os.getpid()).rss_bytes
    try:
        result = str(decode_image(data, geometry, limits).shape)
    except DecodeError as exc:
        result = exc.kind
    return {"result": result, "peak_bytes": process_usage(os.getpid()).peak_rss_bytes - before}


def main(files: list[str]) -> None:
    Image.init()  # Pillow's format plugins, and OpenCV's first decode: loaded before measuring
    decode_image(
        cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes(), Geometry(), Limits()
    )
    for name in files:
        data = Path(name).read_bytes()
        sys.stdout.write(json.dumps({"file": name, **measure(data, Geometry(), Limits())}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
