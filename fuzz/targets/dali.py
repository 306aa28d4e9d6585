"""dali: encoded image bytes -> tensor through preprocess's DALI backend on the CPU (``dali-cpu``;
``dali-gpu`` runs the same code with nvJPEG, which needs a GPU): the header probe, then DALI's
decoder, GIF through the CPU core, and a failed batch retried image by image.

Each input is one image of a batch of one; as in the service, a bad image is an error in its
own slot, never an exception out of the backend.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np
from PIL import Image

from fuzz.targets import decode as cpu_target
from inferline.imaging.decode import DecodeError, Geometry, Limits
from inferline.imaging.video import VideoLimits
from preprocess.backends import BackendSettings, Decoded
from preprocess.dali import DaliImageBackend

GEOMETRY = Geometry()
SETTINGS = BackendSettings(GEOMETRY, Limits(), VideoLimits(), workers=1, max_batch=1)


def setup() -> Callable[[bytes], None]:
    cv2.setNumThreads(1)
    Image.init()
    backend = DaliImageBackend(SETTINGS, gpu=False)

    def one_input(data: bytes) -> None:
        out = Decoded.empty(1, GEOMETRY)
        backend.decode_part(out, [data], 0, 1)
        (error,) = out.errors
        assert error is None or isinstance(error, DecodeError), repr(error)
        assert out.tensors.shape == (1, 3, GEOMETRY.crop, GEOMETRY.crop)
        assert out.tensors.dtype == np.uint8

    return one_input


def seeds() -> dict[str, bytes]:
    return cpu_target.seeds()
