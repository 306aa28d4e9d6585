"""The sample set: built offline from wheel-bundled photos, decodable, idempotent."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from demo_client import samples
from demo_client.samples import SAMPLES, SamplesError, build_samples, image_files


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("samples")
    build_samples(dest)
    return dest


def test_builds_every_sample_and_they_decode(built: Path) -> None:
    files = image_files(built)
    assert [f.name for f in files] == sorted(s.name for s in SAMPLES)
    assert {f.suffix for f in files} == {".jpg", ".png"}
    for f in files:
        image = cv2.imdecode(np.fromfile(f, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
        assert image is not None, f
        assert image.ndim == 3 and image.shape[2] == 3, f
        assert min(image.shape[:2]) >= 64, f
    assert (built / "chelsea.jpg").read_bytes()[:2] == b"\xff\xd8"  # JPEG SOI
    assert (built / "chelsea.jpg").stat().st_mode & 0o777 == 0o644
    assert (built / "coins.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_is_idempotent_and_repairs_broken_files(built: Path) -> None:
    before = {f.name: f.stat().st_mtime_ns for f in image_files(built)}
    written: list[Path] = []
    paths = build_samples(built, written=written)
    assert written == []
    assert {p.name: p.stat().st_mtime_ns for p in paths} == before

    (built / "coffee.jpg").write_bytes(b"\xff\xd8 truncated")
    build_samples(built, written=written)
    assert written == [built / "coffee.jpg"]
    assert samples.is_complete(built / "coffee.jpg")
    assert not list(built.glob(".*.tmp"))


def test_main_prints_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subset = (SAMPLES[0],)
    dest = tmp_path / "s"
    written: list[Path] = []
    build_samples(dest, subset, written)
    assert written == [dest / SAMPLES[0].name]

    assert samples.main([str(tmp_path / "all")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'all' / 'chelsea.jpg'} (" in out
    assert out.splitlines()[-1].endswith(f"({len(SAMPLES)} written)")
    assert samples.main([str(tmp_path / "all")]) == 0
    again = capsys.readouterr().out.splitlines()
    assert len(again) == 1 and again[0].endswith("(0 written)")


def test_unwritable_destination_is_a_samples_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SamplesError, match="cannot build samples"):
        build_samples(blocker / "samples")
