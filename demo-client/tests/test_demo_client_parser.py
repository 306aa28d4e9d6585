"""The command line's shape: each command takes only its own flags, and says which command
takes a flag it refuses (parsing only: nothing connects)."""

from __future__ import annotations

import re

import pytest

from demo_client.cli import parse

# The flags only some commands take (the endpoint's flags, --target to -v, are everyone's).
OWN = {
    "load": {
        "--images", "--duration", "--count", "--concurrency", "--rate", "--batch", "--channels",
        "--protocol", "--timeout", "--web", "--web-port", "--envoy-admin", "--trace-view",
    },
    "classify": {"--top-k", "--protocol", "--timeout"},
    "video": {
        "--chunk-bytes", "--fps", "--every-n", "--max-frames", "--web", "--web-port",
        "--envoy-admin",
    },
}  # fmt: skip
EVERYONE = {"--target", "--model", "--tls", "--ca", "--cert", "--key", "--wait", "--json"}


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", sorted(OWN))
def test_each_commands_help_lists_only_its_flags(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse([command, "--help"])
    assert exited.value.code == 0
    flags = set(re.findall(r"--[a-z][a-z-]*", capsys.readouterr().out))
    others = set().union(*OWN.values()) - OWN[command]
    assert flags >= OWN[command] | EVERYONE
    assert not flags & others, f"{command} --help lists {sorted(flags & others)}"


@pytest.mark.parametrize(
    ("argv", "owners"),
    [
        (["load", "--fps", "2"], "--fps is a flag of video, not of load"),
        (["load", "--every-n=3"], "--every-n is a flag of video, not of load"),
        (["load", "--top-k", "3"], "--top-k is a flag of classify, not of load"),
        (["video", "clip.mp4", "--rate", "5"], "--rate is a flag of load, not of video"),
        (["video", "clip.mp4", "--batch", "2"], "--batch is a flag of load, not of video"),
        (["video", "clip.mp4", "--count", "9"], "--count is a flag of load, not of video"),
        (["video", "clip.mp4", "--protocol", "http"], "--protocol is a flag of load and classify"),
        (["classify", "--web", "cat.jpg"], "--web is a flag of load and video, not of classify"),
        (["classify", "cat.jpg", "--chunk-bytes", "9"], "--chunk-bytes is a flag of video"),
    ],
)
def test_a_flag_of_another_command_is_refused_naming_its_command(
    argv: list[str], owners: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error(argv, capsys)
    assert f"python -m demo_client {argv[0]}: error: unrecognized arguments: " in err
    assert owners in err
    assert f"`python -m demo_client {argv[0]} --help` lists its flags" in err


def test_a_flag_no_command_takes_is_refused_without_an_owner(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = usage_error(["load", "--nope"], capsys)
    assert "unrecognized arguments: --nope; `python -m demo_client load --help`" in err


@pytest.mark.parametrize("argv", [[], ["--duration", "30"], ["--classify", "cat.jpg"]])
def test_the_command_comes_first(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(argv, capsys)
    assert "a command comes first: load, classify, video" in err
    assert "`python -m demo_client load --duration 30`" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["load", "--rate", "5"], {"model": "classifier", "rate": 5.0, "web": False}),
        (["classify", "a.jpg", "b.jpg", "--top-k", "2"], {"model": "classifier", "top_k": 2}),
        (["video", "clip.mp4", "--fps", "4", "--web"], {"model": "classifier_video", "fps": 4.0}),
    ],
)
def test_each_command_takes_its_own_flags_and_has_its_default_model(
    argv: list[str], expected: dict[str, object]
) -> None:
    args = parse([*argv, "--target", "h:1", "--json"])
    assert args.command == argv[0] and args.target == "h:1" and args.json
    assert {name: getattr(args, name) for name in expected} == expected


def test_trace_view_links_each_timed_request_to_its_trace() -> None:
    template = "http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}"
    assert parse(["load", "--web", "--trace-view", template]).trace_view == template
    assert parse(["load", "--web"]).trace_view == ""  # no links


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("http://127.0.0.1:5000/#/traces", "has no {trace_id}"),
        ("file:///tmp/{trace_id}", "is not an http:// or https:// URL"),
    ],
)
def test_a_trace_view_without_a_place_for_the_trace_id_is_a_usage_error_naming_the_flag(
    template: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error(["load", "--web", "--trace-view", template], capsys)
    assert "python -m demo_client load: error: argument --trace-view: " in err
    assert why in err
