"""Rendered Kubernetes objects to podman's terms. Pure: no engine, no processes.

:class:`Manifests` holds the render; :meth:`Manifests.pod` gives a Deployment's pod template as
a :class:`Pod`; :func:`create_args` turns one of its containers into ``podman create``'s
arguments once the pod's IP is known (``status.podIP`` may be in its environment). The mapping
and its limits are listed in :mod:`tools.pods`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
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


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined variable is replaced, an undefined one
    stays as written, ``$$`` is a literal ``$``."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


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


@dataclasses.dataclass(frozen=True)
class Downward:
    """What the downward API gives a container of one pod."""

    pod: Pod
    ip: str
    node: str = "localhost"


def selects(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


class Manifests:
    """The objects of one render (``kubectl kustomize`` output, as parsed YAML documents)."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        self.objects = [o for o in objects if o]

    def of_kind(self, kind: str) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o for o in self.objects if o.get("kind") == kind}

    def deployments(self) -> dict[str, Obj]:
        return self.of_kind("Deployment")

    def services(self) -> dict[str, Obj]:
        return self.of_kind("Service")

    def data(
        self, kind: str, name: str, where: str, binary: bool = True, optional: bool = False
    ) -> dict[str, bytes]:
        """A ConfigMap's or Secret's keys and contents; a ConfigMap's ``binaryData`` too
        (volumes), or not (``binary=False``: environment variables take ``data`` only). One
        that is not in the render is an error, or nothing when the reference is ``optional``
        (as the kubelet has it)."""
        found = self.of_kind(kind).get(name)
        if found is None and optional:
            return {}
        if found is None:
            raise SpecError(f"{where}: {kind} {name!r} is not in the render")
        data = found.get("data") or {}
        if kind == "Secret":  # data is base64, stringData plain
            plain = found.get("stringData") or {}
            return {k: base64.b64decode(v) for k, v in data.items()} | {
                k: str(v).encode() for k, v in plain.items()
            }
        binary_data = (found.get("binaryData") or {}) if binary else {}
        return {k: str(v).encode() for k, v in data.items()} | {
            k: base64.b64decode(v) for k, v in binary_data.items()
        }

    def images(self, deployment: str) -> list[str]:
        """The images of a Deployment's pod template, init containers first."""
        spec = self.deployments()[deployment]["spec"]["template"]["spec"]
        found = [c["image"] for c in (*(spec.get("initContainers") or []), *spec["containers"])]
        return list(dict.fromkeys(str(i) for i in found))

    def replicas(self, deployment: str) -> int:
        """The Deployment's replicas (1 when an HPA owns the field and the render has none)."""
        spec = self.deployments()[deployment]["spec"]
        return int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)

    def pod(self, deployment: str, index: int) -> Pod:
        found = self.deployments().get(deployment)
        if found is None:
            raise SpecError(f"no Deployment {deployment!r} in the render")
        template = found["spec"]["template"]
        meta, spec = template.get("metadata") or {}, template["spec"]
        where = f"Deployment {deployment}"
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        aliases = tuple(
            name
            for name, service in sorted(self.services().items())
            if selects(service["spec"].get("selector"), labels)
        )
        return Pod(
            deployment=deployment,
            index=index,
            namespace=str(found["metadata"].get("namespace", "default")),
            labels=labels,
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            init_containers=tuple(
                container(c, f"{where} init container {c['name']}", init=True)
                for c in spec.get("initContainers") or []
            ),
            containers=tuple(
                container(c, f"{where} container {c['name']}") for c in spec["containers"]
            ),
            volumes=tuple(
                self.volume(v, f"{where} volume {v['name']}") for v in spec.get("volumes") or []
            ),
            security=spec.get("securityContext") or {},
            grace_s=float(spec.get("terminationGracePeriodSeconds", 30)),
            service_account=str(spec.get("serviceAccountName", "default")),
            aliases=aliases,
        )

    def volume(self, spec: Obj, where: str) -> Volume:
        name = str(spec["name"])
        if "emptyDir" in spec:
            empty = spec["emptyDir"] or {}
            size = parse_memory(empty["sizeLimit"]) if empty.get("sizeLimit") else None
            kind = "memory" if empty.get("medium") == "Memory" else "emptyDir"
            return Volume(name, kind, size)
        if "projected" in spec:  # its sources' files in one folder
            projected = spec["projected"]
            mode = int(projected.get("defaultMode", 0o644))
            files: dict[str, tuple[bytes, int]] = {}
            for source in projected.get("sources") or []:
                files |= self.files(source, where, mode)
            return Volume(name, "files", files=files)
        if "configMap" in spec or "secret" in spec:
            return Volume(name, "files", files=self.files(spec, where, 0o644))
        raise SpecError(f"{where}: only emptyDir, configMap, secret and projected volumes run here")

    def files(self, spec: Obj, where: str, mode: int) -> dict[str, tuple[bytes, int]]:
        """The files of a configMap or secret volume (or projected volume's source)."""
        for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
            if key not in spec:
                continue
            source = spec[key]
            ref = str(source.get("name") or source.get("secretName"))
            data = self.data(kind, ref, where, optional=bool(source.get("optional")))
            mode = int(source.get("defaultMode", mode))
            items = source.get("items")
            if items is None:
                return {k: (v, mode) for k, v in data.items()}
            files = {}
            for item in items:
                if item["key"] not in data:
                    raise SpecError(f"{where}: {kind} {ref} has no key {item['key']!r}")
                files[str(item["path"])] = (data[item["key"]], int(item.get("mode", mode)))
            return files
        raise SpecError(f"{where}: a projected volume's sources must be configMaps or secrets")


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


def field(path: str, downward: Downward, where: str) -> str:
    pod = downward.pod
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "status.podIP": downward.ip,
        "status.podIPs": downward.ip,
        "status.hostIP": downward.ip,
        "spec.nodeName": downward.node,
        "spec.serviceAccountName": pod.service_account,
    }
    if path in simple:
        return simple[path]
    if match := re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path):
        values = pod.labels if match.group(1) == "labels" else pod.annotations
        return values.get(match.group(2), "")
    raise SpecError(f"{where}: fieldRef {path!r} is not one the runner knows")


def resource_field(ref: Obj, container: Container, where: str) -> str:
    kind, _, resource = str(ref["resource"]).partition(".")
    value = ((container.spec.get("resources") or {}).get(kind) or {}).get(resource)
    if value is None:
        raise SpecError(f"{where}: resourceFieldRef {ref['resource']} is not set")
    divisor = ref.get("divisor", "1")
    if resource == "cpu":
        return str(max(1, -(-int(parse_cpu(value) * 1000) // int(parse_cpu(divisor) * 1000))))
    return str(-(-parse_memory(value) // parse_memory(divisor)))


def environment(container: Container, downward: Downward, manifests: Manifests) -> dict[str, str]:
    """The container's environment as the kubelet builds it: ``envFrom``, then ``env`` in
    order, each value's ``$(VAR)`` expanded from what came before."""
    env: dict[str, str] = {}
    where = f"{downward.pod.name} container {container.name}"
    for source in container.spec.get("envFrom") or []:
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in source:
                ref = source[key]
                optional = bool(ref.get("optional"))
                data = manifests.data(kind, ref["name"], where, binary=False, optional=optional)
                prefix = str(source.get("prefix", ""))
                env |= {prefix + k: v.decode() for k, v in data.items()}
    for entry in container.spec.get("env") or []:
        name = str(entry["name"])
        if "value" in entry or "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), env)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            env[name] = field(source["fieldRef"]["fieldPath"], downward, where)
        elif "resourceFieldRef" in source:
            env[name] = resource_field(source["resourceFieldRef"], container, where)
        else:
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if key in source:
                    ref = source[key]
                    optional = bool(ref.get("optional"))
                    data = manifests.data(kind, ref["name"], where, binary=False, optional=optional)
                    if ref["key"] in data:
                        env[name] = data[ref["key"]].decode()
                    elif not optional:
                        raise SpecError(f"{where}: {kind} {ref['name']} has no key {ref['key']}")
                    break
            else:
                raise SpecError(f"{where}: env {name}: valueFrom {sorted(source)} is not known")
    return env


def image_user(user: str) -> tuple[int | None, int | None]:
    """An image's USER as (uid, gid): numeric parts only (a name is ``None``)."""
    uid, _, gid = user.partition(":")
    return (int(uid) if uid.isdigit() else None, int(gid) if gid.isdigit() else None)


def security_args(pod: Pod, container: Container, image_user_spec: str) -> list[str]:
    """podman's arguments for the pod's and the container's securityContext (the container's
    fields win); SpecError where the kubelet would refuse to start the container."""
    pod_sc, own = pod.security, container.spec.get("securityContext") or {}
    where = f"{pod.name} container {container.name}"

    def get(key: str) -> Any:
        return own[key] if key in own else pod_sc.get(key)

    image_uid, image_gid = image_user(image_user_spec)
    uid = get("runAsUser")
    gid = get("runAsGroup")
    if get("runAsNonRoot"):
        if uid is None and image_uid is None:
            raise SpecError(
                f"{where}: runAsNonRoot, and the image's user {image_user_spec or 'root'!r} is "
                "not numeric (the kubelet cannot verify it is non-root)"
            )
        if (uid if uid is not None else image_uid) == 0:
            raise SpecError(f"{where}: runAsNonRoot, and the container would run as root")
    args = []
    if uid is not None or gid is not None:
        # the image's user (a name too) where only the group is set
        user = str(uid) if uid is not None else (image_user_spec.partition(":")[0] or "0")
        group = gid if gid is not None else (image_gid if uid is None else None)
        args.append(f"--user={user}:{group}" if group is not None else f"--user={user}")
    groups = [
        *([pod_sc["fsGroup"]] if "fsGroup" in pod_sc else []),
        *pod_sc.get("supplementalGroups", []),
    ]
    args += [f"--group-add={g}" for g in groups]
    if own.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    if own.get("privileged"):
        args.append("--privileged")
    capabilities = own.get("capabilities") or {}
    args += [f"--cap-drop={c.lower()}" for c in capabilities.get("drop") or []]
    args += [f"--cap-add={c.lower()}" for c in capabilities.get("add") or []]
    if own.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    seccomp = (get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        args.append("--security-opt=seccomp=unconfined")
    elif seccomp != "RuntimeDefault":
        raise SpecError(f"{where}: seccompProfile {seccomp} is not one the runner maps")
    return args


def resource_args(container: Container, host_cpus: int) -> list[str]:
    limits = (container.spec.get("resources") or {}).get("limits") or {}
    args = []
    if "cpu" in limits:
        args.append(f"--cpus={min(parse_cpu(limits['cpu']), float(host_cpus)):g}")
    if "memory" in limits:
        args.append(f"--memory={parse_memory(limits['memory'])}")
    return args


def mount_args(container: Container, sources: Mapping[str, str]) -> list[str]:
    """``--mount`` for each volumeMount; ``sources`` maps a pod volume's name to the folder of
    this machine that holds it."""
    args = []
    for mount in container.mounts:
        if mount.volume not in sources:
            raise SpecError(f"container {container.name}: no volume {mount.volume!r} in the pod")
        source = sources[mount.volume]
        if mount.sub_path:
            source = f"{source}/{mount.sub_path}"
        option = f"type=bind,source={source},destination={mount.target}"
        args.append(f"--mount={option}{',ro=true' if mount.read_only else ''}")
    return args


def create_args(
    pod: Pod,
    container: Container,
    env: Mapping[str, str],
    image_user_spec: str,
    sources: Mapping[str, str],
    host_cpus: int,
) -> list[str]:
    """``podman create``'s arguments for ``container`` of ``pod`` (after ``create``): options,
    the image, then the command's arguments. ``command`` replaces the image's entrypoint,
    ``args`` its command, both ``$(VAR)``-expanded."""
    args = [f"--pod={pod.name}", f"--name={pod.name}-{container.name}"]
    args += security_args(pod, container, image_user_spec)
    args += resource_args(container, host_cpus)
    args += mount_args(container, sources)
    args += [f"--env={k}={v}" for k, v in env.items()]
    if working_dir := container.spec.get("workingDir"):
        args.append(f"--workdir={working_dir}")
    command = container.spec.get("command")
    rest: Sequence[str] = [expand(str(a), env) for a in container.spec.get("args") or []]
    if command:
        args.append(f"--entrypoint={json.dumps([expand(str(c), env) for c in command])}")
    args.append(container.image)
    return [*args, *rest]
