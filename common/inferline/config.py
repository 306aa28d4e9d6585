"""Configuration from environment variables and flags, parsed once into a frozen dataclass.

Every field of a config dataclass is read from ``<PREFIX>_<FIELD>`` (upper case) and may be
overridden by ``--field-name`` on the command line. A value that does not parse fails start-up
with a :class:`ConfigError` that names the variable, so a typo never becomes a silent default.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


def env_name(prefix: str, field: str) -> str:
    return f"{prefix}_{field}".upper()


def _field_type(cls: type, field: dataclasses.Field[Any]) -> type:
    hint = typing.get_type_hints(cls)[field.name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if not isinstance(hint, type):
        raise TypeError(f"config field {field.name}: unsupported type {hint!r}")
    return hint


def parse_value(kind: type, raw: str, source: str) -> Any:
    """Parse ``raw`` as ``kind``; ``source`` names where it came from for the error message."""
    text = raw.strip()
    try:
        if kind is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError
        if kind is int:
            return int(text.replace("_", ""))
        if kind is float:
            return float(text)
        if kind is str:
            return text
        return kind(text)
    except ValueError:
        expected = {bool: "true or false", int: "an integer", float: "a number"}.get(
            kind, kind.__name__
        )
        raise ConfigError(f"{source}={raw!r}: expected {expected}") from None


def load(
    cls: type[T],
    prefix: str,
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    description: str | None = None,
    prog: str | None = None,
) -> T:
    """Build ``cls`` (a dataclass) from defaults, then ``environ``, then ``argv`` flags."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog=prog, description=description)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        kind = _field_type(cls, field)
        name = env_name(prefix, field.name)
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            default=None,
            metavar=kind.__name__.upper(),
            help=f"env {name}",
        )
        if name in env:
            values[field.name] = parse_value(kind, env[name], name)
    args = parser.parse_args([] if argv is None else list(argv))
    for field in dataclasses.fields(cls):
        raw = getattr(args, field.name)
        if raw is not None:
            flag = "--" + field.name.replace("_", "-")
            values[field.name] = parse_value(_field_type(cls, field), raw, flag)
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{prefix} configuration: {exc}") from exc


def environment(cls: type, prefix: str, **values: object) -> dict[str, str]:
    """``values`` as the ``<PREFIX>_<FIELD>`` variables that set them in a process that loads
    ``cls`` (how a parent configures a child through its public settings). A name that is not
    a field of ``cls``, or a value its type does not parse, fails here, in the parent: a
    renamed setting can never silently set nothing."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise TypeError(f"{cls.__qualname__} has no setting {', '.join(unknown)}")
    env = {}
    for name, value in values.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        env[env_name(prefix, name)] = text
        parse_value(_field_type(cls, fields[name]), text, env_name(prefix, name))
    return env


def require(condition: bool, prefix: str, field: str, message: str) -> None:
    """Validation helper for ``__post_init__``: fail naming the variable."""
    if not condition:
        raise ConfigError(f"{env_name(prefix, field)}: {message}")
