"""The import's settings: read from the `add` command's text, named in the importer's own terms,
and said back to the user as the flags they typed."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferline.catalog import read_card
from inferline_models.__main__ import ADD_FLAGS, main
from inferline_models.import_settings import (
    SETTINGS,
    ImportOptions,
    ModelImportError,
    SettingError,
    normalisation,
    parse_floats,
    parse_size,
)
from inferline_models.repository import model_dir
from inferline_testing.networks import MEAN, STD, tiny_convnet

from .import_support import labels_file, save

FLAG = re.compile(r"--[a-z][a-z-]*")


def test_option_parsing() -> None:
    assert parse_floats("1/128") == (1 / 128,)
    assert parse_floats("-127/128, 0.5,1") == (-127 / 128, 0.5, 1.0)
    assert parse_size("224") == parse_size("224x224") == 224
    norm = normalisation(mean=MEAN, std=STD)
    assert norm is not None
    np.testing.assert_allclose(norm.scale, [1 / (255 * s) for s in STD])
    np.testing.assert_allclose(norm.offset, [-m / s for m, s in zip(MEAN, STD, strict=True)])
    assert normalisation() is None


def test_cli_reads_negative_values_and_refuses_with_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = save(tiny_convnet(), tmp_path / "t.onnx")
    labels = labels_file(tmp_path, 5)
    base = ["add", "--onnx", str(original), "--labels", str(labels), "--name", "t",
            "--repository", str(tmp_path / "repo")]  # fmt: skip
    assert main([*base, "--scale", "1/128", "--offset", "-127/128"]) == 0
    assert read_card(model_dir(tmp_path / "repo", "t"))[0].source["options"]["normalisation"] == {
        "scale": [1 / 128] * 3,
        "offset": [-127 / 128] * 3,
    }
    capsys.readouterr()
    assert main([*base, "--scale", "1"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: model t exists in {tmp_path / 'repo'}; --force replaces it\n"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"mean": MEAN, "std": STD, "scale": (1.0,), "offset": (0.0,)},
            "--mean/--std and --scale/--offset both given: pass one normalisation, not both",
        ),
        ({"mean": MEAN}, "--mean and --std go together: pass both"),
        ({"mean": MEAN, "std": (0.2, 0.2)}, "--std takes 1 or 3 comma-separated values, got 2"),
    ],
)
def test_refuses_bad_normalisation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelImportError) as caught:
        normalisation(**kwargs)
    assert caught.value.render(ADD_FLAGS) == message


def test_refuses_non_square_size() -> None:
    with pytest.raises(ModelImportError) as caught:
        parse_size("224x256")
    assert caught.value.render(ADD_FLAGS) == (
        "--size 224x256: only square inputs are supported (inferline's decoders centre-crop a "
        "square); export the model for a square input"
    )


# The importer's words for a setting are its API's: what `add` says instead is the CLI's table.
CORE_TERMS: dict[str, tuple[Callable[[], object], str, str]] = {
    "std_length": (
        lambda: normalisation(mean=MEAN, std=(0.2, 0.2)),
        "std",
        "std takes 1 or 3 comma-separated values, got 2",
    ),
    "std_sign": (
        lambda: normalisation(mean=MEAN, std=(0.2, -0.2, 0.2)),
        "std",
        "std must be positive, got 0.2,-0.2,0.2",
    ),
    "mean_alone": (lambda: normalisation(mean=MEAN), "std", "mean and std go together: pass both"),
    "both_normalisations": (
        lambda: normalisation(mean=MEAN, std=STD, scale=(1.0,)),
        "normalisation",
        "mean/std and scale/offset both given: pass one normalisation, not both",
    ),
    "size_text": (lambda: parse_size("big"), "size", "size 'big': expected N or NxN, e.g. 224"),
    "max_batch_size": (
        lambda: ImportOptions(name="m", max_batch_size=0),
        "max_batch_size",
        "max_batch_size must be >= 1, got 0",
    ),
    "name": (
        lambda: ImportOptions(name="a b"),
        "name",
        "model name 'a b': use letters, digits, '_', '.' and '-', starting with a letter or digit",
    ),
}


@pytest.mark.parametrize("case", sorted(CORE_TERMS))
def test_the_importer_names_the_setting_in_its_own_terms(case: str) -> None:
    call, setting, message = CORE_TERMS[case]
    with pytest.raises(SettingError) as caught:
        call()
    assert caught.value.setting == setting
    assert str(caught.value) == message
    assert "--" not in message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--std", "0.2,0.2", "--mean", "0.5"], "--std takes 1 or 3 comma-separated values, got 2"),
        (["--max-batch-size", "0", "--scale", "1"], "--max-batch-size must be >= 1, got 0"),
        (["--size", "big", "--scale", "1"], "--size 'big': expected N or NxN, e.g. 224"),
        (
            ["--scale", "1", "--output-kind", "probabilities"],
            "FILE: --output-kind probabilities, but rows are not probabilities",
        ),
        (
            ["--layout", "NHWC", "--scale", "1"],
            "FILE: input 'x' FLOAT [N, 3, 16, 16] has 16 channels at axis 3 (NHWC), not 3; its "
            "axis 1 is 3: pass --layout NCHW",
        ),
    ],
)
def test_the_command_names_the_flag_the_user_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    model = save(tiny_convnet(), tmp_path / "t.onnx")
    argv = ["add", "--onnx", str(model), "--labels", str(labels_file(tmp_path, 5)),
            "--name", "t", "--repository", str(tmp_path / "repo"), *flags]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.replace(str(model), "FILE")
    assert err.startswith(f"error: {message}"), err
    assert not (tmp_path / "repo").exists()


def test_every_setting_has_a_flag_that_add_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(ADD_FLAGS) == SETTINGS
    with pytest.raises(SystemExit):
        main(["add", "--help"])
    taken = set(FLAG.findall(capsys.readouterr().out))
    named = {flag for flags in ADD_FLAGS.values() for flag in FLAG.findall(flags)}
    assert len(named) == len(SETTINGS) - 1  # normalisation is set by the flags of its parts
    assert named <= taken, named - taken
