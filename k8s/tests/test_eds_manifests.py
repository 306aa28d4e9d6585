"""The manifests and the code agree: the control plane configured exactly as the rendered eds
Deployment configures it, and the real Envoy with the rendered bootstrap, get every Service's
endpoints from a Kubernetes API server.

No cluster runs here. The API server is the fake the Kubernetes-source tests use
(control/eds/tests/conftest.py: the real list/watch wire format, spoken to the real
kubernetes_asyncio client). From the rendered overlay, this takes the eds container's
environment and arguments, changing only what a laptop must: the API server (a kubeconfig instead
of the in-cluster one; KUBERNETES_SERVICE_HOST is the kubelet's, not the manifests'), the
downward API's values, and the listen address and ports (free ones on 127.0.0.1). From the
ConfigMap it takes Envoy's bootstrap, changing only the listener, admin and xDS addresses to
local ones. Every other setting — the source, the namespace, the Services, the EndpointSlice
port name, the clusters, the probe listener's routes — is the manifests'.

Then EndpointSlices for the four Services (some before eds starts: its list; some after: its
watch) point at real gRPC backends (``inferline_testing.fake_backend``), and the test waits until
Envoy routes to each through the listener the Envoy Service exposes for it, the Triton pod's
``inferline.io/weight`` annotation is the endpoint's weight, a terminating pod drains, and the
kubelet's probe paths answer on the probe listener. middleman's proxyless channel, a gRPC client
with the rendered bootstrap (only eds's address local) dialling the rendered
INFERLINE_MIDDLEMAN_TRITON_URL (xds:///batcher), reaches the batcher through the same eds, which
names the client by the pod's name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import json
import os
import re
import sys
import types
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml
from aiohttp import web
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline_envoy import admin as envoy_admin
from inferline_envoy import proxyless
from inferline_envoy.params import KUBERNETES
from inferline_testing.fake_backend import STATS_MODEL
from inferline_testing.harness import EnvoyProcess, FakeBackend, Process, python, wait_serving
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for
from k8s.tests.manifests import (
    OVERLAYS,
    ROOT,
    Container,
    containers,
    envoy_bootstrap,
    find,
    local_bootstrap,
    render,
)

WAIT_S = 60.0  # generous: only bounds how long a broken run takes to fail
FAKE_API = ROOT / "control" / "eds" / "tests" / "conftest.py"
LOCAL_ENV = ("INFERLINE_EDS_HOST", "INFERLINE_EDS_PORT", "INFERLINE_EDS_METRICS_PORT")


@functools.cache
def fake_api_module() -> types.ModuleType:
    """control/eds/tests/conftest.py as a module (its FakeKubeApi and routes), loaded once."""
    name = "inferline_eds_fake_kube_api"
    spec = importlib.util.spec_from_file_location(name, FAKE_API)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass resolves its annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass
class FakeCluster:
    api: Any  # FakeKubeApi
    url: str


async def start_fake_api(namespace: str) -> tuple[FakeCluster, web.AppRunner]:
    module = fake_api_module()
    fake = module.FakeKubeApi(namespace=namespace)
    app = web.Application()
    app.router.add_get(module.SLICES, fake.handle_slices)
    app.router.add_get(module.POD, fake.handle_pod)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    return FakeCluster(fake, fake.url), runner


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "eds", "user": {"token": "not-checked"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "eds"}}],
                "current-context": "fake",
            }
        ),
        encoding="utf-8",
    )
    return path


def container_env(container: Container, fields: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet would set it: the downward API from
    ``fields``, and ``$(NAME)`` in a value expanded where NAME is declared before it."""
    env: dict[str, str] = {}

    def expand(match: re.Match[str]) -> str:
        return env.get(match[1], match[0])

    for name, value in container.env().items():
        if isinstance(value, str):
            env[name] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", expand, value)
        else:
            path = value.get("fieldRef", {}).get("fieldPath")
            assert path in fields, f"{container.where}: {name} from {value}, not a known field"
            env[name] = fields[path]
    return env


# A proxyless client in a process of its own (gRPC reads its xDS bootstrap once per process): the
# backend that answers a ModelInfer sent to argv[1].
PROXYLESS_CALL = """
import asyncio, sys
from k8s.tests.test_eds_manifests import backend_behind
print(asyncio.run(backend_behind(sys.argv[1])))
"""


async def proxyless_backend(target: str, bootstrap: dict[str, Any]) -> str:
    """The backend that answers a call on ``target`` (``xds:///…``) from a gRPC client with
    ``bootstrap``, as GRPC_XDS_BOOTSTRAP_CONFIG."""
    env = {k: v for k, v in os.environ.items()
           if k not in (proxyless.BOOTSTRAP_CONFIG_ENV, proxyless.BOOTSTRAP_FILE_ENV)}  # fmt: skip
    env[proxyless.BOOTSTRAP_CONFIG_ENV] = json.dumps(bootstrap)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROXYLESS_CALL, target, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode().strip().splitlines()[-1]


def endpoint_slice(
    namespace: str,
    service: str,
    port_name: str,
    port: int,
    pod: str,
    only_port: bool = False,
    **conditions: bool,
) -> dict[str, Any]:
    # A second port, as a Service with a metrics port would have: eds must pick by name. A
    # Service with one port (middleman-rest) has only that one in its slices.
    ports = [] if only_port else [{"name": "metrics", "port": 9, "protocol": "TCP"}]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-abcde",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [*ports, {"name": port_name, "port": port, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": ["127.0.0.1"],
                "conditions": conditions or {"ready": True, "serving": True, "terminating": False},
                "targetRef": {
                    "kind": "Pod",
                    "name": pod,
                    "namespace": namespace,
                    "uid": f"uid-{pod}",
                },
                "zone": "zone-a",
            }
        ],
    }


async def backend_behind(listener: str) -> str:
    """The id of the backend that answers a ModelInfer sent to an Envoy listener."""
    async with grpc.aio.insecure_channel(listener) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        reply = await stub.ModelInfer(
            service_pb2.ModelInferRequest(model_name=STATS_MODEL), timeout=5
        )
    return str(reply.parameters["backend"].string_param)


class FakeRestBackend:
    """An HTTP backend for a REST cluster (middleman-rest): KServe's /v2/health/live, and /v2
    naming which backend answered."""

    def __init__(self, replica_id: str) -> None:
        self.replica_id, self.port = replica_id, free_port()
        self.runner: web.AppRunner | None = None

    async def start_ready(self) -> None:
        async def live(_: web.Request) -> web.Response:
            return web.Response()

        async def server(_: web.Request) -> web.Response:
            return web.json_response({"name": self.replica_id})

        app = web.Application()
        app.router.add_get("/v2/health/live", live)
        app.router.add_get("/v2", server)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def rest_backend_behind(listener: str) -> str:
    """The id of the backend that answers an HTTP/1.1 GET /v2 sent to an Envoy listener."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{listener}/v2") as response,
    ):
        return str((await response.json())["name"])


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
async def stopper() -> AsyncIterator[list[Process]]:
    started: list[Process] = []
    yield started
    await asyncio.gather(*(p.stop(5.0) for p in reversed(started)))


# Both overlays (the in-pod placement), and a component on the base (its remote placement).
@pytest.mark.parametrize(
    "target", [*(f"overlays/{o}" for o in OVERLAYS), "components/network-policies"]
)
async def test_rendered_eds_and_envoy_route_to_every_services_endpoints(
    target: str, tmp_path: Path, stopper: list[Process]
) -> None:
    objects = render(target)
    deployment = find(objects, "Deployment", "eds")
    namespace = deployment["metadata"]["namespace"]
    [eds] = [c for c in containers([deployment]) if c.name == "eds"]
    assert "command" not in eds.spec, "the image's entrypoint (inferline-eds) runs"
    env = container_env(eds, {"metadata.namespace": namespace, "metadata.name": "eds-0"})
    watched = env["INFERLINE_EDS_SERVICES"].split(",")
    port_name = env["INFERLINE_EDS_PORT_NAME"]
    # The Services rendered: in the in-pod placement (the overlays') no preprocess pool, whose
    # Envoy cluster eds announces empty (the one bootstrap has it); the GPU pods' front door is
    # Service triton. The remote placement (the base's) has them all.
    rendered = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    services = [s for s in watched if s in rendered]
    pool = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "preprocess"
    ]
    assert set(watched) - set(services) == (set() if pool else {"preprocess"})

    # What the manifests say of each other, before anything runs.
    assert int(env["INFERLINE_EDS_PORT"]) == eds.port("grpc")
    assert int(env["INFERLINE_EDS_METRICS_PORT"]) == eds.port("metrics")
    assert eds.spec["readinessProbe"]["grpc"]["port"] == eds.port("grpc")
    assert find(objects, "Service", "eds")["spec"]["ports"][0]["targetPort"] == "grpc"
    only_port: dict[str, str] = {}  # a Service without a port port_name: its only port's name
    for service in services:
        ports = [p["name"] for p in find(objects, "Service", service)["spec"]["ports"]]
        assert port_name in ports or len(ports) == 1, f"Service {service}: eds finds no port"
        if port_name not in ports:
            only_port[service] = ports[0]
    assert set(only_port) == {"middleman-rest"}
    public = dict((r, c) for c, r in KUBERNETES.rest)  # REST cluster -> listener
    triton_annotations = find(objects, "Deployment", "triton")["spec"]["template"]["metadata"][
        "annotations"
    ]
    bootstrap_text = envoy_bootstrap(objects).text()
    envoy_deployment = find(objects, "Deployment", "envoy")
    [envoy_container] = envoy_deployment["spec"]["template"]["spec"]["containers"]
    # middleman's environment as its pod gets it: the batcher hop's target and xDS bootstrap.
    [middleman] = [c for c in containers([find(objects, "Deployment", "middleman")])
                   if c.name == "middleman"]  # fmt: skip
    middleman_pod = "middleman-0"
    middleman_env = container_env(
        middleman, {"metadata.name": middleman_pod, "metadata.namespace": namespace}
    )
    batcher_target = middleman_env["INFERLINE_MIDDLEMAN_TRITON_URL"]
    assert batcher_target == "xds:///batcher", "proxyless without through-envoy"
    middleman_bootstrap = json.loads(middleman_env[proxyless.BOOTSTRAP_CONFIG_ENV])
    assert middleman_bootstrap["node"]["id"] == middleman_pod, "$(POD_NAME), expanded"
    [xds_server] = middleman_bootstrap["xds_servers"]
    assert xds_server["server_uri"] == f"eds:{eds.port('grpc')}"

    cluster, runner = await start_fake_api(namespace)
    try:
        # Backends for every Service; half of them listed, half arriving through the watch.
        backends: dict[str, FakeBackend | FakeRestBackend] = {
            s: FakeRestBackend(f"{s}-0") if s in only_port else FakeBackend(tmp_path, f"{s}-0")
            for s in services
        }
        stopper.extend(b for b in backends.values() if isinstance(b, FakeBackend))
        await asyncio.gather(*(b.start_ready() for b in backends.values()))
        for service, backend in backends.items():
            annotations = triton_annotations if service == "triton" else {}
            cluster.api.put_pod(backend.replica_id, f"uid-{backend.replica_id}", dict(annotations))

        def put(service: str, **conditions: bool) -> None:
            backend = backends[service]
            name = only_port.get(service, port_name)
            cluster.api.put_slice(
                endpoint_slice(
                    namespace,
                    service,
                    name,
                    backend.port,
                    backend.replica_id,
                    only_port=service in only_port,
                    **conditions,
                )
            )

        for service in services[:2]:
            put(service)

        # The control plane, as the Deployment configures it.
        eds_port, metrics_port = free_port(), free_port()
        local = {
            "INFERLINE_EDS_HOST": "127.0.0.1",
            "INFERLINE_EDS_PORT": str(eds_port),
            "INFERLINE_EDS_METRICS_PORT": str(metrics_port),
            "INFERLINE_EDS_KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", cluster.url)),
        }
        assert set(local) - set(env) == {"INFERLINE_EDS_KUBECONFIG"}, "only these change"
        process = Process(
            "eds", python("eds", *eds.spec.get("args", [])), tmp_path / "logs" / "eds.log",
            {**env, **local},
        )  # fmt: skip
        stopper.append(process)
        await process.start()
        await wait_serving(f"127.0.0.1:{eds_port}", process, WAIT_S)
        for service in services[2:]:
            put(service)

        # The real Envoy with the ConfigMap's bootstrap.
        config, params = local_bootstrap(bootstrap_text, eds_port)
        envoy = EnvoyProcess(tmp_path, params, config=config)
        stopper.append(envoy)
        await envoy.start_ready(WAIT_S)

        for service, backend in backends.items():
            host = await envoy_admin.wait_routable(
                envoy.admin, service, "127.0.0.1", backend.port, WAIT_S
            )
            assert host is not None and host.hostname == backend.replica_id, host
            if service == "triton":
                assert host.weight == int(triton_annotations["inferline.io/weight"])
            # Through the listener the Envoy Service exposes for this hop, to this backend: gRPC,
            # or for a REST cluster HTTP/1.1 on its hop's listener (routed by content-type).
            if service in public:
                answer = await rest_backend_behind(envoy.listener(public[service]))
            else:
                answer = await backend_behind(envoy.listener(service))
            assert answer == backend.replica_id, f"listener for {service} reached {answer}"
        exposed = {p["containerPort"] for p in envoy_container["ports"]}
        assert {port for _, port in KUBERNETES.listeners} <= exposed

        # middleman's proxyless channel: the bootstrap its pod renders, only eds's address local.
        xds_server["server_uri"] = f"127.0.0.1:{eds_port}"
        answer = await proxyless_backend(batcher_target, middleman_bootstrap)
        assert answer == backends["batcher"].replica_id, f"{batcher_target} reached {answer}"
        log = process.log.read_text(encoding="utf-8")
        for kind in ("Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment"):
            assert f"{middleman_pod} (sotw) subscribed to {kind} batcher" in log, kind

        # A Triton pod that terminates drains: Envoy sends it nothing new.
        put("triton", ready=False, serving=True, terminating=True)
        await envoy_admin.wait_host(
            envoy.admin, "triton", "127.0.0.1", backends["triton"].port,
            lambda h: h is not None and h.eds_health == "DRAINING", WAIT_S, "DRAINING",
        )  # fmt: skip

        # The kubelet's probes on the probe listener answer; the rest of the admin API does not.
        probe_url = f"http://127.0.0.1:{params.probe_port}"
        for kind in ("readinessProbe", "livenessProbe"):
            path = envoy_container[kind]["httpGet"]["path"]
            status = await asyncio.to_thread(http_status, probe_url + path)
            assert status == 200, f"Envoy's {kind} {path}: {status}"
        assert await asyncio.to_thread(http_status, probe_url + "/clusters") == 404
        assert await wait_for(
            lambda: envoy_admin.ready(envoy.admin), WAIT_S, "Envoy ready", abort=envoy.exited
        )
    finally:
        cluster.api.close_watches()
        await runner.cleanup()
        for backend in backends.values():
            if isinstance(backend, FakeRestBackend):
                await backend.stop()
