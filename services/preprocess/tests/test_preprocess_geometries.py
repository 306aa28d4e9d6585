"""The decoders of each geometry: built once on first use, bounded in number. No servers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from inferline.imaging.decode import Geometry, Limits
from inferline.imaging.video import VideoLimits
from preprocess.backends import BackendSettings
from preprocess.geometries import Backends, Decoders, TooManyGeometries, requested

SETTINGS = BackendSettings(Geometry(256, 224), Limits(), VideoLimits(1, 1, 1, 1.0), 1, 8)


@dataclass
class Recorder:
    """A ``create`` that records which geometries it built (opencv backends are cheap)."""

    built: list[Geometry] = field(default_factory=list)

    def __call__(self, name: str, settings: BackendSettings) -> Backends:
        from preprocess.choice import create

        self.built.append(settings.geometry)
        return create(name, settings)


async def test_each_geometry_is_built_once_however_many_ask_at_once() -> None:
    recorder = Recorder()
    decoders = Decoders("opencv", SETTINGS, 3, recorder)
    decoders.build_default()
    lite2 = Geometry(292, 260)
    got = await asyncio.gather(*(decoders.get(lite2) for _ in range(5)))
    assert recorder.built == [Geometry(256, 224), lite2]
    assert all(g is got[0] for g in got)
    assert await decoders.get(Geometry(256, 224)) is not got[0]
    decoders.close()


async def test_one_geometry_past_the_limit_is_refused_naming_the_setting() -> None:
    decoders = Decoders("opencv", SETTINGS, 2, Recorder())
    decoders.build_default()
    await decoders.get(Geometry(292, 260))
    with pytest.raises(TooManyGeometries) as caught:
        await decoders.get(Geometry(128, 112))
    assert str(caught.value) == (
        "this preprocess decodes at most 2 geometries (resize/crop: 256/224, 292/260) and "
        "128/112 would be one more: raise INFERLINE_PREPROCESS_MAX_GEOMETRIES or run a "
        "preprocess per model"
    )
    assert await decoders.get(Geometry(292, 260))  # what is built keeps serving
    decoders.close()


def test_a_request_without_parameters_gets_the_default() -> None:
    default = Geometry(256, 224)
    assert requested({}, default) == default
    assert requested({"crop": 200}, default) == Geometry(256, 200)
    assert requested({"resize": 292, "crop": 260, "fps": 1.0}, default) == Geometry(292, 260)
    with pytest.raises(ValueError, match="'resize' must be an integer, got True"):
        requested({"resize": True}, default)
