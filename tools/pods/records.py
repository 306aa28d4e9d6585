"""What the runner records of each pod it starts and stops (what ``python -m tools.pods`` and
the container tests report), and why a pod cannot run."""

from __future__ import annotations

import dataclasses


class RunError(Exception):
    """The pods cannot run as rendered; the message names the pod, container and why."""


@dataclasses.dataclass
class ContainerRecord:
    name: str
    image: str
    ready: bool = False
    ready_s: float | None = None  # from its start to its readiness probe's first success
    budget_s: float | None = None  # what its probes allow before the kubelet would act
    stopped_s: float | None = None  # from the start of its stop (preStop, SIGTERM) to its exit
    exit_code: int | None = None
    killed: bool = False  # SIGKILLed at the end of its grace period
    exited_before_stop: bool = False  # had exited (or been killed) before it was stopped


@dataclasses.dataclass
class PodRecord:
    name: str
    deployment: str
    index: int
    ip: str
    containers: list[ContainerRecord]
    init_s: dict[str, float] = dataclasses.field(default_factory=dict)
    grace_s: float = 30.0
