"""A pod template's fields as values, each checked as the kubelet reads it. Pure.

:func:`container` reads a rendered container (its ports, mounts, probes and preStop hook) into a
:class:`Container`; :class:`Pod` is one replica of a Deployment's template
(:meth:`tools.pods.manifests.Manifests.pod` makes it). The mapping and its limits are listed in
:mod:`tools.pods`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]

WEIGHT_ANNOTATION = "inferline.io/weight"
_CPU = re.compile(r"^([0-9]+\.?[0-9]*|\.[0-9]+)(m?)$")
_MEMORY = re.compile(r"^((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][0-9]+)?)([EPTGMK]i?|[mk])?$")
_MEMORY_UNITS = {
    None: 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


class SpecError(ValueError):
    """A pod template the runner cannot run as written; the message names the field."""


def parse_cpu(quantity: object) -> float:
    """``"500m"`` -> 0.5, ``2`` -> 2.0."""
    match = _CPU.match(str(quantity))
    if not match:
        raise SpecError(f"CPU quantity {quantity!r} is not understood")
    value = float(match.group(1))
    return value / 1000 if match.group(2) else value


def parse_memory(quantity: object) -> int:
    """``"256Mi"`` -> 268435456, ``"1G"`` -> 10**9, ``"129e6"`` -> 129000000."""
    match = _MEMORY.match(str(quantity))
    if not match:
        raise SpecError(f"memory quantity {quantity!r} is not understood")
    return math.ceil(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])  # as the API rounds


@dataclasses.dataclass(frozen=True)
class Probe:
    """A startup, readiness or liveness probe, its port resolved to a number."""

    kind: str  # grpc, http, tcp or exec
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    service: str = ""
    command: tuple[str, ...] = ()
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3

    @property
    def budget_s(self) -> float:
        """How long the kubelet lets it fail before acting (restart, or not ready)."""
        return self.initial_delay_s + self.period_s * self.failure_threshold


def port_number(port: object, ports: Mapping[str, int], where: str) -> int:
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    if port in ports:
        return ports[str(port)]
    raise SpecError(f"{where}: port {port!r} is not a number or a port of the container")


def probe(spec: Obj | None, ports: Mapping[str, int], where: str) -> Probe | None:
    if not spec:
        return None
    timed = Probe(
        kind="",
        initial_delay_s=float(spec.get("initialDelaySeconds", 0)),
        period_s=float(spec.get("periodSeconds", 10)),
        timeout_s=float(spec.get("timeoutSeconds", 1)),
        failure_threshold=int(spec.get("failureThreshold", 3)),
    )
    if grpc := spec.get("grpc"):
        port = port_number(grpc["port"], ports, where)
        return dataclasses.replace(
            timed, kind="grpc", port=port, service=str(grpc.get("service", ""))
        )
    if http := spec.get("httpGet"):
        port = port_number(http["port"], ports, where)
        path, scheme = str(http.get("path", "/")), str(http.get("scheme", "HTTP"))
        return dataclasses.replace(timed, kind="http", port=port, path=path, scheme=scheme)
    if tcp := spec.get("tcpSocket"):
        return dataclasses.replace(timed, kind="tcp", port=port_number(tcp["port"], ports, where))
    if command := (spec.get("exec") or {}).get("command"):
        return dataclasses.replace(timed, kind="exec", command=tuple(str(c) for c in command))
    raise SpecError(f"{where}: a probe of no kind the runner knows: {sorted(spec)}")


@dataclasses.dataclass(frozen=True)
class Mount:
    volume: str
    target: str
    read_only: bool = False
    sub_path: str = ""


@dataclasses.dataclass(frozen=True)
class Volume:
    """An emptyDir (``memory``: a tmpfs) or a folder of files (configMap, secret)."""

    name: str
    kind: str  # emptyDir, memory or files
    size_bytes: int | None = None
    files: Mapping[str, tuple[bytes, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Container:
    name: str
    image: str
    spec: Obj  # the rendered container, for what create_args reads
    ports: Mapping[str, int]
    mounts: tuple[Mount, ...]
    startup: Probe | None
    readiness: Probe | None
    liveness: Probe | None
    pre_stop: tuple[str, ...] | None
    init: bool = False


def container(spec: Obj, where: str, init: bool = False) -> Container:
    ports = {
        str(p["name"]): int(p["containerPort"]) for p in spec.get("ports") or [] if p.get("name")
    }
    mounts = tuple(
        Mount(
            str(m["name"]), str(m["mountPath"]), bool(m.get("readOnly")), str(m.get("subPath", ""))
        )
        for m in spec.get("volumeMounts") or []
    )
    pre_stop = ((spec.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
    return Container(
        name=str(spec["name"]),
        image=str(spec["image"]),
        spec=spec,
        ports=ports,
        mounts=mounts,
        startup=probe(spec.get("startupProbe"), ports, f"{where} startupProbe"),
        readiness=probe(spec.get("readinessProbe"), ports, f"{where} readinessProbe"),
        liveness=probe(spec.get("livenessProbe"), ports, f"{where} livenessProbe"),
        pre_stop=tuple(str(c) for c in pre_stop["command"]) if pre_stop.get("command") else None,
        init=init,
    )


@dataclasses.dataclass(frozen=True)
class Pod:
    deployment: str
    index: int
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    init_containers: tuple[Container, ...]
    containers: tuple[Container, ...]
    volumes: tuple[Volume, ...]
    security: Obj  # the pod's securityContext
    grace_s: float
    service_account: str
    aliases: tuple[str, ...]  # the Services that select it

    @property
    def name(self) -> str:
        return f"{self.deployment}-{self.index}"

    @property
    def uid(self) -> str:
        """Its stand-in for the API server's uid (what an EndpointSlice's targetRef names)."""
        return f"podman-{self.name}"

    @property
    def images(self) -> list[str]:
        return list(dict.fromkeys(c.image for c in (*self.init_containers, *self.containers)))

    @property
    def weight(self) -> str:
        return self.annotations.get(WEIGHT_ANNOTATION, "1")
