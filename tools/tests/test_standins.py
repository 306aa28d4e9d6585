"""tools.containers.standins without an engine: the names an engine gives references, the bases
the repository's Dockerfiles build on, and that each stand-in stands for what the Dockerfiles
and the manifests really name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tools.containers import standins
from tools.images import IMAGES

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / d for d in dict.fromkeys(i.dockerfile for i in IMAGES)]
TRITON_STAND_IN = ROOT / "tools" / "containers" / "triton" / "Dockerfile"


# --- full_name -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "full"),
    [
        # Short names are Docker Hub's official images.
        ("busybox:1.37.0", "docker.io/library/busybox:1.37.0"),
        ("python:3.11.11-slim-bookworm", "docker.io/library/python:3.11.11-slim-bookworm"),
        ("python", "docker.io/library/python"),
        ("busybox@sha256:0123abcd", "docker.io/library/busybox@sha256:0123abcd"),
        # An organisation on Docker Hub.
        ("grafana/grafana:11.3.0", "docker.io/grafana/grafana:11.3.0"),
        ("library/busybox:1.37.0", "docker.io/library/busybox:1.37.0"),
        # A registry: a dot, a port, or localhost in the first part.
        ("nvcr.io/nvidia/tritonserver:24.10-py3", "nvcr.io/nvidia/tritonserver:24.10-py3"),
        ("docker.io/library/busybox:1.37.0", "docker.io/library/busybox:1.37.0"),
        ("quay.io/prometheus/prometheus:v3.0.0", "quay.io/prometheus/prometheus:v3.0.0"),
        ("registry:5000/team/eds:dev", "registry:5000/team/eds:dev"),
        ("localhost:5000/x/inferline-eds:dev", "localhost:5000/x/inferline-eds:dev"),
        ("localhost/inferline/inferline-eds:dev", "localhost/inferline/inferline-eds:dev"),
    ],
)
def test_full_name(reference: str, full: str) -> None:
    assert standins.full_name(reference) == full


# --- bases ---------------------------------------------------------------------------------------


def test_the_dockerfiles_build_on_python_and_busybox_only() -> None:
    assert standins.bases(DOCKERFILES) == [standins.PYTHON, standins.BUSYBOX]


def test_bases_leave_out_stage_names_and_build_args() -> None:
    # services/preprocess builds FROM its own stages (build-cpu, runtime); the Triton stand-in
    # FROM ${BASE}: none of them is an image to pull.
    preprocess = ROOT / "services" / "preprocess" / "Dockerfile"
    text = preprocess.read_text("utf-8")
    assert re.search(r"(?m)^FROM build-cpu AS", text) and re.search(r"(?m)^FROM runtime AS", text)
    assert standins.bases([preprocess]) == [standins.PYTHON]
    assert "${BASE}" in TRITON_STAND_IN.read_text("utf-8")
    assert standins.bases([TRITON_STAND_IN]) == []
    assert standins.bases([*DOCKERFILES, TRITON_STAND_IN]) == [standins.PYTHON, standins.BUSYBOX]


def test_bases_read_flags_and_lower_case_and_list_each_once(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "# syntax=docker/dockerfile:1\n"
        "ARG BASE=debian:12\n"
        "FROM --platform=$BUILDPLATFORM golang:1.23 AS build\n"
        "from alpine:3.20 as tools\n"
        "FROM build AS test\n"
        "FROM ${BASE}\n"
        "FROM $BASE\n"
        "FROM alpine:3.20\n"
        "COPY --from=tools /x /x\n",
        "utf-8",
    )
    other = tmp_path / "Other.Dockerfile"
    other.write_text("FROM build\nFROM golang:1.23\n", "utf-8")  # "build": not its stage here
    assert standins.bases([dockerfile, other]) == ["golang:1.23", "alpine:3.20", "build"]


# --- what the stand-ins stand for ----------------------------------------------------------------


def triton_image() -> str:
    """The Triton image k8s/base/triton.yaml runs."""
    documents = yaml.safe_load_all((ROOT / "k8s" / "base" / "triton.yaml").read_text("utf-8"))
    images = [
        str(c["image"])
        for d in documents
        if d and d.get("kind") == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        if "tritonserver" in str(c["image"])
    ]
    assert len(images) == 1, images
    return images[0]


def test_every_stand_in_stands_for_an_image_the_project_names() -> None:
    named = {*standins.bases(DOCKERFILES), triton_image()}
    assert {s.stands_for for s in standins.STAND_INS.values()} == named


def test_stand_ins_are_keyed_by_the_full_name_of_what_they_stand_for() -> None:
    assert {name: s.stands_for for name, s in standins.STAND_INS.items()} == {
        "docker.io/library/python:3.11.11-slim-bookworm": "python:3.11.11-slim-bookworm",
        "docker.io/library/busybox:1.37.0": "busybox:1.37.0",
        "nvcr.io/nvidia/tritonserver:24.10-py3": "nvcr.io/nvidia/tritonserver:24.10-py3",
    }
    assert standins.STAND_INS[standins.full_name(triton_image())].make is standins.make_triton


def test_the_triton_stand_in_builds_on_the_python_base_and_labels_what_it_stands_for() -> None:
    text = TRITON_STAND_IN.read_text("utf-8")
    assert re.search(r"(?m)^ARG BASE=(\S+)$", text)[1] == standins.PYTHON  # type: ignore[index]
    stands_for = re.search(r'(?m)^ARG STANDS_FOR="([^"]+)"$', text)
    assert stands_for and stands_for[1] == triton_image() == standins.TRITON
    assert f'{standins.LABEL}="${{STANDS_FOR}}"' in text


def test_the_stand_ins_description_says_never_push() -> None:
    said = standins.description(standins.BUSYBOX, "Debian's busybox-static")
    assert said.startswith(f"inferline stand-in for {standins.BUSYBOX}: Debian's busybox-static;")
    assert said.endswith("never push it")
