"""One image's top classes with where its answer's time went: the ``Server-Timing`` every
answer of the pipeline carries (docs/tracing.md), which tritonclient's clients do not return.

So this one call is made with the KServe v2 protocol's own parts, public in tritonclient: over
gRPC the generated stub (Envoy's share in the answer's headers, the services' in its trailers),
over HTTP/REST aiohttp with tritonclient's request body and result parser (``Server-Timing``
headers).
"""

from __future__ import annotations

import contextlib
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import numpy as np
import tritonclient.grpc as grpc_client
import tritonclient.http as http_client
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from demo_client.classify import Prediction, parse_entry
from demo_client.hops import HOPS
from demo_client.load import INPUT_NAME, OUTPUT_NAME
from demo_client.transports import ClientTls

SERVER_TIMING = "server-timing"
TRACEPARENT = "traceparent"


@dataclass(frozen=True)
class Timed:
    predictions: list[Prediction]
    timing: dict[str, float]  # hop -> milliseconds, in the pipeline's order


def parse_timing(values: list[str]) -> dict[str, float]:
    """``Server-Timing`` values (``name;dur=ms, ...``) as hop -> ms, the pipeline's hops first."""
    found: dict[str, float] = {}
    for metric in ",".join(values).split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        for param in params:
            key, _, number = param.partition("=")
            if name and key.strip() == "dur":
                with contextlib.suppress(ValueError):
                    found[name] = float(number)
    return {**{h: found[h] for h in HOPS if h in found}, **found}


def format_timing(timing: dict[str, float]) -> str:
    return "  ".join(f"{name} {ms:.1f} ms" for name, ms in timing.items()) or "(none sent)"


class TimedClassifier:
    """Classifies one image at a time at ``target``, returning its answer's per-hop timing."""

    def __init__(
        self, target: str, protocol: str, tls: ClientTls | None = None, token: str | None = None
    ) -> None:
        self.target, self.protocol, self.tls = target, protocol, tls
        self.headers = {"authorization": f"Bearer {token}"} if token else {}
        self._channel: grpc.aio.Channel | None = None
        self._session: aiohttp.ClientSession | None = None

    async def classify(
        self, model: str, image: bytes, k: int, timeout_s: float, traceparent: str | None = None
    ) -> Timed:
        """The top ``k`` classes of ``image`` and its answer's timing; ``traceparent`` (a W3C
        trace context) goes with the call, as gRPC metadata or an HTTP header, when given."""
        headers = (
            self.headers if traceparent is None else {**self.headers, TRACEPARENT: traceparent}
        )
        if self.protocol == "http":
            return await self._http(model, image, k, timeout_s, headers)
        return await self._grpc(model, image, k, timeout_s, headers)

    async def _grpc(
        self, model: str, image: bytes, k: int, timeout_s: float, headers: dict[str, str]
    ) -> Timed:
        if self._channel is None:
            self._channel = self._open_channel()
        request = service_pb2.ModelInferRequest(model_name=model)
        request.inputs.add(name=INPUT_NAME, datatype="BYTES", shape=[1])
        request.raw_input_contents.append(
            serialize_byte_tensor(np.array([image], dtype=np.object_)).item()
        )
        output = request.outputs.add(name=OUTPUT_NAME)
        output.parameters["classification"].int64_param = k
        call = service_pb2_grpc.GRPCInferenceServiceStub(self._channel).ModelInfer(
            request, timeout=timeout_s, metadata=tuple(headers.items())
        )
        try:
            response = await call
            metadata = [*(await call.initial_metadata()), *(await call.trailing_metadata())]
        except grpc.aio.AioRpcError as exc:
            raise InferenceServerException(exc.details(), str(exc.code())) from None
        timing = [str(v) for key, v in metadata if key == SERVER_TIMING]
        return Timed(_top(grpc_client.InferResult(response)), parse_timing(timing))

    def _open_channel(self) -> grpc.aio.Channel:
        if self.tls is None:
            return grpc.aio.insecure_channel(self.target)

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as file:
                return file.read()

        credentials = grpc.ssl_channel_credentials(
            read(self.tls.ca), read(self.tls.key), read(self.tls.cert)
        )
        return grpc.aio.secure_channel(self.target, credentials)

    async def _http(
        self, model: str, image: bytes, k: int, timeout_s: float, headers: dict[str, str]
    ) -> Timed:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        tensor = http_client.InferInput(INPUT_NAME, [1], "BYTES")
        tensor.set_data_from_numpy(np.array([image], dtype=np.object_), binary_data=True)
        wanted = http_client.InferRequestedOutput(OUTPUT_NAME, binary_data=False, class_count=k)
        body, json_size = http_client.InferenceServerClient.generate_request_body(
            [tensor], outputs=[wanted]
        )
        headers = {**headers, "Inference-Header-Content-Length": str(json_size)}
        scheme, context = ("https", self._ssl()) if self.tls else ("http", None)
        url = f"{scheme}://{self.target}/v2/models/{model}/infer"
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._session.post(
                url, data=body, headers=headers, timeout=timeout, ssl=context or True
            ) as answer:
                data = await answer.read()
                if answer.status != 200:
                    raise InferenceServerException(
                        data.decode(errors="replace"), str(answer.status)
                    )
                length = answer.headers.get("Inference-Header-Content-Length")
                result = http_client.InferResult.from_response_body(
                    data, header_length=int(length) if length else None
                )
                timing = answer.headers.getall("Server-Timing", [])
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise InferenceServerException(str(exc) or type(exc).__name__, "UNAVAILABLE") from None
        return Timed(_top(result), parse_timing(list(timing)))

    def _ssl(self) -> ssl.SSLContext:
        assert self.tls is not None
        return self.tls.ssl_context()

    async def aclose(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        if self._session is not None:
            await self._session.close()


def _top(result: Any) -> list[Prediction]:
    entries = result.as_numpy(OUTPUT_NAME)
    if entries is None or entries.ndim != 2 or entries.shape[0] != 1:
        raise ValueError(f"unexpected {OUTPUT_NAME} in the response")
    return [parse_entry(e) for e in entries[0]]
