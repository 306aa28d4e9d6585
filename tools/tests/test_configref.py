"""docs/configuration.md's tables are generated from the Config classes and inferline.capacity:
every field has a row and a meaning, each default is the class's own, and a stale page fails."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

from inferline import capacity
from tools import configref

MODULE = """
from dataclasses import dataclass

LIMIT = 7  # how many
OTHER = 8
unit = 1

@dataclass
class Config:
    # Listen address / port.
    host: str = "0.0.0.0"
    port: int = 1
    spool_bytes: int = 3 * 1024 * 1024  # spool  # fmt: skip
    on: bool = True  # switch | or not, docs/video.md
"""


def module_from(tmp_path: Path, source: str) -> ModuleType:
    path = tmp_path / "sample_config.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("sample_config", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["sample_config"] = module
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_shows_the_code() -> None:
    """The page's tables are the ones `make docs` makes from the classes as they are."""
    assert configref.main(["--check"]) == 0, "run make docs"


@pytest.mark.parametrize(("_", "module_name", "class_name"), configref.CLASSES)
def test_every_field_has_a_row_with_a_meaning(_: str, module_name: str, class_name: str) -> None:
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name)
    rows = configref.rows(module, configref.fields(cls))
    listed = [name for row in rows for name in row.names]
    assert sorted(listed) == sorted(f.name for f in dataclasses.fields(cls))  # each once
    own = [f.name for f in dataclasses.fields(cls) if f.name in inspect.get_annotations(cls)]
    assert listed[: len(own)] == own  # its own first, in order; then those it inherits
    assert all(row.meaning for row in rows)


def test_a_computed_default_is_the_value_capacity_computes() -> None:
    page = configref.section()
    assert (
        f"`{capacity.BATCHER_QUEUE_REQUESTS}` / `{capacity.BATCHER_QUEUE_BYTES}` (512 MiB)" in page
    )
    assert f"`{capacity.INNER_MESSAGE_BYTES}` (64 MiB + 64 KiB)" in page


def test_a_field_without_a_comment_shares_the_row_above(tmp_path: Path) -> None:
    module = module_from(tmp_path, MODULE)
    lines = configref.table(
        "| a | b | c |", configref.rows(module, configref.fields(module.Config))
    )
    assert lines[2:] == [
        "| `HOST` / `PORT` | `0.0.0.0` / `1` | Listen address / port. |",
        "| `SPOOL_BYTES` | `3145728` (3 MiB) | spool |",
        "| `ON` | `true` | switch \\| or not, [video.md](video.md) |",
    ]
    constants = configref.rows(module, configref.constants(module))
    assert [(row.names, row.values, row.meaning) for row in constants] == [
        (["LIMIT", "OTHER"], [7, 8], "how many")
    ]


def test_a_first_field_without_a_comment_is_refused_by_name(tmp_path: Path) -> None:
    module = module_from(tmp_path, MODULE.replace("    # Listen address / port.\n", ""))
    with pytest.raises(SystemExit, match="host has no comment to say what it means"):
        configref.rows(module, configref.fields(module.Config))


def test_a_page_without_markers_is_refused() -> None:
    with pytest.raises(SystemExit, match="no configuration markers"):
        configref.SECTION.render("# Configuration\n", "tables")


def test_only_the_text_between_the_markers_is_replaced() -> None:
    page = f"before\n{configref.START}\nold\n{configref.END}\nafter\n"
    assert configref.SECTION.render(page, "new") == "before\nnew\nafter\n"


def test_sizes_are_shown_in_binary_units_when_whole() -> None:
    assert configref.size(2 * 1024**3) == "2 GiB"
    assert configref.size(64 * 1024**2 + 64 * 1024) == "64 MiB + 64 KiB"
    assert configref.size(1000) == ""
    assert configref.shown("max_batch", 64) == "`64`"
    assert configref.shown("grace_s", 5.0) == "`5`"
    assert configref.shown("tls_ca", "") == "empty"


@pytest.mark.parametrize(("heading", "module", "name"), configref.CLASSES)
def test_every_deployables_configuration_is_frozen(heading: str, module: str, name: str) -> None:
    """A setting read at start-up cannot be changed behind the service's back."""
    cls = getattr(importlib.import_module(module), name)
    config = cls()
    field = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(config, field, getattr(config, field))
