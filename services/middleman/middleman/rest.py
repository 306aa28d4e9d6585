"""The thin HTTP/REST layer: KServe v2's REST protocol for the same models as the gRPC API.

Each route converts its request into the gRPC protocol's message (:mod:`inferline.kserve_rest`),
asks the same :class:`~middleman.service.ClassifierService` core the gRPC methods ask, and
converts the answer back; an :class:`~inferline.errors.InferError` becomes ``{"error": ...}``
with the HTTP status Triton gives the same gRPC status. Same validation, limits, admission and
metrics as the gRPC path, because they are the same code.

Routes: ``GET /v2``, ``/v2/health/live``, ``/v2/health/ready``, ``/v2/models/{m}[/versions/{v}]``,
``…/ready``, ``…/config``, ``POST …/infer`` and ``POST /v2/repository/index``.
``classifier_video`` streams over gRPC only: REST has no streaming in its protocol.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from inferline import kserve_rest as rest
from inferline import timing, tracing
from inferline.errors import InferError, invalid
from inferline.metrics import Handler, http_metrics
from middleman.models import VIDEO_MODEL
from middleman.service import ClassifierService

logger = logging.getLogger(__name__)

HEALTH = frozenset({"/v2/health/live", "/v2/health/ready"})  # not measured, as gRPC's
MODEL_PATHS = ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")

Route = Callable[[web.Request], Awaitable[web.Response]]


def json_response(document: object) -> web.Response:
    return web.Response(body=json.dumps(document).encode(), content_type=rest.JSON_TYPE)


def error_response(status: int, message: str) -> web.Response:
    return web.Response(body=rest.error_body(message), status=status, content_type=rest.JSON_TYPE)


def flag_response(ok: bool) -> web.Response:
    """A health or readiness answer: 200, or 400 as Triton answers "not ready"."""
    return web.Response(status=200 if ok else 400)


def boundary(route: Route) -> Route:
    """An InferError becomes its HTTP status with ``{"error": message}``; nothing else leaks."""

    async def handle(request: web.Request) -> web.Response:
        try:
            return await route(request)
        except InferError as exc:
            return error_response(rest.http_status(exc.code), exc.message)

    return handle


class RestApi:
    """KServe v2 REST over ``service``; ``max_body_bytes`` is the public message limit."""

    def __init__(self, service: ClassifierService, max_body_bytes: int) -> None:
        self.service, self.max_body_bytes = service, max_body_bytes
        self.live = True  # False once stopping: Envoy's health check then fails, as gRPC's does

    def application(self) -> web.Application:
        app = web.Application(
            client_max_size=self.max_body_bytes,  # a body sent without a length (chunked)
            middlewares=[
                *tracing.http_middlewares(HEALTH),
                too_large(self.max_body_bytes),
                http_metrics("middleman", HEALTH),
                *timing.http_middlewares("middleman", HEALTH),
            ],
        )
        add = app.router.add_route
        add("GET", "/v2", self.server_metadata)
        add("GET", "/v2/health/live", self.health_live)
        add("GET", "/v2/health/ready", self.health_ready)
        add("POST", "/v2/repository/index", self.repository_index)
        for path in MODEL_PATHS:
            add("GET", path, boundary(self.metadata))
            add("GET", f"{path}/ready", self.model_ready)
            add("GET", f"{path}/config", boundary(self.config))
            add("POST", f"{path}/infer", boundary(self.infer))
        return app

    async def server_metadata(self, request: web.Request) -> web.Response:
        return json_response(rest.server_metadata(self.service.server_metadata()))

    async def health_live(self, request: web.Request) -> web.Response:
        return flag_response(self.live)

    async def health_ready(self, request: web.Request) -> web.Response:
        return flag_response(self.live and await self.service.ready())

    async def repository_index(self, request: web.Request) -> web.Response:
        return json_response(rest.repository_index(await self.service.repository_index()))

    async def metadata(self, request: web.Request) -> web.Response:
        model, version = model_and_version(request)
        return json_response(rest.metadata(self.service.metadata(model, version)))

    async def model_ready(self, request: web.Request) -> web.Response:
        model, version = model_and_version(request)
        return flag_response(self.live and await self.service.model_ready(model, version))

    async def config(self, request: web.Request) -> web.Response:
        model, version = model_and_version(request)
        return json_response(rest.model_config(self.service.config(model, version).config))

    async def infer(self, request: web.Request) -> web.Response:
        model, version = model_and_version(request)
        self.service.check_model(model, version)  # NOT_FOUND before the body is read
        if model == VIDEO_MODEL:
            raise invalid(
                f"model {VIDEO_MODEL!r} streams one response per frame: call ModelStreamInfer "
                "over gRPC (REST has no streaming)"
            )
        body = await request.read()
        parsed = rest.parse_infer(body, request.headers.get(rest.HEADER_LENGTH), model, version)
        response = await self.service.infer(parsed.message, parsed.timeout_s)
        content, header_length = rest.infer_response(response, parsed)
        if header_length is None:
            return web.Response(body=content, content_type=rest.JSON_TYPE)
        headers = {rest.HEADER_LENGTH: str(header_length)}
        return web.Response(body=content, content_type=rest.BINARY_TYPE, headers=headers)


def model_and_version(request: web.Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


def too_large(limit: int) -> Any:
    """A body over ``limit`` bytes: 413 with the gRPC path's message, before it is read."""
    message = (
        f"the request body is over the limit of {limit} bytes "
        "(INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES): send fewer or smaller images per request"
    )

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (request.content_length or 0) > limit:
            return error_response(413, message)
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:  # no Content-Length: found while reading
            return error_response(413, message)

    return middleware
