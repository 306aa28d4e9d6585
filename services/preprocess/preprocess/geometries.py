"""One decoding backend per output geometry, built the first time a request asks for it.

Each model behind middleman has its own input size (EfficientNet-Lite0 224, Lite2 260, a
user's model whatever it takes), so a request may name the geometry it wants in its parameters
``resize`` (shorter side) and ``crop`` (the square); without them it gets the configured one.
DALI bakes the geometry into its pipelines, so each geometry costs a set of pipelines: their
number is bounded (``max_geometries``). No gRPC here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from inferline.imaging.decode import Geometry
from preprocess.backends import BackendSettings, ImageBackend, VideoBackend

logger = logging.getLogger(__name__)

MAX_CROP = 1024  # a [64, 3, 1024, 1024] batch is 192 MiB: the most one request may make
Backends = tuple[ImageBackend, VideoBackend]
Create = Callable[[str, BackendSettings], Backends]


class TooManyGeometries(RuntimeError):
    """A new geometry was asked for while ``max_geometries`` are built already."""


def requested(parameters: Mapping[str, object], default: Geometry) -> Geometry:
    """The geometry a request's parameters name (each one it leaves out is the default's).

    Raises ValueError with a message for the caller when a value is not a sensible size.
    """
    values = {}
    for name in ("resize", "crop"):
        value = parameters.get(name, getattr(default, name))
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"parameter {name!r} must be an integer, got {value!r}")
        values[name] = value
    if not 0 < values["crop"] <= MAX_CROP:
        raise ValueError(f"crop must be between 1 and {MAX_CROP}, got {values['crop']}")
    if values["resize"] > 4 * MAX_CROP:
        raise ValueError(f"resize must be at most {4 * MAX_CROP}, got {values['resize']}")
    return Geometry(**values)  # raises ValueError when crop > resize


class Decoders:
    """The backends named ``name`` for each geometry asked for, at most ``limit`` of them."""

    def __init__(self, name: str, settings: BackendSettings, limit: int, create: Create) -> None:
        self.name, self.settings, self.limit, self._create = name, settings, limit, create
        self.default = settings.geometry
        self._built: dict[Geometry, Backends] = {}
        self._lock = asyncio.Lock()

    def build_default(self) -> Backends:
        """Build (and warm up) the configured geometry's backends; blocking."""
        backends = self._built[self.default] = self._create(self.name, self.settings)
        return backends

    async def get(self, geometry: Geometry) -> Backends:
        """The backends for ``geometry``; builds them on a worker thread the first time."""
        built = self._built.get(geometry)
        if built is not None:
            return built
        async with self._lock:  # one build at a time; a second caller finds it built
            built = self._built.get(geometry)
            if built is not None:
                return built
            if len(self._built) >= self.limit:
                have = ", ".join(f"{g.resize}/{g.crop}" for g in self._built)
                raise TooManyGeometries(
                    f"this preprocess decodes at most {self.limit} geometries (resize/crop: "
                    f"{have}) and {geometry.resize}/{geometry.crop} would be one more: raise "
                    "INFERLINE_PREPROCESS_MAX_GEOMETRIES or run a preprocess per model"
                )
            settings = replace(self.settings, geometry=geometry)
            built = await asyncio.to_thread(self._create, self.name, settings)
            logger.info(
                "built %s for shorter side %d, crop %d (%d geometries)",
                self.name, geometry.resize, geometry.crop, len(self._built) + 1,
            )  # fmt: skip
            self._built[geometry] = built
            return built

    def close(self) -> None:
        for images, _ in self._built.values():
            images.close()
