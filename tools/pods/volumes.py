"""A pod's volumes on this machine, as the kubelet makes them (folders its containers
bind-mount, a tmpfs for ``medium: Memory``), and the mounts to undo when it goes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tools.pods.records import RunError
from tools.pods.spec import Pod


def make(pod: Pod, pod_dir: Path) -> dict[str, str]:
    """Make the pod's volumes as the kubelet does, each a folder of this machine under
    ``pod_dir`` that its containers bind-mount: an emptyDir world-writable (0777),
    ``medium: Memory`` a tmpfs mounted there, a configMap or secret its files (group-readable by
    ``fsGroup``).
    (podman's named volumes take the mode of the image's folder they are mounted on: a
    /dev/shm of 0755 in the image would make the pod's shared one unwritable.)"""
    sources = {}
    for volume in pod.volumes:
        folder = pod_dir / volume.name
        unmount_under(folder)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        sources[volume.name] = str(folder)
        if volume.kind == "emptyDir":
            folder.chmod(0o777)
        elif volume.kind == "memory":
            size = f",size={volume.size_bytes}" if volume.size_bytes else ""
            options = f"mode=0777,nosuid,nodev{size}"
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "inferline-pods", str(folder)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RunError(
                    f"pod {pod.name}: volume {volume.name} (emptyDir, medium Memory) needs a "
                    f"tmpfs, and mount failed: {done.stderr.strip()} (run as root)"
                )
        else:
            group = pod.security.get("fsGroup")
            for path, (content, mode) in volume.files.items():
                target = folder / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                if group is not None:
                    os.chown(target, 0, int(group))
                target.chmod(mode | (0o040 if group is not None else 0))
    return sources


def mounts_under(folder: Path) -> list[Path]:
    """The mount points at or under ``folder`` (from /proc/self/mounts), deepest first."""
    try:
        table = Path("/proc/self/mounts").read_text("utf-8")
    except OSError:
        return []
    root = folder.resolve()
    found = []
    for line in table.splitlines():
        point = Path(line.split()[1].replace("\\040", " "))
        if point == root or root in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_under(folder: Path) -> None:
    for point in mounts_under(folder):
        subprocess.run(["umount", str(point)], capture_output=True, check=False)
