from dataclasses import dataclass

import pytest

from inferline.config import ConfigError, environment, load, require


@dataclass(frozen=True)
class Example:
    port: int = 8080
    ratio: float = 0.5
    name: str = "x"
    debug: bool = False

    def __post_init__(self) -> None:
        require(0 < self.port < 65536, "EX", "port", "must be a TCP port")


def test_defaults_env_then_flags() -> None:
    assert load(Example, "EX", [], {}) == Example()
    env = {"EX_PORT": "9000", "EX_RATIO": "0.25", "EX_DEBUG": "yes", "OTHER": "1"}
    assert load(Example, "EX", [], env) == Example(9000, 0.25, "x", True)
    assert load(Example, "EX", ["--port", "9001", "--name=y"], env).port == 9001
    assert load(Example, "EX", ["--name=y"], env).name == "y"


@pytest.mark.parametrize(
    ("env", "argv", "named"),
    [
        ({"EX_PORT": "eighty"}, [], "EX_PORT='eighty': expected an integer"),
        ({"EX_RATIO": "half"}, [], "EX_RATIO='half': expected a number"),
        ({"EX_DEBUG": "maybe"}, [], "EX_DEBUG='maybe': expected true or false"),
        ({}, ["--port", "x"], "--port='x': expected an integer"),
        ({"EX_PORT": "70000"}, [], "EX_PORT: must be a TCP port"),
    ],
)
def test_bad_value_names_the_variable(env: dict[str, str], argv: list[str], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(Example, "EX", argv, env)
    assert named in str(caught.value)


def test_environment_is_what_load_reads_back() -> None:
    env = environment(Example, "EX", port=9000, ratio=0.25, debug=True)
    assert env == {"EX_PORT": "9000", "EX_RATIO": "0.25", "EX_DEBUG": "true"}
    assert load(Example, "EX", [], env) == Example(9000, 0.25, "x", True)


def test_environment_refuses_a_setting_the_child_would_ignore() -> None:
    with pytest.raises(TypeError, match="Example has no setting prot"):
        environment(Example, "EX", prot=9000)
    with pytest.raises(ConfigError, match="EX_PORT='eighty': expected an integer"):
        environment(Example, "EX", port="eighty")
