"""What a request asks back, and the responses: the probabilities, or Triton's classification
extension (``class_count`` = k: each row's top k as ``"score:index:label"``, best first)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2

from inferline import kserve
from inferline.errors import InferError
from middleman import outputs
from middleman.outputs import ClassifiedFrame

VIDEO_TOP_K = 5


def request_for(*names: str, class_count: int | None = None) -> service_pb2.ModelInferRequest:
    """A request naming ``names`` as outputs, each with ``class_count`` when given."""
    request = service_pb2.ModelInferRequest(model_name="classifier", id="abc")
    for name in names:
        output = request.outputs.add(name=name)
        if class_count is not None:
            output.parameters["classification"].int64_param = class_count
    return request


def refusal(call: Callable[[], object]) -> str:
    with pytest.raises(InferError) as caught:
        call()
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT, caught.value
    return caught.value.message


def parse(item: bytes) -> tuple[float, int, str]:
    score, index, label = item.decode().split(":", 2)
    return float(score), int(index), label


# -- which outputs --------------------------------------------------------------------------


def test_no_output_named_means_the_probabilities() -> None:
    assert outputs.requested(request_for()) == {"PROBABILITIES": 0}


@pytest.mark.parametrize("k", [0, 1, 7, 5000])
def test_class_count_is_read_from_the_classification_parameter(k: int) -> None:
    assert outputs.requested(request_for("PROBABILITIES", class_count=k)) == {"PROBABILITIES": k}


def test_class_count_may_come_as_an_unsigned_integer() -> None:
    request = request_for("PROBABILITIES")
    request.outputs[0].parameters["classification"].uint64_param = 4
    assert outputs.requested(request) == {"PROBABILITIES": 4}


def test_an_unknown_output_is_refused_naming_the_models_output() -> None:
    message = refusal(lambda: outputs.requested(request_for("PROBABILITIES", "LOGITS")))
    assert message == "unknown output 'LOGITS': model 'classifier' has 'PROBABILITIES'"


def test_a_negative_class_count_is_refused() -> None:
    message = refusal(lambda: outputs.requested(request_for("PROBABILITIES", class_count=-2)))
    assert "'PROBABILITIES': classification must be a non-negative integer" in message


def test_a_class_count_that_is_not_an_integer_is_refused() -> None:
    request = request_for("PROBABILITIES")
    request.outputs[0].parameters["classification"].string_param = "three"
    assert "non-negative integer" in refusal(lambda: outputs.requested(request))


def test_a_video_request_naming_no_output_gets_all_three_with_the_top_k() -> None:
    counts = outputs.video_requested(request_for(), VIDEO_TOP_K)
    assert counts == {"FRAME_INDEX": 0, "TIMESTAMP": 0, "PROBABILITIES": VIDEO_TOP_K}


def test_a_video_request_gets_only_what_it_names() -> None:
    request = request_for("FRAME_INDEX", "PROBABILITIES")
    assert outputs.video_requested(request, VIDEO_TOP_K) == {"FRAME_INDEX": 0, "PROBABILITIES": 0}


def test_an_unknown_video_output_is_refused_naming_all_three() -> None:
    message = refusal(lambda: outputs.video_requested(request_for("IMAGE"), VIDEO_TOP_K))
    assert message == (
        "unknown output 'IMAGE': model 'classifier_video' has "
        "'FRAME_INDEX', 'TIMESTAMP', 'PROBABILITIES'"
    )


# -- responses -----------------------------------------------------------------------------


@st.composite
def classifications(draw: st.DrawFn) -> tuple[npt.NDArray[np.float32], int, list[str]]:
    """Probabilities [rows, classes] (no ties), a class count k, and labels (maybe too few)."""
    rows, classes = draw(st.integers(1, 4)), draw(st.integers(1, 24))
    elements = st.floats(0.0, 1.0, width=32)
    probabilities = draw(hnp.arrays(np.float32, (rows, classes), elements=elements, unique=True))
    k = draw(st.integers(1, classes + 3))
    labels = draw(st.lists(st.text(max_size=12), max_size=classes))
    return probabilities, k, labels


@given(classifications())
def test_classification_strings_are_each_rows_top_k_best_first(
    case: tuple[npt.NDArray[np.float32], int, list[str]],
) -> None:
    probabilities, k, labels = case
    response = outputs.classifier_response(
        "classifier", "abc", {"PROBABILITIES": k}, probabilities, labels
    )
    assert (response.model_name, response.model_version, response.id) == ("classifier", "1", "abc")
    strings = kserve.output_array(response, "PROBABILITIES")
    rows, classes = probabilities.shape
    assert strings.shape == (rows, min(k, classes))
    for row, items in zip(probabilities, strings, strict=True):
        parsed = [parse(item) for item in items]
        best_first = sorted(range(classes), key=lambda i: -row[i])[: min(k, classes)]
        assert [index for _, index, _ in parsed] == best_first
        for score, index, label in parsed:
            # six decimals: off by at most half the last one (0.0234375 prints as 0.023438),
            # plus float64's slack in taking the difference
            assert score == pytest.approx(float(row[index]), abs=5e-7 + 1e-12)
            assert label == (labels[index] if index < len(labels) else "")


@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=2, max_side=16)))
def test_without_a_class_count_the_probabilities_come_back_unchanged(
    probabilities: npt.NDArray[np.float32],
) -> None:
    response = outputs.classifier_response(
        "classifier", "", {"PROBABILITIES": 0}, probabilities, ["a"]
    )
    (tensor,) = response.outputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == (
        "PROBABILITIES",
        "FP32",
        list(probabilities.shape),
    )
    back = kserve.output_array(response, "PROBABILITIES")
    np.testing.assert_array_equal(back, probabilities)


FRAME = ClassifiedFrame(
    index=42, timestamp=4.2, probabilities=np.array([0.1, 0.6, 0.3], np.float32), last=False
)


@pytest.mark.parametrize("last", [False, True])
def test_a_frame_response_carries_its_frame_and_whether_it_is_the_last(last: bool) -> None:
    frame = ClassifiedFrame(FRAME.index, FRAME.timestamp, FRAME.probabilities, last)
    counts = outputs.video_requested(request_for(), top_k=2)
    response = outputs.frame_response("v1", counts, frame, ["cat", "dog", "cow"])
    assert (response.model_name, response.id) == ("classifier_video", "v1")
    assert [t.name for t in response.outputs] == ["FRAME_INDEX", "TIMESTAMP", "PROBABILITIES"]
    assert kserve.output_array(response, "FRAME_INDEX").tolist() == [42]
    assert kserve.output_array(response, "TIMESTAMP").tolist() == [4.2]
    top = kserve.output_array(response, "PROBABILITIES")
    assert top.shape == (1, 2)
    assert [parse(item)[1:] for item in top[0]] == [(1, "dog"), (2, "cow")]
    assert response.parameters["triton_final_response"].bool_param is last


def test_a_frame_response_holds_only_the_outputs_asked_for() -> None:
    counts = outputs.video_requested(request_for("PROBABILITIES"), top_k=2)
    response = outputs.frame_response("", counts, FRAME, ["cat", "dog", "cow"])
    assert [t.name for t in response.outputs] == ["PROBABILITIES"]
    np.testing.assert_array_equal(
        kserve.output_array(response, "PROBABILITIES"), FRAME.probabilities[np.newaxis]
    )
