"""The images of k8s/CONTRACT.md and a small Dockerfile reader, for the images' tests.

* :data:`IMAGES`, :func:`contract_ports` — the contract's image and ports tables;
* :func:`stages`, :func:`final_stage` — a Dockerfile as stages (split at FROM) of logical
  instructions, read as text with an image's build arguments (tools/images.py) in place of its
  ARGs, as Docker and RUN's shell put them: no container engine is needed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tools import images

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "k8s" / "CONTRACT.md"


# --- the contract --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ContractImage:
    name: str  # the kustomize image name without "inferline/": middleman, preprocess-gpu, ...
    dockerfile: str
    target: str | None
    repository: str  # inferline-middleman
    entrypoint: tuple[str, ...] | None  # None: the image has none (the models image)

    @property
    def python(self) -> bool:
        return self.name != "models"

    @property
    def planned(self) -> images.Image:
        """Its entry in tools/images.py: the build arguments (one source), the recipe."""
        return PLANNED[self.name]

    @property
    def distribution(self) -> str:
        """The folder of the distribution it installs: its recipe's, or its Dockerfile's."""
        recipe = self.planned.recipe
        return recipe.dist if recipe else str(Path(self.dockerfile).parent)


def contract_images() -> list[ContractImage]:
    """The rows of the contract's image table (Triton is NVIDIA's image, not ours)."""
    rows = []
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`inferline/"):
            continue
        name = cells[0].strip("`").removeprefix("inferline/")
        dockerfile = re.search(r"`([^`]*Dockerfile)`", cells[1])
        target = re.search(r"target `(\w+)`", cells[1])
        repository = re.search(r"inferline-[a-z-]+", cells[2])
        entrypoint = re.fullmatch(r"`([^`]+)`", cells[3])
        assert dockerfile and repository, f"unreadable contract row: {line}"
        rows.append(
            ContractImage(
                name=name,
                dockerfile=dockerfile.group(1),
                target=target.group(1) if target else None,
                repository=repository.group(0),
                entrypoint=tuple(entrypoint.group(1).split()) if entrypoint else None,
            )
        )
    return rows


def contract_ports() -> dict[str, set[int]]:
    """Container ports by component, from the contract's ports table (admin-only ports aside)."""
    ports: dict[str, set[int]] = {}
    in_table = False
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        if line.startswith("## Ports"):
            in_table = True
        elif line.startswith("## "):
            in_table = False
        elif in_table and line.startswith("| ") and not line.startswith("| component"):
            component, listed = (c.strip() for c in line.strip().strip("|").split("|"))
            listed = re.sub(r";?\s*admin \d+ on 127\.0\.0\.1 only", "", listed)
            if not component.startswith("-"):
                ports[component] = {int(p) for p in re.findall(r"\b(\d{4,5})\b", listed)}
    return ports


PLANNED = {i.name: i for i in images.IMAGES}
IMAGES = contract_images()
BY_NAME = {i.name: i for i in IMAGES}
DOCKERFILES = sorted({i.dockerfile for i in IMAGES})


# --- a small Dockerfile reader -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def flags(self) -> dict[str, str]:
        """``--from=build --chown=1:1 a b`` → {"from": "build", "chown": "1:1"}."""
        found = {}
        for word in shlex.split(self.args):
            if not word.startswith("--"):
                break
            key, _, value = word[2:].partition("=")
            found[key] = value
        return found

    def operands(self) -> list[str]:
        """The arguments after the flags (shell form)."""
        words = shlex.split(self.args)
        first = next((n for n, w in enumerate(words) if not w.startswith("--")), len(words))
        return words[first:]


@dataclasses.dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]
    parent: Stage | None = None  # FROM <an earlier stage>

    def chain(self) -> list[Instruction]:
        """This stage's instructions, after those of the stages it is built FROM."""
        return [*(self.parent.chain() if self.parent else []), *self.instructions]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.chain() if i.keyword == keyword]

    def root_base(self) -> str:
        return self.parent.root_base() if self.parent else self.base


def instructions(text: str) -> Iterator[Instruction]:
    """Logical instructions: continuation lines joined, comments and blank lines dropped."""
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # also inside a continuation, as Docker does
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        keyword, _, args = (buffer + line).partition(" ")
        yield Instruction(keyword.upper(), args.strip(), start)
        buffer = ""
    assert not buffer, "a continuation runs past the end of the file"


# Docker puts ARG values into these instructions' arguments; RUN's shell expands them (they are
# in its environment); exec-form CMD and ENTRYPOINT get none.
EXPANDED = {
    "ADD",
    "COPY",
    "ENV",
    "EXPOSE",
    "LABEL",
    "RUN",
    "STOPSIGNAL",
    "USER",
    "VOLUME",
    "WORKDIR",
}
_REFERENCE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def expand(text: str, scope: Mapping[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` of ``scope`` replaced by their values; the others as written."""
    return _REFERENCE.sub(lambda m: scope.get(m.group(1) or m.group(2), m.group(0)), text)


def stages(path: Path, build_args: Mapping[str, str] | None = None) -> list[Stage]:
    """``path``'s stages; each ARG a stage declares takes its value from ``build_args``, else its
    default, else "", from there to the end of that stage (Docker's scope). References to other
    variables (ENV's ``$PATH``) stay as written."""
    given = build_args or {}
    parsed: list[Stage] = []
    scope: dict[str, str] = {}
    for instruction in instructions(path.read_text(encoding="utf-8")):
        if instruction.keyword == "FROM":
            words = [w for w in instruction.args.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            parent = next((s for s in parsed if s.name == words[0]), None)
            parsed.append(Stage(words[0], name, [], parent))
            scope = {}
            continue
        assert parsed, f"{path}: {instruction.keyword} before FROM"
        if instruction.keyword == "ARG":
            key, _, default = instruction.args.partition("=")
            scope[key] = given.get(key, "".join(shlex.split(default)))
        elif instruction.keyword in EXPANDED:
            instruction = dataclasses.replace(instruction, args=expand(instruction.args, scope))
        parsed[-1].instructions.append(instruction)
    return parsed


def image_stages(image: ContractImage) -> list[Stage]:
    """The stages of the image's Dockerfile, with its build arguments."""
    return stages(ROOT / image.dockerfile, image.planned.build_args())


def final_stage(image: ContractImage) -> Stage:
    """The stage the image is: its target, else the last one."""
    all_stages = image_stages(image)
    if image.target:
        return next(s for s in all_stages if s.name == image.target)
    return all_stages[-1]


def declared_args(stage_list: list[Stage]) -> dict[str, str]:
    """ARG name -> its default ("" for none) over ``stage_list``."""
    found = {}
    for stage in stage_list:
        for instruction in stage.instructions:
            if instruction.keyword == "ARG":
                key, _, default = instruction.args.partition("=")
                found[key] = default
    return found


def assignments(stage: Stage, keyword: str) -> dict[str, str]:
    """The ``key=value`` pairs of every ``keyword`` instruction (ENV, LABEL) of ``stage``."""
    values: dict[str, str] = {}
    for instruction in stage.all(keyword):
        for word in shlex.split(instruction.args):
            key, _, value = word.partition("=")
            values[key] = value
    return values


def env(stage: Stage) -> dict[str, str]:
    return assignments(stage, "ENV")


def labels(stage: Stage) -> dict[str, str]:
    return assignments(stage, "LABEL")


def exec_form(instruction: Instruction) -> list[str]:
    value: Any = json.loads(instruction.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def pip_installs(stage_list: list[Stage]) -> list[tuple[Stage, Instruction, list[str]]]:
    found = []
    for stage in stage_list:
        for instruction in stage.instructions:
            if instruction.keyword != "RUN":
                continue
            for command in re.split(r"&&|;|\|\|", instruction.args):
                words = shlex.split(command)
                if words and words[0].endswith("pip") and "install" in words:
                    # pip's general options (--python) come before its command
                    found.append((stage, instruction, words[words.index("install") + 1 :]))
    return found
