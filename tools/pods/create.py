"""A container of a pod as ``podman create``'s arguments: its security context, resource
limits, mounts, environment and command. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tools.pods.environment import expand
from tools.pods.spec import Container, Pod, SpecError, parse_cpu, parse_memory


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
