"""The pipeline's pods stopped as Kubernetes stops them, and nothing of them left.

Runs after test_pods.py (``make test-containers`` keeps the files' order: ``-p no:randomly``):
it stops the session's pods itself.
"""

from __future__ import annotations

from tools.containers.engine import Engine
from tools.pods.runner import Cluster, leftovers


def test_every_container_stops_on_sigterm_within_its_grace_and_nothing_is_left(
    pipeline: Cluster, engine: Engine
) -> None:
    """Deleting the namespace: each container's preStop hook, then SIGTERM, and a clean exit
    before its pod's terminationGracePeriodSeconds; then no pod, container, network, volume
    or tmpfs of the runner's remains."""
    stopped = pipeline.down()
    assert {r.deployment for r in stopped} == {"eds", "envoy", "triton", "batcher", "middleman"}
    for record in stopped:
        for container in record.containers:
            where = f"{record.name}/{container.name}"
            assert not container.killed, f"{where} was SIGKILLed at the end of its grace"
            assert container.exit_code == 0, f"{where} exited {container.exit_code}"
            assert container.stopped_s is not None and container.stopped_s < record.grace_s
    assert leftovers(engine, pipeline.run_dir) == {
        "pods": [], "containers": [], "volumes": [], "networks": [], "mounts": []
    }  # fmt: skip
