import os

import pytest

from inferline.config import ConfigError, load
from inferline.imaging.settings import default_sampling
from inferline.imaging.video import Sampling
from preprocess.config import PREFIX, Config


def test_defaults_match_the_design() -> None:
    config = load(Config, PREFIX, environ={})
    assert (config.port, config.metrics_port, config.backend) == (8091, 9181, "auto")
    assert (config.resize, config.crop) == (256, 224)
    assert config.workers == 0
    assert config.threads == len(os.sched_getaffinity(0))  # 0: every core it may run on


def test_environment_and_flags() -> None:
    env = {"INFERLINE_PREPROCESS_BACKEND": "opencv", "INFERLINE_PREPROCESS_WORKERS": "3"}
    config = load(Config, PREFIX, ["--crop", "200"], environ=env)
    assert (config.backend, config.threads, config.crop) == ("opencv", 3, 200)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"INFERLINE_PREPROCESS_BACKEND": "cuda"}, "INFERLINE_PREPROCESS_BACKEND: must be one of"),
        ({"INFERLINE_PREPROCESS_CROP": "300"}, "INFERLINE_PREPROCESS_CROP"),
        ({"INFERLINE_PREPROCESS_MAX_VIDEO_BYTES": "99999999999"}, "below max_message_bytes"),
        ({"INFERLINE_PREPROCESS_MAX_IMAGE_BYTES": "99999999999"}, "MAX_IMAGE_BYTES: must be below"),
        ({"INFERLINE_PREPROCESS_VIDEO_FPS": "0"}, "INFERLINE_PREPROCESS_VIDEO_FPS"),
        ({"INFERLINE_PREPROCESS_WORKERS": "many"}, "expected an integer"),
        (
            {"INFERLINE_PREPROCESS_TLS_CERT": "/nope.crt", "INFERLINE_PREPROCESS_TLS_KEY": "/k"},
            "INFERLINE_PREPROCESS_TLS_CERT='/nope.crt': No such file",
        ),
        ({"INFERLINE_PREPROCESS_TLS_CA": "/ca.crt"}, "INFERLINE_PREPROCESS_TLS_CA: client cert"),
        ({"INFERLINE_PREPROCESS_TRITON_TLS": "true"}, "TRITON_TLS: needs this service's cert"),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load(Config, PREFIX, environ=env)


def test_every_n_wins_over_fps() -> None:
    assert default_sampling(Config(video_every_n=5)) == Sampling(5, 0.0, 256)
    assert default_sampling(Config(video_fps=3.0)) == Sampling(0, 3.0, 256)
