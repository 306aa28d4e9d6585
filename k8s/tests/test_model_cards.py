"""middleman's model-cards init container, run as written (POSIX sh, as busybox's): it copies
each model's card and labels from the models image, and nothing else."""

from __future__ import annotations

import subprocess
from pathlib import Path

from k8s.tests.manifests import find, render


def run_init_container(models: Path, repository: Path) -> None:
    """The model-cards command with its two folders moved to ``models`` and ``repository``."""
    pod = find(render("overlays/gpu"), "Deployment", "middleman")["spec"]["template"]["spec"]
    (init,) = [c for c in pod["initContainers"] if c["name"] == "model-cards"]
    shell, flag, script = init["command"]
    script = script.replace("/models/", f"{models}/").replace("/repository/", f"{repository}/")
    repository.mkdir()
    subprocess.run([shell, flag, script], check=True)


def test_the_init_container_copies_every_card_and_no_weights(tmp_path: Path) -> None:
    models, repository = tmp_path / "models", tmp_path / "repository"
    for name in ("efficientnet_lite0", "mine"):
        (models / name / "1").mkdir(parents=True)
        for file in ("inferline.json", "labels.txt", "config.pbtxt", "1/model.onnx"):
            (models / name / file).write_text(f"{name} {file}")
    run_init_container(models, repository)
    copied = sorted(str(p.relative_to(repository)) for p in repository.rglob("*") if p.is_file())
    assert copied == [
        "efficientnet_lite0/inferline.json", "efficientnet_lite0/labels.txt",
        "mine/inferline.json", "mine/labels.txt",
    ]  # fmt: skip
    assert (repository / "mine" / "labels.txt").read_text() == "mine labels.txt"


def test_a_model_without_a_card_is_left_to_triton(tmp_path: Path) -> None:
    (tmp_path / "models" / "detector").mkdir(parents=True)
    (tmp_path / "models" / "detector" / "config.pbtxt").write_text("name: 'detector'")
    run_init_container(tmp_path / "models", tmp_path / "repository")
    assert list((tmp_path / "repository").iterdir()) == []
