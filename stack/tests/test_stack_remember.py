"""The stack remembers how it was started: another shell's `scale` acts on that, and refuses a
setting that contradicts it, naming both values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from inferline.config import ConfigError, load
from inferline_stack import remember
from inferline_stack.config import PREFIX, StackConfig


def test_another_shell_gets_the_stack_as_it_was_started(tmp_path: Path) -> None:
    run = str(tmp_path)
    remember.remember(StackConfig(run_dir=run, model="simulated_gpu", public_port=18080))
    environ = {"INFERLINE_STACK_RUN_DIR": run, "INFERLINE_STACK_STOP_GRACE_S": "3"}
    given = load(StackConfig, PREFIX, [], environ)  # model and port: the defaults
    settings = remember.explicit([], environ)
    assert settings == {"run_dir", "stop_grace_s"}
    config = remember.started(given, settings)
    assert (config.model, config.public_port) == ("simulated_gpu", 18080)
    assert config.stop_grace_s == 3  # the command's own setting applies


@pytest.mark.parametrize(
    ("argv", "environ"),
    [([], {"INFERLINE_STACK_MODEL": "efficientnet_lite0"}), (["--model=efficientnet_lite0"], {}),
     (["--model", "efficientnet_lite0"], {})],
)  # fmt: skip
def test_a_contradicting_setting_is_refused_naming_both(
    tmp_path: Path, argv: list[str], environ: dict[str, str]
) -> None:
    remember.remember(StackConfig(run_dir=str(tmp_path), model="simulated_gpu"))
    environ = {**environ, "INFERLINE_STACK_RUN_DIR": str(tmp_path)}
    given = load(StackConfig, PREFIX, argv, environ)
    with pytest.raises(ConfigError) as caught:
        remember.started(given, remember.explicit(argv, environ))
    message = str(caught.value)
    assert "INFERLINE_STACK_MODEL='efficientnet_lite0'" in message
    assert "it runs with 'simulated_gpu'" in message
    same = dataclasses.replace(given, model="simulated_gpu")
    assert remember.started(same, {"model"}).model == "simulated_gpu"  # the same value: fine


def test_no_memory_means_the_given_configuration(tmp_path: Path) -> None:
    given = StackConfig(run_dir=str(tmp_path))
    assert remember.started(given, {"model"}) is given
    remember.remember(given)
    remember.forget(given.run_dir)
    assert not remember.path(given.run_dir).exists()
