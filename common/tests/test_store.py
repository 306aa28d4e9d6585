"""inferline.store against a real S3 API (moto's server on loopback): a repository published,
its model cards fetched back, and each way that fails saying which store and why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline import store
from inferline.catalog import ModelCard, write_card
from inferline_testing.object_stores import S3, S3_ENV, s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    with s3_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)


def repository(root: Path) -> Path:
    """Two classifiers with cards and weights, a model without a card, a half-written one."""
    for name, classes in (("cat_or_dog", 2), ("colours", 3)):
        directory = root / name
        (directory / "1").mkdir(parents=True)
        (directory / "1" / "model.onnx").write_bytes(b"\0weights of " + name.encode())
        (directory / "config.pbtxt").write_text(f'name: "{name}"')
        card = ModelCard(name=name, resize=256, crop=224, classes=classes)
        write_card(directory, card, tuple(f"class {i}" for i in range(classes)))
    (root / "detector" / "1").mkdir(parents=True)
    (root / "detector" / "config.pbtxt").write_text('name: "detector"')
    (root / ".colours.partial").mkdir()
    (root / ".colours.partial" / "inferline.json").write_text("{")
    return root


@pytest.mark.parametrize(
    ("uri", "location"),
    [
        ("s3://bucket/models", store.Location("s3", "bucket", "models")),
        ("s3://bucket", store.Location("s3", "bucket", "")),
        ("gs://bucket/a/b/", store.Location("gs", "bucket", "a/b")),
        (
            "s3://http://10.0.0.5:9000/models/repo",
            store.Location("s3", "models", "repo", "http://10.0.0.5:9000"),
        ),
        (
            "s3://minio.storage:443/models",
            store.Location("s3", "models", "", "https://minio.storage:443"),
        ),
    ],
)
def test_a_store_is_named_as_tritons_model_repository_flag_names_it(
    uri: str, location: store.Location
) -> None:
    assert store.parse(uri) == location


@pytest.mark.parametrize("uri", ["/models", "ftp://host/models", "az://account/x", "s3://"])
def test_a_uri_that_is_not_a_store_says_which_forms_are(uri: str) -> None:
    with pytest.raises(store.StoreError, match=r"s3://bucket/prefix.*gs://bucket/prefix"):
        store.parse(uri)


def test_cards_come_back_and_weights_stay_in_the_store(s3: S3, tmp_path: Path) -> None:
    uri = s3.uri("round-trip")
    written = store.publish(repository(tmp_path / "repository"), uri)
    assert "cat_or_dog/1/model.onnx" in written and "detector/config.pbtxt" in written
    assert not [key for key in written if key.startswith(".")]

    assert store.fetch_cards(uri, tmp_path / "cards") == ["cat_or_dog", "colours"]
    copied = sorted(
        p.relative_to(tmp_path / "cards").as_posix()
        for p in (tmp_path / "cards").rglob("*")
        if p.is_file()
    )
    assert copied == [
        "cat_or_dog/inferline.json", "cat_or_dog/labels.txt",
        "colours/inferline.json", "colours/labels.txt",
    ]  # fmt: skip
    source = tmp_path / "repository" / "colours" / "labels.txt"
    assert (tmp_path / "cards" / "colours" / "labels.txt").read_bytes() == source.read_bytes()


def test_a_card_that_contradicts_its_labels_is_refused_naming_the_file(
    s3: S3, tmp_path: Path
) -> None:
    root = repository(tmp_path / "repository")
    (root / "colours" / "labels.txt").write_text("red\ngreen\n")
    uri = s3.uri("bad-card")
    store.publish(root, uri)
    with pytest.raises(store.StoreError, match=r"bad-card: .*colours/labels.txt has 2 labels"):
        store.fetch_cards(uri, tmp_path / "cards")


def test_a_store_without_cards_says_how_to_publish_one(s3: S3, tmp_path: Path) -> None:
    with pytest.raises(store.StoreError, match=r"nothing-here: no model cards.*publish-models"):
        store.fetch_cards(s3.uri("nothing-here"), tmp_path / "cards")


def test_a_missing_bucket_names_the_store(s3: S3, tmp_path: Path) -> None:
    uri = f"s3://{s3.endpoint}/no-such-bucket/models"
    with pytest.raises(store.StoreError, match=r"no-such-bucket/models: .*404"):
        store.fetch_cards(uri, tmp_path / "cards")


def test_publishing_nothing_says_what_to_run(s3: S3, tmp_path: Path) -> None:
    with pytest.raises(store.StoreError, match=r"no model repository here \(run `make model`\)"):
        store.publish(tmp_path / "absent", s3.uri("x"))


def test_the_command_line_fetches_and_refuses_with_a_status(
    s3: S3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = s3.uri("cli")
    assert store.main(["publish", str(repository(tmp_path / "repository")), uri]) == 0
    assert store.main(["cards", uri, str(tmp_path / "cards")]) == 0
    assert f"model cards from {uri}: cat_or_dog, colours" in capsys.readouterr().out

    assert store.main(["cards", s3.uri("empty"), str(tmp_path / "none")]) == 1
    assert "inferline.store: " in capsys.readouterr().err
