"""The local stack's configuration, wiring and free ports; no process is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from eds import config as eds_config
from inferline import catalog
from inferline.config import ConfigError, load
from inferline_stack import certs, services
from inferline_stack import envoy as stack_envoy
from inferline_stack.config import CLUSTERS, PORT_FIELDS, PREFIX, StackConfig
from inferline_testing.ports import bindable, config_on_free_ports


def test_defaults_are_the_documented_ports() -> None:
    config = StackConfig()
    assert config.listeners == (
        ("middleman", 8080), ("preprocess", 8081), ("batcher", 8082), ("triton", 8083),
    )  # fmt: skip
    assert config.admin_url == "http://127.0.0.1:9901"
    # gRPC, HTTP, metrics, and (in-pod) the preprocess beside it and its metrics
    assert config.replica_ports("triton", 0) == (8001, 8000, 8002, 8003, 8004)
    assert config.replica_ports("triton", 7) == (8071, 8070, 8072, 8073, 8074)  # not Envoy's 8081
    assert config.replica_ports("middleman", 2) == (8290, 9380, 8293)
    assert config.replica_ports("batcher", 1) == (8192, 9282)
    assert config.services == ("triton", "batcher", "middleman")  # in-pod: no preprocess pool
    with pytest.raises(ValueError, match="at most 8"):
        config.replica_ports("triton", 8)


def test_default_replica_ports_never_collide() -> None:
    config = StackConfig()
    every = [getattr(config, name) for name in PORT_FIELDS]
    for service in ("triton", "batcher", "preprocess", "middleman"):
        every += [p for i in range(1, 8) for p in config.replica_ports(service, i)]
    assert len(set(every)) == len(every)


def test_bad_settings_fail_by_name() -> None:
    with pytest.raises(
        ConfigError,
        match="INFERLINE_STACK_BATCHER_PORT: port 8091 is also INFERLINE_STACK_PREPROCESS_PORT",
    ):
        StackConfig(batcher_port=8091)
    with pytest.raises(ConfigError, match="INFERLINE_STACK_PROXYLESS: names the clusters"):
        StackConfig(proxyless="batcher,triton")
    with pytest.raises(ConfigError, match="INFERLINE_STACK_TLS: mTLS between the services"):
        StackConfig(tls=True, proxyless="batcher")
    with pytest.raises(ConfigError, match="INFERLINE_STACK_TRITON_ARGS"):
        StackConfig(triton_args="--simulated-t0-ms '40")
    with pytest.raises(ConfigError, match="INFERLINE_STACK_PLACEMENT"):
        load(StackConfig, PREFIX, environ={"INFERLINE_STACK_PLACEMENT": "gpu"})


def test_the_configuration_travels_as_environment_variables() -> None:
    config = StackConfig(run_dir="/tmp/x", public_port=18080, batcher=False, placement="in-process")
    assert load(StackConfig, PREFIX, environ=config.environ()) == config
    assert config.environ()["INFERLINE_STACK_BATCHER"] == "false"


def test_tls_gives_every_service_its_certificate_and_envoy_the_clients(tmp_path: Path) -> None:
    config = StackConfig(run_dir=str(tmp_path), tls=True)
    made = tmp_path.resolve() / "certs"
    for service in ("middleman", "preprocess", "batcher"):
        prefix = f"INFERLINE_{service.upper()}"
        assert {k: v for k, v in env(config, service).items() if "_TLS_" in k} == {
            f"{prefix}_TLS_CERT": str(made / f"{service}.crt"),
            f"{prefix}_TLS_KEY": str(made / f"{service}.key"),
            f"{prefix}_TLS_CA": str(made / "ca.crt"),
        }
    # In-pod, Envoy's triton cluster reaches the pod's preprocess: it answers as triton, and
    # calls its Triton (mTLS on its own port too) with that certificate.
    triton = services.replica(config, "triton", 0)
    assert triton.env["INFERLINE_PREPROCESS_TLS_CERT"] == str(made / "triton.crt")
    assert triton.env["INFERLINE_PREPROCESS_TRITON_TLS"] == "true"
    assert f"--tls-ca={made / 'ca.crt'}" in services.triton_command(config, 0)
    assert triton.tls is not None and triton.tls.cert == str(made / "envoy-client.crt")
    alone = StackConfig(run_dir=str(tmp_path), tls=True, placement="remote")
    assert f"--tls-ca={made / 'ca.crt'}" in services.replica(alone, "triton", 0).argv
    params = stack_envoy.params(config)
    assert params.public_tls_cert == str(made / "public.crt")
    assert params.tls_clusters == ("middleman", "preprocess", "batcher", "triton")
    plain = StackConfig(run_dir=str(tmp_path))
    assert not stack_envoy.params(plain).tls_clusters
    assert not services.replica(plain, "middleman", 0).certs
    assert not any("_TLS_" in k for k in env(plain, "middleman"))


def test_remade_certificates_restart_what_serves_them(tmp_path: Path) -> None:
    config = StackConfig(run_dir=str(tmp_path), tls=True)
    certs.ensure(config.certs_path)
    before = {s.name: s.fingerprint() for s in stack_services(config)}
    for path in config.certs_path.iterdir():
        path.unlink()
    certs.ensure(config.certs_path)  # a new CA: every certificate differs
    after = {s.name: s.fingerprint() for s in stack_services(config)}
    assert all(before[name] != after[name] for name in before), (before, after)


def stack_services(config: StackConfig) -> list[services.Service]:
    replicas = [services.replica(config, s, 0) for s in ("middleman", "preprocess", "triton")]
    return [*replicas, stack_envoy.service(config)]


def env(config: StackConfig, service: str) -> dict[str, str]:
    return services.replica(config, service, 0).env


def test_every_hop_but_middleman_to_the_batchers_goes_through_envoy() -> None:
    config = StackConfig()  # in-pod
    assert config.services == ("triton", "batcher", "middleman")
    middleman = env(config, "middleman")
    assert middleman["INFERLINE_MIDDLEMAN_PORT"] == "8090"
    assert middleman["INFERLINE_MIDDLEMAN_TRITON_URL"] == "xds:///batcher"  # proxyless
    tls = env(StackConfig(tls=True, run_dir="/tmp/tls-stack"), "middleman")
    assert tls["INFERLINE_MIDDLEMAN_TRITON_URL"] == "127.0.0.1:8082"  # mTLS: Envoy's
    assert middleman["INFERLINE_MIDDLEMAN_PLACEMENT"] == "in-pod"
    assert middleman["INFERLINE_MIDDLEMAN_PREPROCESS_URL"] == ""
    assert env(config, "batcher")["INFERLINE_BATCHER_UPSTREAM_URL"] == "127.0.0.1:8083"
    second = services.replica(config, "triton", 1)  # a GPU pod: Triton and its preprocess
    assert second.argv[1:3] == ["-m", "inferline_stack.pod"]
    command = services.triton_command(config, 1)
    assert "--grpc-port=8011" in command and "--address=127.0.0.1" in command
    assert second.env["INFERLINE_PREPROCESS_TRITON_URL"] == "127.0.0.1:8011"  # loopback only
    ring = second.env["INFERLINE_PREPROCESS_SHM_PREFIX"]  # one per stack and pod
    assert ring.startswith("inferline-") and ring.endswith("-triton-1")
    other = StackConfig(run_dir="/tmp/another-stack")
    assert services.replica(other, "triton", 1).env["INFERLINE_PREPROCESS_SHM_PREFIX"] != ring
    assert (second.name, second.endpoint().port, second.endpoint().name) == (
        "triton-1", 8013, "triton-1",
    )  # fmt: skip
    remote = StackConfig(placement="remote")
    assert remote.services == ("triton", "batcher", "preprocess", "middleman")
    assert env(remote, "middleman")["INFERLINE_MIDDLEMAN_PREPROCESS_URL"] == "127.0.0.1:8081"
    alone = services.replica(remote, "triton", 1)
    assert "--grpc-port=8011" in alone.argv and alone.endpoint().port == 8011


def test_the_direct_path_and_in_process_decoding_are_configuration_choices() -> None:
    config = StackConfig(batcher=False, placement="in-process", model="simulated_gpu")
    assert config.services == ("triton", "middleman")
    middleman = env(config, "middleman")
    assert middleman["INFERLINE_MIDDLEMAN_TRITON_URL"] == "127.0.0.1:8083"  # Envoy -> Triton
    assert middleman["INFERLINE_MIDDLEMAN_PREPROCESS_URL"] == ""
    assert middleman["INFERLINE_MIDDLEMAN_TRITON_MODEL"] == "simulated_gpu"


def test_triton_args_reach_every_replica() -> None:
    config = StackConfig(model="simulated_gpu", triton_args="--simulated-t0-ms 40")
    argv = services.triton_command(config, 3)
    assert argv[-2:] == ["--simulated-t0-ms", "40"] and "--model=simulated_gpu" in argv


def test_middleman_dials_the_batchers_over_xds_when_they_are_proxyless(tmp_path: Path) -> None:
    bootstrap = str(tmp_path.resolve() / "xds-bootstrap.json")
    config = StackConfig(run_dir=str(tmp_path), proxyless="batcher")
    batcher, middleman = env(config, "batcher"), env(config, "middleman")
    assert middleman["INFERLINE_MIDDLEMAN_TRITON_URL"] == "xds:///batcher"
    assert middleman["GRPC_XDS_BOOTSTRAP"] == bootstrap
    assert batcher["INFERLINE_BATCHER_UPSTREAM_URL"] == "127.0.0.1:8083"  # the batch hop: Envoy
    assert "GRPC_XDS_BOOTSTRAP" not in batcher
    envoy = env(StackConfig(run_dir=str(tmp_path), proxyless=""), "middleman")
    assert envoy["INFERLINE_MIDDLEMAN_TRITON_URL"] == "127.0.0.1:8082"
    assert "GRPC_XDS_BOOTSTRAP" not in envoy
    services.write_xds_bootstrap(config)
    assert "127.0.0.1:18000" in (tmp_path / "xds-bootstrap.json").read_text()


def test_a_changed_setting_changes_the_fingerprint() -> None:
    one = services.replica(StackConfig(), "middleman", 0)
    two = services.replica(StackConfig(batcher=False), "middleman", 0)
    assert one.fingerprint() == services.replica(StackConfig(), "middleman", 0).fingerprint()
    assert one.fingerprint() != two.fingerprint()


def test_envoy_is_rendered_for_the_stack_ports() -> None:
    config = StackConfig(public_port=18080, envoy_admin_port=19901, eds_port=28000)
    envoy = stack_envoy.service(config)
    assert "--disable-hot-restart" in envoy.argv
    assert "port_value: 18080" in envoy.inputs and "port_value: 19901" in envoy.inputs
    assert "port_value: 28000" in envoy.inputs


def test_replica_names() -> None:
    assert services.parse_replica_name("triton-3") == ("triton", 3)
    assert services.parse_replica_name("triton") is None  # the old layout's name
    assert services.parse_replica_name("envoy-0") is None


def test_free_ports_leave_room_for_every_replica(tmp_path: Path) -> None:
    config = config_on_free_ports(tmp_path, placement="in-process", eds_port=18000)
    assert config.placement == "in-process" and config.eds_port == 18000
    every = [getattr(config, name) for name in PORT_FIELDS]
    for service in ("triton", "batcher", "preprocess", "middleman"):
        for i in range(1, 8):
            every += config.replica_ports(service, i)
    assert len(set(every)) == len(every)
    assert all(bindable(p) for p in every if p != 18000)


def card(repository: Path, name: str) -> None:
    (repository / name).mkdir(parents=True)
    labels = tuple(f"class {i}" for i in range(3))
    catalog.write_card(repository / name, catalog.ModelCard(name, 256, 224, 3), labels)


def test_triton_and_middleman_serve_every_classifier_of_the_repository(tmp_path: Path) -> None:
    for name in ("efficientnet_lite0", "efficientnet_lite2", "mine"):
        card(tmp_path, name)
    config = StackConfig(model_repository=str(tmp_path))
    assert config.served_models() == ["efficientnet_lite0", "efficientnet_lite2", "mine"]
    argv = services.triton_command(config, 0)
    assert [a for a in argv if a.startswith("--model=")] == [
        "--model=efficientnet_lite0", "--model=efficientnet_lite2", "--model=mine",
    ]  # fmt: skip
    middleman = env(config, "middleman")
    assert middleman["INFERLINE_MIDDLEMAN_TRITON_MODEL"] == "efficientnet_lite0"
    assert middleman["INFERLINE_MIDDLEMAN_MODELS"] == "efficientnet_lite2,mine"
    assert middleman["INFERLINE_MIDDLEMAN_REPOSITORY"] == str(tmp_path)

    listed = StackConfig(model_repository=str(tmp_path), model="mine", models="efficientnet_lite0")
    assert listed.served_models() == ["mine", "efficientnet_lite0"]
    assert StackConfig(model_repository=str(tmp_path), models="").served_models() == [
        "efficientnet_lite0"
    ]


def test_the_simulated_gpu_is_served_alone(tmp_path: Path) -> None:
    card(tmp_path, "efficientnet_lite0")
    config = StackConfig(model_repository=str(tmp_path), model="simulated_gpu")
    assert config.served_models() == ["simulated_gpu"]


def test_a_listed_model_missing_from_the_repository_is_named(tmp_path: Path) -> None:
    config = StackConfig(model_repository=str(tmp_path), models="efficientnet_lite2")
    with pytest.raises(ValueError) as caught:
        config.served_models()
    assert str(caught.value) == (
        f"model 'efficientnet_lite2' (INFERLINE_STACK_MODELS) is not in {tmp_path}: "
        "`make model MODELS=efficientnet_lite2` builds a built-in one, "
        "`python -m inferline_models add` imports your own"
    )


def test_the_control_planes_default_clusters_are_the_stacks() -> None:
    """eds alone (make deploy's, a developer's) declares every cluster Envoy has, as the
    stack's does."""
    assert set(eds_config.Config().service_names) == set(CLUSTERS)
