"""The objects of one render, and a Deployment's pod template read from them. Pure.

:meth:`Manifests.pod` gives one replica of a Deployment as a :class:`tools.pods.spec.Pod`, its
volumes' files read from the render's ConfigMaps and Secrets, its aliases the Services that
select it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping

from tools.pods.spec import Obj, Pod, SpecError, Volume, container, parse_memory


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
