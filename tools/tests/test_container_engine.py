"""tools.containers.engine without an engine: the capability check, the containers.conf podman
gets in a sandbox without CAP_SYS_RESOURCE, and the CA bundle pip inside a podman build trusts."""

from __future__ import annotations

import configparser
import resource
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tools.containers import engine as engines

# CapEff of a sandbox that holds every capability but CAP_SYS_RESOURCE (bit 24), and of one
# that holds them all.
WITHOUT_SYS_RESOURCE = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n"
WITH_EVERYTHING = "Name:\tpython\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n"


def runc(_: str) -> str | None:
    return "/usr/bin/runc"


def no_runc(_: str) -> str | None:
    return None


# --- has_capability ------------------------------------------------------------------------------


def test_has_capability_reads_the_effective_set() -> None:
    assert engines.has_capability(engines.CAP_SYS_RESOURCE, WITH_EVERYTHING)
    assert not engines.has_capability(engines.CAP_SYS_RESOURCE, WITHOUT_SYS_RESOURCE)
    # Only bit 24 is missing: its neighbours are held.
    assert engines.has_capability(23, WITHOUT_SYS_RESOURCE)
    assert engines.has_capability(25, WITHOUT_SYS_RESOURCE)
    assert engines.has_capability(0, "CapEff:\t0000000000000001\n")
    assert not engines.has_capability(1, "CapEff:\t0000000000000001\n")


def test_has_capability_reads_cap_eff_not_the_other_sets() -> None:
    status = "CapPrm:\t000001ffffffffff\nCapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n"
    assert not engines.has_capability(engines.CAP_SYS_RESOURCE, status)


def test_has_capability_without_a_cap_eff_line_assumes_it_is_held() -> None:
    assert engines.has_capability(engines.CAP_SYS_RESOURCE, "Name:\tpython\n")


# --- sandbox_config ------------------------------------------------------------------------------


def test_sandbox_config_is_none_where_the_capability_is_held() -> None:
    assert engines.sandbox_config(WITH_EVERYTHING, which=runc) is None


def ulimits(text: str) -> dict[str, tuple[int, int]]:
    """containers.conf's default_ulimits as name -> (soft, hard)."""
    parsed = tomllib.loads(text)
    found = {}
    for entry in parsed["containers"]["default_ulimits"]:
        name, _, limits = entry.partition("=")
        soft, _, hard = limits.partition(":")
        found[name] = (int(soft), int(hard))
    return found


def test_sandbox_config_keeps_the_limits_within_this_processs_hard_limits() -> None:
    text = engines.sandbox_config(WITHOUT_SYS_RESOURCE, which=no_runc)
    assert text is not None
    found = ulimits(text)
    assert set(found) <= {"nofile", "nproc"}
    assert "nproc" in found  # bounded by pid_max at worst
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(limit)[1]
        if name not in found:
            assert hard == resource.RLIM_INFINITY
            continue
        soft_here, hard_here = found[name]
        assert soft_here == hard_here
        assert hard == resource.RLIM_INFINITY or hard_here <= hard
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text("utf-8"))
    assert found["nproc"][1] <= pid_max


def test_sandbox_config_bounds_an_unlimited_nproc_by_pid_max_and_leaves_out_unlimited_nofile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {
        resource.RLIMIT_NOFILE: (1024, resource.RLIM_INFINITY),
        resource.RLIMIT_NPROC: (100, resource.RLIM_INFINITY),
    }
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits[which])
    monkeypatch.setattr(engines, "pid_max", lambda: 4321)
    text = engines.sandbox_config(WITHOUT_SYS_RESOURCE, which=no_runc)
    assert text is not None
    assert ulimits(text) == {"nproc": (4321, 4321)}


def test_sandbox_config_bounds_a_large_nproc_by_pid_max(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {resource.RLIMIT_NOFILE: (1024, 2048), resource.RLIMIT_NPROC: (100, 10**6)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits[which])
    monkeypatch.setattr(engines, "pid_max", lambda: 4321)
    text = engines.sandbox_config(WITHOUT_SYS_RESOURCE, which=no_runc)
    assert text is not None
    assert ulimits(text) == {"nofile": (2048, 2048), "nproc": (4321, 4321)}


def cgroups(monkeypatch: pytest.MonkeyPatch, v1: bool) -> None:
    """Make the module see a cgroup v1 (no cgroup.controllers) or v2 host."""
    controllers = "/sys/fs/cgroup/cgroup.controllers"
    base: Any = type(Path())

    class HostPath(base):
        def exists(self, *args: Any, **kwargs: Any) -> bool:
            if str(self) == controllers:
                return not v1
            return bool(super().exists(*args, **kwargs))

    monkeypatch.setattr(engines, "Path", HostPath)


@pytest.mark.parametrize(
    ("v1", "which", "picks_runc"),
    [(True, runc, True), (True, no_runc, False), (False, runc, False), (False, no_runc, False)],
    ids=["v1-runc", "v1-no-runc", "v2-runc", "v2-no-runc"],
)
def test_sandbox_config_picks_runc_only_on_cgroup_v1_with_runc_installed(
    monkeypatch: pytest.MonkeyPatch, v1: bool, which: Any, picks_runc: bool
) -> None:
    cgroups(monkeypatch, v1)
    asked = []

    def recording(name: str) -> str | None:
        asked.append(name)
        return which(name)  # type: ignore[no-any-return]

    text = engines.sandbox_config(WITHOUT_SYS_RESOURCE, which=recording)
    assert text is not None
    parsed = tomllib.loads(text)
    if picks_runc:
        assert parsed["engine"] == {"runtime": "runc"}
        assert asked == ["runc"]
    else:
        assert "engine" not in parsed
        assert 'runtime = "runc"' not in text


def test_sandbox_config_on_this_host_follows_its_cgroup_version() -> None:
    text = engines.sandbox_config(WITHOUT_SYS_RESOURCE, which=runc)
    assert text is not None
    v1 = not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    assert ('runtime = "runc"' in text) == v1


# --- podman_env ----------------------------------------------------------------------------------


def test_podman_env_leaves_an_existing_containers_conf_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTAINERS_CONF", "/etc/mine/containers.conf")
    monkeypatch.setattr(engines, "sandbox_config", lambda: "[containers]\n")
    path = tmp_path / "containers" / "containers.conf"
    assert engines.podman_env(path) == {}
    assert not path.exists()


def test_podman_env_writes_and_names_the_sandbox_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    text = '[containers]\ndefault_ulimits = ["nofile=1024:1024"]\n'
    monkeypatch.setattr(engines, "sandbox_config", lambda: text)
    path = tmp_path / "containers" / "containers.conf"
    assert engines.podman_env(path) == {"CONTAINERS_CONF": str(path)}
    assert path.read_text("utf-8") == text
    path.write_text("stale\n", "utf-8")
    assert engines.podman_env(path) == {"CONTAINERS_CONF": str(path)}
    assert path.read_text("utf-8") == text  # rewritten when it differs


def test_podman_env_is_empty_where_podmans_defaults_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    monkeypatch.setattr(engines, "sandbox_config", lambda: None)
    path = tmp_path / "containers" / "containers.conf"
    assert engines.podman_env(path) == {}
    assert not path.exists()


def test_an_engine_runs_with_its_env_over_this_processs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTAINERS_CONF", "/etc/theirs.conf")
    engine = engines.Engine("podman", {"CONTAINERS_CONF": "/build/ours.conf"})
    assert engine.podman and not engines.Engine("docker").podman
    assert engine.environ()["CONTAINERS_CONF"] == "/build/ours.conf"
    assert engine.argv("image", "ls") == ["podman", "image", "ls"]


# --- pip's CA bundle -----------------------------------------------------------------------------


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    cert = tmp_path / "proxy-ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n", "utf-8")
    return cert


@pytest.fixture
def trust(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "build" / "containers" / "pip"
    monkeypatch.setattr(engines, "PIP_TRUST", folder)
    return folder


def test_docker_builds_get_no_pip_trust_mounts(bundle: Path, trust: Path) -> None:
    assert engines.pip_trust_mounts(engines.Engine("docker"), bundle) == []
    assert not trust.exists()


def test_podman_builds_mount_a_pip_conf_naming_the_bundle(bundle: Path, trust: Path) -> None:
    mounts = engines.pip_trust_mounts(engines.Engine("podman"), bundle)
    assert mounts == ["--volume", f"{trust}:/etc/xdg/pip:ro"]
    conf = configparser.ConfigParser()
    conf.read_string((trust / "pip.conf").read_text("utf-8"))
    assert conf["global"]["cert"] == "/etc/xdg/pip/ca.pem"
    assert (trust / "ca.pem").read_bytes() == bundle.read_bytes()
    assert sorted(p.name for p in trust.iterdir()) == ["ca.pem", "pip.conf"]


def test_no_bundle_means_no_mounts(monkeypatch: pytest.MonkeyPatch, trust: Path) -> None:
    monkeypatch.setattr(engines, "pip_cert", lambda: None)
    assert engines.pip_trust_mounts(engines.Engine("podman")) == []
    assert not trust.exists()


def test_pip_trust_mounts_asks_pip_cert_when_given_no_bundle(
    monkeypatch: pytest.MonkeyPatch, bundle: Path, trust: Path
) -> None:
    monkeypatch.setattr(engines, "pip_cert", lambda: bundle)
    assert engines.pip_trust_mounts(engines.Engine("podman")) == [
        "--volume",
        f"{trust}:/etc/xdg/pip:ro",
    ]
    assert (trust / "ca.pem").read_bytes() == bundle.read_bytes()


def pip_config(answer: str, code: int = 0) -> Any:
    """A stand-in for ``pip config get global.cert``."""

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert argv[1:] == ["-m", "pip", "config", "get", "global.cert"]
        return subprocess.CompletedProcess(argv, code, answer + "\n", "")

    return run


def test_pip_cert_env_wins_over_pips_config(
    monkeypatch: pytest.MonkeyPatch, bundle: Path, tmp_path: Path
) -> None:
    other = tmp_path / "configured.pem"
    other.write_text("other", "utf-8")
    monkeypatch.setenv("PIP_CERT", str(bundle))
    assert engines.pip_cert(run=pip_config(str(other))) == bundle


def test_pip_cert_reads_pips_config_without_the_env(
    monkeypatch: pytest.MonkeyPatch, bundle: Path
) -> None:
    monkeypatch.delenv("PIP_CERT", raising=False)
    assert engines.pip_cert(run=pip_config(str(bundle))) == bundle
    assert engines.pip_cert(run=pip_config("", code=1)) is None


def test_pip_cert_naming_a_missing_file_is_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "gone.pem"
    monkeypatch.setenv("PIP_CERT", str(missing))
    assert engines.pip_cert(run=pip_config("")) is None
    monkeypatch.delenv("PIP_CERT")
    assert engines.pip_cert(run=pip_config(str(missing))) is None
