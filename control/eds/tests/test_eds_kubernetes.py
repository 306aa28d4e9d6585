"""The Kubernetes source through the real kubernetes_asyncio client against a fake API server
that speaks the list/watch wire format (see conftest.py): list, watch, bookmarks, 410 Gone,
errors and backoff, pod weight annotations."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryRequest, DiscoveryResponse
from kubernetes_asyncio import client
from prometheus_client import REGISTRY

from eds.cache import Endpoint, EndpointCache, Health
from eds.sources.kubernetes import Backoff, KubernetesSource
from inferline_testing.harness import Process, python, wait_serving
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for_state

SERVICES = ("triton", "batcher")
WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail


def endpoint_slice(name: str, service: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "inferline",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": 8001, "protocol": "TCP"}],
        "endpoints": list(items),
    }


def pod_endpoint(ip: str, pod: str, zone: str = "zone-a", **conditions: bool) -> dict[str, Any]:
    return {
        "addresses": [ip],
        "conditions": conditions or {"ready": True, "serving": True, "terminating": False},
        "targetRef": {"kind": "Pod", "name": pod, "namespace": "inferline", "uid": f"uid-{pod}"},
        "zone": zone,
    }


class Running:
    def __init__(self, cache: EndpointCache, source: KubernetesSource) -> None:
        self.cache, self.source = cache, source

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        try:
            await wait_for_state(condition, WAIT_S, what)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the cache has {self.cache.describe()}") from None

    def endpoints(self, cluster: str = "triton") -> tuple[Endpoint, ...]:
        state = self.cache.get(cluster)
        return state.endpoints if state else ()


@pytest.fixture
async def running(kube_api: Any) -> AsyncIterator[Running]:
    kube_api.put_pod("triton-0", "uid-triton-0", {"inferline.io/weight": "2"})
    kube_api.put_pod("triton-1", "uid-triton-1")
    kube_api.put_slice(
        endpoint_slice(
            "triton-x1", "triton", pod_endpoint("10.0.0.1", "triton-0"),
            pod_endpoint("10.0.0.2", "triton-1", zone="zone-b"),
        )
    )  # fmt: skip
    kube_api.put_slice(endpoint_slice("other-x", "other", pod_endpoint("10.9.9.9", "x")))
    configuration = client.Configuration(host=kube_api.url)
    api = client.ApiClient(configuration)
    cache = EndpointCache(SERVICES)
    source = KubernetesSource(
        cache, api, "inferline", SERVICES, watch_timeout_s=30,
        backoff=Backoff(initial_s=0.01, maximum_s=0.05),
    )  # fmt: skip
    task = asyncio.create_task(source.run())
    world = Running(cache, source)
    try:
        await world.until(lambda: cache.ready, "ready")
        yield world
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


def errors() -> float:
    labels = {"source": "kubernetes"}
    return REGISTRY.get_sample_value("inferline_eds_source_errors_total", labels) or 0.0


async def test_list_fills_the_cache_with_health_zone_and_pod_weight(running: Running) -> None:
    assert running.endpoints() == (
        Endpoint("10.0.0.1", 8001, Health.HEALTHY, 2, "zone-a", "triton-0"),
        Endpoint("10.0.0.2", 8001, Health.HEALTHY, 1, "zone-b", "triton-1"),
    )
    assert running.endpoints("batcher") == ()  # declared, no slices yet
    assert running.cache.get("other") is None  # not one of the pipeline's Services
    assert running.source.lists == 1


async def test_watch_events_scale_drain_and_remove(running: Running, kube_api: Any) -> None:
    await running.until(lambda: len(kube_api.watchers) == 1, "watching")
    kube_api.put_pod("triton-2", "uid-triton-2", {"inferline.io/weight": "4"})
    kube_api.put_slice(endpoint_slice("triton-x2", "triton", pod_endpoint("10.0.0.3", "triton-2")))
    await running.until(lambda: len(running.endpoints()) == 3, "scaled to 3")
    assert running.endpoints()[2].weight == 4
    kube_api.put_slice(
        endpoint_slice(
            "triton-x1", "triton",
            pod_endpoint("10.0.0.1", "triton-0", ready=False, serving=True, terminating=True),
            pod_endpoint("10.0.0.2", "triton-1", zone="zone-b"),
        )
    )  # fmt: skip
    await running.until(
        lambda: running.endpoints()[0].health is Health.DRAINING, "triton-0 draining"
    )
    kube_api.delete_slice("triton-x2")
    await running.until(lambda: len(running.endpoints()) == 2, "triton-2 gone")
    kube_api.put_slice(endpoint_slice("batcher-x", "batcher", pod_endpoint("10.0.1.1", "b-0")))
    await running.until(lambda: len(running.endpoints("batcher")) == 1, "batcher")
    assert running.source.lists == 1  # all of it from one watch


async def test_a_watch_resumes_from_the_last_bookmark(running: Running, kube_api: Any) -> None:
    await running.until(lambda: len(kube_api.watchers) == 1, "watching")
    version = kube_api.bookmark()
    await running.until(lambda: running.source.resource_version == str(version), "at the bookmark")
    kube_api.close_watches()  # the server ends the watch (its timeout)
    await running.until(lambda: len(kube_api.watch_requests()) == 2, "watching again")
    assert kube_api.watch_requests()[-1]["resourceVersion"] == str(version)
    assert kube_api.watch_requests()[-1]["allowWatchBookmarks"].lower() == "true"
    assert running.source.lists == 1


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-410"])
async def test_410_gone_lists_again_and_catches_up(
    running: Running, kube_api: Any, as_http: bool
) -> None:
    kube_api.gone_as_http = as_http
    await running.until(lambda: len(kube_api.watchers) == 1, "watching")
    kube_api.fail_next = 1  # the watch drops and the first retry fails...
    kube_api.close_watches()
    kube_api.delete_slice("triton-x1")  # ...meanwhile the history that would replay it is gone
    kube_api.compact()
    await running.until(lambda: running.source.lists >= 2, "relisted")
    await running.until(lambda: running.endpoints() == (), "caught up")
    await running.until(lambda: len(kube_api.watchers) == 1, "watching again")
    assert running.source.lists == 2  # once: the new list's version is watchable


async def test_api_errors_back_off_and_keep_the_last_good_endpoints(
    running: Running, kube_api: Any
) -> None:
    before_errors = errors()
    good = running.endpoints()
    await running.until(lambda: len(kube_api.watchers) == 1, "watching")
    kube_api.fail_next = 3
    kube_api.close_watches()
    await running.until(lambda: errors() >= before_errors + 3, "three failures")
    assert running.endpoints() == good
    await running.until(lambda: len(kube_api.watchers) == 1, "watching again")
    assert running.source.lists == 1  # resumed from its resourceVersion, no relist
    kube_api.put_slice(endpoint_slice("triton-x2", "triton", pod_endpoint("10.0.0.3", "x")))
    await running.until(lambda: len(running.endpoints()) == 3, "caught up")


async def test_a_bad_or_missing_weight_is_1(running: Running, kube_api: Any) -> None:
    kube_api.put_pod("triton-7", "uid-triton-7", {"inferline.io/weight": "lots"})
    kube_api.put_slice(
        endpoint_slice(
            "triton-x7", "triton", pod_endpoint("10.0.0.7", "triton-7"),
            pod_endpoint("10.0.0.8", "no-such-pod"),
        )
    )  # fmt: skip
    await running.until(lambda: len(running.endpoints()) == 4, "4 endpoints")
    weights = {e.address: e.weight for e in running.endpoints()}
    assert weights["10.0.0.7"] == 1 and weights["10.0.0.8"] == 1


async def test_the_list_follows_continue_tokens(kube_api: Any) -> None:
    for i in range(5):
        kube_api.put_slice(
            endpoint_slice(f"triton-{i}", "triton", pod_endpoint(f"10.0.2.{i}", "p"))
        )
    api = client.ApiClient(client.Configuration(host=kube_api.url))
    cache = EndpointCache(["triton"])
    source = KubernetesSource(cache, api, "inferline", ["triton"])
    try:
        original = source._discovery.list_namespaced_endpoint_slice

        def small_pages(*args: Any, **kwargs: Any) -> Any:
            kwargs["limit"] = 2
            return original(*args, **kwargs)

        source._discovery.list_namespaced_endpoint_slice = small_pages  # type: ignore[method-assign]
        await source.list()
    finally:
        await api.close()
    assert len(kube_api.list_requests()) == 3
    assert len(cache.get("triton").endpoints) == 5  # type: ignore[union-attr]
    assert cache.ready


async def test_python_m_eds_serves_what_the_api_server_has(kube_api: Any, tmp_path: Path) -> None:
    """The whole process: kubeconfig -> list/watch -> cache -> xDS, SERVING once listed."""
    kube_api.put_slice(endpoint_slice("triton-x1", "triton", pod_endpoint("10.0.0.1", "t-0")))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": kube_api.url}}],
                "users": [{"name": "eds", "user": {"token": "not-checked"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "eds"}}],
                "current-context": "fake",
            }
        )
    )
    port = free_port()
    env = {
        "INFERLINE_EDS_SOURCE": "kubernetes",
        "INFERLINE_EDS_KUBECONFIG": str(kubeconfig),
        "INFERLINE_EDS_NAMESPACE": "inferline",
        "INFERLINE_EDS_SERVICES": "triton,batcher",
        "INFERLINE_EDS_HOST": "127.0.0.1",
        "INFERLINE_EDS_PORT": str(port),
        "INFERLINE_EDS_METRICS_PORT": str(free_port()),
    }
    eds = Process("eds", python("eds"), tmp_path / "eds.log", env)
    await eds.start()
    try:
        await wait_serving(f"127.0.0.1:{port}", eds, 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            fetch = channel.unary_unary(
                "/envoy.service.endpoint.v3.EndpointDiscoveryService/FetchEndpoints",
                request_serializer=bytes,
                response_deserializer=DiscoveryResponse.parse,
            )
            response = await fetch(DiscoveryRequest(resource_names=["triton", "batcher"]))
        assignments = {
            a.cluster_name: a
            for a in (ClusterLoadAssignment.parse(r.value) for r in response.resources)
        }
        assert set(assignments) == {"triton", "batcher"}
        [locality] = assignments["triton"].endpoints
        assert locality.lb_endpoints[0].endpoint.hostname == "t-0"  # type: ignore[union-attr]
        assert assignments["batcher"].endpoints == []
    finally:
        await eds.stop()
