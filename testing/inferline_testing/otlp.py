"""An OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` (binary protobuf or JSON, gzip or
not, as a collector takes them: Triton's exporter sends JSON), every span kept in memory with
the service that sent it, as the OpenTelemetry protocol carries them.

The services export through their real OTLP exporter to it; what a test reads is what any
collector would have received."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from inferline_testing.ports import free_port


@dataclass(frozen=True)
class Received:
    service: str
    span: trace_pb2.Span

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    def attribute(self, key: str) -> object:
        for attribute in self.span.attributes:
            if attribute.key == key:
                value = attribute.value
                return getattr(value, str(value.WhichOneof("value")))
        return None


class Receiver:
    def __init__(self) -> None:
        self.spans: list[Received] = []
        # Each export's services and the value of the header a test asked them to send
        self.exports: list[tuple[frozenset[str], str | None]] = []
        self.header = "x-inferline-test"

    def of_trace(self, trace_id: str) -> list[Received]:
        return [r for r in self.spans if r.trace_id == trace_id]

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if request.content_type == "application/json":
            export = from_json(body)
        else:
            export = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        services = set()
        for resource_spans in export.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            services.add(service)
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(Received(service, span) for span in scope_spans.spans)
        self.exports.append((frozenset(services), request.headers.get(self.header)))
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")


_IDS = ("traceId", "spanId", "parentSpanId")


def from_json(body: bytes) -> trace_service_pb2.ExportTraceServiceRequest:
    """OTLP/JSON: protobuf's JSON mapping, but for ids in hex rather than base64 (the OTLP
    specification's exception)."""

    def ids_to_base64(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _IDS and isinstance(value, str):
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                else:
                    ids_to_base64(value)
        elif isinstance(node, list):
            for item in node:
                ids_to_base64(item)

    document = json.loads(body)
    ids_to_base64(document)
    export = trace_service_pb2.ExportTraceServiceRequest()
    json_format.ParseDict(document, export, ignore_unknown_fields=True)
    return export


@contextmanager
def receiver() -> Iterator[tuple[Receiver, str]]:
    """A receiver running on a thread of its own (its own event loop: the services export
    whenever they like, between tests too) and its OTLP endpoint, ``http://127.0.0.1:<port>``."""
    found, port = Receiver(), free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def serve() -> web.AppRunner:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", found._traces)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(serve())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="otlp-receiver", daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the OTLP receiver did not start")
    try:
        yield found, f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
