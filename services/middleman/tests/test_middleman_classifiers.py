"""Several classifiers side by side: each model of the repository is served under its own name,
with its own labels and geometry, and the default one is ``classifier`` as well."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import catalog, kserve
from middleman import classifiers
from middleman.config import Config

from .conftest import (
    BASE,
    CLASSES,
    CROP,
    TRITON_MODEL,
    Fake,
    MakeMiddleman,
    bytes_request,
    call,
    rpc_error,
)

BIG, BIG_CROP, BIG_CLASSES = "fake_big", 260, 10


def write_model(repository: Path, name: str, crop: int, classes: int) -> None:
    directory = repository / name
    directory.mkdir(parents=True)
    card = catalog.ModelCard(name, resize=crop + 32, crop=crop, classes=classes)
    catalog.write_card(directory, card, tuple(f"{name} class {i}" for i in range(classes)))


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    write_model(tmp_path, TRITON_MODEL, CROP, CLASSES)
    write_model(tmp_path, BIG, BIG_CROP, BIG_CLASSES)
    return tmp_path


@pytest.fixture
def two_models(fake_triton: Fake) -> None:
    fake_triton.servicer.models[BIG] = (BIG_CROP, BIG_CLASSES)


async def index(url: str) -> list[tuple[str, str]]:
    async with grpc.aio.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = await stub.RepositoryIndex(service_pb2.RepositoryIndexRequest())
    return [(m.name, m.state) for m in response.models]


@pytest.mark.usefixtures("two_models")
async def test_every_model_of_the_repository_is_served_by_name(
    make_middleman: MakeMiddleman, repository: Path
) -> None:
    url = await make_middleman(repository=str(repository))
    assert await index(url) == [
        ("classifier", "READY"),
        (TRITON_MODEL, "READY"),
        (BIG, "READY"),
        ("classifier_video", "READY"),
    ]


@pytest.mark.usefixtures("two_models")
async def test_a_model_is_decoded_to_its_geometry_and_answers_with_its_labels(
    make_middleman: MakeMiddleman, repository: Path, fake_triton: Fake, fake_preprocess: Fake
) -> None:
    url = await make_middleman(repository=str(repository))
    request = bytes_request([b"one", b"two"], model=BIG)
    request.outputs.add(name="PROBABILITIES").parameters["classification"].int64_param = 1
    response = await call(url, request)

    assert response.model_name == BIG
    top = kserve.output_array(response, "PROBABILITIES")
    assert top.shape == (2, 1) and bytes(top[0, 0]).split(b":", 2)[2].startswith(b"fake_big class")
    (decoded,) = fake_preprocess.servicer.calls
    assert kserve.parameters(decoded) == {"resize": BIG_CROP + 32, "crop": BIG_CROP}
    (inferred,) = fake_triton.servicer.calls
    assert inferred.model_name == BIG and list(inferred.inputs[0].shape) == [2, 3, 260, 260]


@pytest.mark.usefixtures("two_models")
async def test_metadata_describes_each_models_own_classes(
    make_middleman: MakeMiddleman, repository: Path
) -> None:
    url = await make_middleman(repository=str(repository))
    async with grpc.aio.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        big = await stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=BIG))
        default = await stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="classifier"))
    assert [list(t.shape) for t in big.outputs] == [[-1, BIG_CLASSES]]
    assert [list(t.shape) for t in default.outputs] == [[-1, CLASSES]]


async def test_an_unknown_model_is_not_found_naming_every_served_one(
    make_middleman: MakeMiddleman, repository: Path, fake_triton: Fake
) -> None:
    fake_triton.servicer.models[BIG] = (BIG_CROP, BIG_CLASSES)
    url = await make_middleman(repository=str(repository))
    error = await rpc_error(url, bytes_request([b"x"], model="resnet50"))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == (
        f"unknown model 'resnet50': this server serves 'classifier', '{TRITON_MODEL}', "
        f"'{BIG}', 'classifier_video'"
    )


async def test_middleman_is_not_ready_until_every_model_is(
    make_middleman: MakeMiddleman, repository: Path, fake_triton: Fake
) -> None:
    url = await make_middleman(repository=str(repository))  # the fake has no fake_big yet
    assert await index(url) == [
        ("classifier", "UNAVAILABLE"),
        (TRITON_MODEL, "UNAVAILABLE"),
        (BIG, "UNAVAILABLE"),
        ("classifier_video", "UNAVAILABLE"),
    ]
    fake_triton.servicer.models[BIG] = (BIG_CROP, BIG_CLASSES)
    assert (await index(url))[0] == ("classifier", "READY")


def test_models_are_the_default_then_every_card_or_the_list(repository: Path) -> None:
    config = replace(BASE, repository=str(repository), triton_model=BIG)
    assert classifiers.names_to_serve(config) == [BIG, TRITON_MODEL]
    assert classifiers.names_to_serve(replace(config, models="")) == [BIG]
    assert classifiers.names_to_serve(replace(BASE, models="*")) == [TRITON_MODEL]
    listed = replace(config, models=f" {TRITON_MODEL} , {BIG}")
    assert classifiers.names_to_serve(listed) == [BIG, TRITON_MODEL]


def test_a_model_without_a_card_takes_middlemans_own_settings() -> None:
    config = replace(BASE, triton_model="simulated_gpu", resize=300, crop=240)
    served = classifiers.load(config)
    assert served.default.model == "simulated_gpu"
    assert (served.default.geometry.resize, served.default.geometry.crop) == (300, 240)
    assert len(served.default.labels) == 1000  # ImageNet-1k


def test_a_listed_model_without_a_card_is_refused_by_name(repository: Path) -> None:
    config = replace(BASE, repository=str(repository), models="mobilenet")
    with pytest.raises(catalog.CatalogError, match=r"model 'mobilenet' has no inferline\.json in"):
        classifiers.load(config)


def test_a_card_whose_labels_disagree_fails_startup_naming_the_file(repository: Path) -> None:
    (repository / BIG / catalog.LABELS_FILE).write_text("only\ntwo\n", encoding="utf-8")
    with pytest.raises(catalog.CatalogError) as caught:
        classifiers.load(Config(repository=str(repository), triton_model=TRITON_MODEL))
    assert str(caught.value) == (
        f"{repository / BIG / 'labels.txt'} has 2 labels; the card says {BIG_CLASSES}"
    )


def test_a_model_may_not_take_a_public_name(tmp_path: Path) -> None:
    write_model(tmp_path, "classifier_video", CROP, 3)
    config = Config(repository=str(tmp_path), triton_model="classifier_video")
    with pytest.raises(catalog.CatalogError, match="may not be called 'classifier_video'"):
        classifiers.load(config)
