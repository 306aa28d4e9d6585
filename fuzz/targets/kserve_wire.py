"""kserve-wire: a ``ModelInferRequest``'s protobuf bytes, as a gRPC hop receives them, through
every check the hops make (:mod:`fuzz.targets.checks`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from fuzz.targets import checks
from inferline.tensors import join_bytes

Request: TypeAlias = service_pb2.ModelInferRequest


def one_input(data: bytes) -> None:
    try:
        request = Request.FromString(data)
    except DecodeError:  # not a ModelInferRequest: grpc refuses it before any servicer runs
        return
    checks.check_request(request)


def setup() -> Callable[[bytes], None]:
    return one_input


def requests() -> dict[str, Request]:
    """Requests as the clients send them: tritonclient's raw contents, typed contents, the
    classification extension, video sampling parameters, geometry parameters."""
    from inferline_testing import media

    jpeg = media.encode(media.photo_at("chelsea", 32, 24), "JPEG", quality=80)
    png = media.encode(media.photo_at("chelsea", 16, 12), "PNG")
    made: dict[str, Request] = {}

    request = Request(model_name="classifier", id="one")
    request.inputs.add(name="IMAGE", datatype="BYTES", shape=[1, 1])
    request.raw_input_contents.append(join_bytes([jpeg]))
    made["classifier_one_image"] = request

    request = Request(model_name="classifier", id="two")
    request.inputs.add(name="IMAGE", datatype="BYTES", shape=[2])
    request.raw_input_contents.append(join_bytes([jpeg, png]))
    output = request.outputs.add(name="PROBABILITIES")
    output.parameters["classification"].int64_param = 3
    made["classifier_top3"] = request

    request = Request(model_name="classifier")
    tensor = request.inputs.add(name="IMAGE", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(png)
    made["classifier_typed_contents"] = request

    request = Request(model_name="classifier_video", id="clip")
    request.inputs.add(name="VIDEO", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(join_bytes([b"\0\0\0\x18ftypisom" + bytes(64)]))
    request.parameters["fps"].double_param = 2.0
    request.parameters["max_frames"].int64_param = 8
    output = request.outputs.add(name="PROBABILITIES")
    output.parameters["classification"].uint64_param = 5
    request.outputs.add(name="FRAME_INDEX")
    made["video_sampling"] = request

    request = Request(model_name="preprocess")
    request.inputs.add(name="IMAGE", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(join_bytes([jpeg]))
    request.parameters["resize"].int64_param = 292
    request.parameters["crop"].int64_param = 260
    request.outputs.add(name="ERRORS")
    made["preprocess_geometry"] = request

    request = Request(model_name="efficientnet_lite0", model_version="1")
    request.inputs.add(name="INPUT", datatype="UINT8", shape=[2, 3, 2, 2])
    request.raw_input_contents.append(bytes(range(24)))
    made["triton_uint8"] = request

    request = Request(model_name="model")
    tensor = request.inputs.add(name="X", datatype="FP32", shape=[2, 2])
    tensor.contents.fp32_contents.extend([0.5, -1.0, 3.25, 1e30])
    tensor = request.inputs.add(name="Y", datatype="INT8", shape=[2, 1])
    tensor.contents.int_contents.extend([-128, 127])
    request.parameters["priority"].uint64_param = 1
    request.parameters["flag"].bool_param = True
    request.parameters["note"].string_param = "x"
    made["typed_fp32_int8"] = request
    return made


def seeds() -> dict[str, bytes]:
    return {name: request.SerializeToString() for name, request in requests().items()}
