"""The container engine: docker or podman, whichever is installed and answers.

Every command the project runs against an engine goes through :class:`Engine`, which carries the
environment the engine needs. One case needs more than the defaults: rootful podman in a
sandbox without ``CAP_SYS_RESOURCE`` (a CI container, a VM sandbox). podman raises every
container's open-file and process limits to its own defaults, which needs that capability, and
the container fails to start ("setrlimit ... operation not permitted"). There the engine gets a
``containers.conf`` of its own (``build/containers/containers.conf``, named by
``CONTAINERS_CONF``) whose default limits are this machine's own hard limits, so nothing needs
raising; on a cgroup v1 host with ``runc`` installed it also picks ``runc`` (``crun`` refuses
mixed cgroup v1/v2 mounts). A ``CONTAINERS_CONF`` already set is left as it is.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from inferline_stack.reaper import OWNER_ENV

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("docker", "podman")
SANDBOX_CONF = ROOT / "build" / "containers" / "containers.conf"
CAP_SYS_RESOURCE = 24  # capability(7)'s number

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class EngineError(Exception):
    """No engine to use; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Engine:
    """An engine that answered, and the environment its commands run with."""

    name: str  # docker or podman
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def podman(self) -> bool:
        return self.name == "podman"

    def argv(self, *args: str) -> list[str]:
        return [self.name, *args]

    def environ(self) -> dict[str, str]:
        """This process's environment and the engine's, without our owner token: what the
        engine starts (conmon, the network's DNS) is podman's to stop, not the reaper's."""
        env = {**os.environ, **self.env}
        env.pop(OWNER_ENV, None)
        return env

    def run(
        self,
        *args: str,
        check: bool = True,
        capture: bool = True,
        timeout: float | None = None,
        input_text: str | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``engine args…``; EngineError naming the command and its error when it fails and
        ``check``."""
        argv = self.argv(*args)
        try:
            done = subprocess.run(
                argv,
                env=self.environ(),
                input=input_text,
                capture_output=capture,
                text=True,
                timeout=timeout,
                cwd=cwd,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise EngineError(f"{' '.join(argv)} did not finish within {timeout} s") from e
        if check and done.returncode != 0:
            said = (done.stderr or done.stdout or "").strip() if capture else "(output above)"
            raise EngineError(f"{' '.join(argv)} failed (exit {done.returncode}): {said}")
        return done


def has_capability(number: int, status: str | None = None) -> bool:
    """Whether this process holds capability ``number`` (its effective set, /proc/self/status)."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text("utf-8")
        except OSError:
            return True  # not Linux: nothing to work around
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> number & 1)
    return True


def sandbox_config(
    status: str | None = None, which: Callable[[str], str | None] = shutil.which
) -> str | None:
    """The containers.conf text podman needs in a sandbox without CAP_SYS_RESOURCE, or None
    where podman's defaults work."""
    if has_capability(CAP_SYS_RESOURCE, status):
        return None
    lines = ["# Written by tools/containers/engine.py: podman without CAP_SYS_RESOURCE.", ""]
    limits = []
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(limit)[1]
        if limit == resource.RLIMIT_NPROC:  # podman runs the runtime with at most pid_max
            hard = min(hard, pid_max()) if hard != resource.RLIM_INFINITY else pid_max()
        if hard != resource.RLIM_INFINITY:
            limits.append(f'"{name}={hard}:{hard}"')
    lines += ["[containers]", f"default_ulimits = [{', '.join(limits)}]"]
    cgroup_v1 = not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    if cgroup_v1 and which("runc"):
        lines += ["", "[engine]", 'runtime = "runc"']
    return "\n".join(lines) + "\n"


def pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text("utf-8"))
    except (OSError, ValueError):
        return 32768  # the kernel's default


def podman_env(path: Path = SANDBOX_CONF) -> dict[str, str]:
    """CONTAINERS_CONF for podman when this machine needs it (see the module's docstring)."""
    if os.environ.get("CONTAINERS_CONF"):
        return {}
    text = sandbox_config()
    if text is None:
        return {}
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text("utf-8") != text:
        path.write_text(text, "utf-8")
    return {"CONTAINERS_CONF": str(path)}


def find_engine(
    wanted: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Runner = subprocess.run,
) -> Engine:
    """docker or podman, whichever is installed and answers ``info``; EngineError if none."""
    candidates = [wanted] if wanted else list(ENGINES)
    installed = [c for c in candidates if which(c)]
    if not installed:
        raise EngineError(
            f"this needs {' or '.join(candidates)}, and none is installed: install one "
            "(Debian: apt-get install podman)"
        )
    reasons = []
    for name in installed:
        env = podman_env() if name == "podman" else {}
        try:
            answer = run(
                [name, "info"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                env={**os.environ, **env},
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            reasons.append(f"{name} info: {e}")
            continue
        if answer.returncode == 0:
            return Engine(name, env)
        said = (answer.stderr or answer.stdout).strip().splitlines()
        reasons.append(f"{name} info exits {answer.returncode}: {said[-1] if said else ''}")
    raise EngineError(
        f"{' and '.join(installed)} {'is' if len(installed) == 1 else 'are'} installed, but no "
        f"engine answers ({'; '.join(reasons)}): "
        "start the daemon (or podman's machine/socket) and try again"
    )


PIP_TRUST = ROOT / "build" / "containers" / "pip"
PIP_TRUST_MOUNT = "/etc/xdg/pip"  # pip reads pip.conf there (XDG_CONFIG_DIRS' default)


def pip_cert(run: Runner = subprocess.run) -> Path | None:
    """The CA bundle pip here is told to trust (PIP_CERT, or pip's ``cert`` setting), if any:
    a network whose TLS is inspected by a proxy of its own."""
    configured = os.environ.get("PIP_CERT")
    if not configured:
        done = run(
            [sys.executable, "-m", "pip", "config", "get", "global.cert"],
            capture_output=True,
            text=True,
            check=False,
        )
        configured = done.stdout.strip() if done.returncode == 0 else ""
    return Path(configured) if configured and Path(configured).is_file() else None


def pip_trust_mounts(engine: Engine, cert: Path | None = None) -> list[str]:
    """Build arguments that let pip inside a build trust the CA bundle pip here trusts, without
    putting it in any image: podman mounts a pip.conf naming it, and the bundle, for the build's
    RUN steps only (what stays in an image is the empty mount point, ``/etc/xdg/pip``). docker
    builds have no such mounts: there, pip trusts the image's own CAs."""
    cert = cert or pip_cert()
    if cert is None or not engine.podman:
        return []
    PIP_TRUST.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cert, PIP_TRUST / "ca.pem")
    conf = f"[global]\ncert = {PIP_TRUST_MOUNT}/ca.pem\n"
    (PIP_TRUST / "pip.conf").write_text(conf, "utf-8")
    return ["--volume", f"{PIP_TRUST}:{PIP_TRUST_MOUNT}:ro"]
