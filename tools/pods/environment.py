"""A container's environment as the kubelet builds it: the render's values, ConfigMaps and
Secrets, the downward API, and ``$(VAR)`` expansion. Pure."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from tools.pods.manifests import Manifests
from tools.pods.spec import Container, Obj, Pod, SpecError, parse_cpu, parse_memory


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
class Downward:
    """What the downward API gives a container of one pod."""

    pod: Pod
    ip: str
    node: str = "localhost"


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
