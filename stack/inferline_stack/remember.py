"""The configuration a stack was started with, kept in its run folder (``stack.json``).

``make up`` writes it; ``make scale``, ``make status`` and ``make down`` in another shell (where
``INFERLINE_STACK_MODEL=simulated_gpu`` was never set, say) act on the stack as it was started,
not on the defaults: a Triton replica started with another model than its pool's would be
announced ready for its own model and fail every request for the pool's. A setting given
explicitly (environment or flag) that differs from the stack's is refused, naming both values.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inferline.config import ConfigError, env_name
from inferline_stack.config import PREFIX, StackConfig

FILE = "stack.json"
# Settings of the command itself, not of the stack: the one given applies.
OWN = frozenset({"run_dir", "start_timeout_s", "stop_grace_s"})


def path(run_dir: str | Path) -> Path:
    return Path(run_dir) / FILE


def remember(config: StackConfig) -> None:
    target = path(config.run_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(".tmp")
    staging.write_text(json.dumps(dataclasses.asdict(config), indent=2) + "\n", encoding="utf-8")
    staging.replace(target)


def forget(run_dir: str | Path) -> None:
    path(run_dir).unlink(missing_ok=True)


def explicit(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> set[str]:
    """The settings given by ``INFERLINE_STACK_*`` variables or by flags."""
    given = set()
    for field in dataclasses.fields(StackConfig):
        flag = "--" + field.name.replace("_", "-")
        if env_name(PREFIX, field.name) in environ or any(
            a == flag or a.startswith(flag + "=") for a in argv
        ):
            given.add(field.name)
    return given


def started(given: StackConfig, settings: set[str]) -> StackConfig:
    """The configuration of the stack in ``given.run_dir`` as it was started (``given`` when
    none was remembered), with the command's own settings from ``given``. ConfigError when
    ``settings`` (explicitly given) ask for something else than the stack runs with."""
    try:
        saved: dict[str, Any] = json.loads(path(given.run_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return given
    except (OSError, ValueError) as exc:
        message = f"{path(given.run_dir)}: unreadable ({exc}); 'make down' clears it"
        raise ConfigError(message) from None
    known = {f.name for f in dataclasses.fields(StackConfig)}
    running = StackConfig(**{k: v for k, v in saved.items() if k in known})
    differ = sorted(n for n in settings - OWN if getattr(given, n) != getattr(running, n))
    if differ:
        asked = "; ".join(
            f"{env_name(PREFIX, n)}={getattr(given, n)!r}, it runs with {getattr(running, n)!r}"
            for n in differ
        )
        raise ConfigError(
            f"the stack in {given.run_dir} was started otherwise: {asked}. Leave the setting out "
            "to act on the stack as it runs, or 'make down' and 'make up' with it"
        )
    return dataclasses.replace(running, **{n: getattr(given, n) for n in OWN})
