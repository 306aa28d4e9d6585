"""INFERLINE_EDS_* configuration: defaults, parsing, errors that name the variable."""

from __future__ import annotations

import pytest

from eds.config import PREFIX, Config
from inferline.config import ConfigError, load


def test_defaults_match_the_port_plan() -> None:
    config = load(Config, PREFIX, environ={})
    assert (config.port, config.metrics_port) == (18000, 9183)
    assert config.source == "file"
    assert config.service_names == (
        "middleman",
        "middleman-rest",
        "preprocess",
        "batcher",
        "triton",
    )


def test_services_are_a_comma_separated_list() -> None:
    config = load(Config, PREFIX, environ={"INFERLINE_EDS_SERVICES": " triton , batcher,"})
    assert config.service_names == ("triton", "batcher")


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"INFERLINE_EDS_SOURCE": "consul"}, "INFERLINE_EDS_SOURCE"),
        ({"INFERLINE_EDS_SERVICES": ","}, "INFERLINE_EDS_SERVICES"),
        ({"INFERLINE_EDS_SERVICES": "tri ton"}, "INFERLINE_EDS_SERVICES"),
        ({"INFERLINE_EDS_PORT": "70000"}, "INFERLINE_EDS_PORT"),
        ({"INFERLINE_EDS_POLL_INTERVAL_S": "0"}, "INFERLINE_EDS_POLL_INTERVAL_S"),
        ({"INFERLINE_EDS_ENDPOINTS_FILE": ""}, "INFERLINE_EDS_ENDPOINTS_FILE"),
    ],
)
def test_bad_values_fail_naming_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load(Config, PREFIX, environ=env)
