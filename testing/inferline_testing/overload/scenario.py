"""The overload run: the capacity (closed loop), then a closed crowd and an open crowd of ten
times it, each with the paced caller during it and for the recovery after it, and each process's
peak memory meanwhile."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from demo_client.stats import Summary
from inferline_stack.config import StackConfig
from inferline_testing.overload.crowds import (
    AFTER_S,
    Spike,
    offer,
    p99_ms,
    paced_calls,
    recovered_after,
    spike,
)
from inferline_testing.overload.usage import own_cpu, peak_rss, stack_groups

MiB = 1024 * 1024

# The SIMULATED GPU of the overload runs: slow enough that the model, not the two cores of the
# machine the tests run on, is the bottleneck: a batch of 8 takes 180 ms (44 images/s).
SIMULATED = {
    "model": "simulated_gpu",
    "triton_args": "--simulated-t0-ms 100 --simulated-k-ms 10 --max-batch-size 8",
}
CAPACITY_CALLERS = 64
CROWD_CALLERS = 1024
CROWD_FACTOR = 10.0
# Not measured: the crowd's first seconds, while the burst of all its callers starting in the
# same millisecond is refused (a thousand requests queued at once take a few hundred ms).
CROWD_WARMUP_S = 5.0
DEADLINE_S = 5.0


def recovery_bound_s(unloaded_p99_ms: float) -> float:
    """Recovered: every request within the unloaded p99, plus 25% and 20 ms of noise."""
    return (unloaded_p99_ms * 1.25 + 20.0) / 1000.0


@dataclass(frozen=True)
class Phase:
    """One row of the overload table."""

    name: str
    offered: str  # what was offered: "closed 32" or "open 440/s"
    summary: Summary
    peak_rss: dict[str, int] = field(default_factory=dict)  # process -> bytes, during the phase
    # The share of the machine's cores the load generator (this process) used meanwhile: on a
    # machine it shares with the pipeline, what it costs is taken from the pipeline.
    generator_cpu: float | None = None

    @property
    def goodput(self) -> float:
        return self.summary.images_per_s

    def row(self) -> dict[str, object]:
        s = self.summary
        return {
            "phase": self.name,
            "offered": self.offered,
            "images_per_s": round(s.images_per_s, 1),
            "requests": s.requests,
            "failed": s.errors,
            "failed_by_code": s.errors_by_code,
            "p99_ms": None if s.p99_ms is None else round(s.p99_ms, 1),
            "refusal_p99_ms": None if s.failed_p99_ms is None else round(s.failed_p99_ms, 1),
            "peak_rss_mib": {k: round(v / MiB) for k, v in sorted(self.peak_rss.items())},
            "peak_rss_total_mib": round(sum(self.peak_rss.values()) / MiB),
            "generator_cpu": None if self.generator_cpu is None else round(self.generator_cpu, 2),
        }


@dataclass(frozen=True)
class Report:
    unloaded_p99_ms: float
    capacity: Phase
    crowds: list[tuple[Phase, Spike]]
    recovery_s: float  # how long the paced caller went on after each crowd

    @property
    def recovery_bound_s(self) -> float:
        return recovery_bound_s(self.unloaded_p99_ms)

    def goodput_ratio(self, crowd: Phase) -> float:
        return crowd.goodput / self.capacity.goodput

    def recovered_after_s(self, spike: Spike) -> float | None:
        return recovered_after(spike.paced, spike.ended, self.recovery_bound_s)

    def to_dict(self) -> dict[str, Any]:
        rows = [self.capacity.row()]
        for phase, crowd in self.crowds:
            refusal = crowd.refusal_p99_ms()
            recovered = self.recovered_after_s(crowd)
            rows.append(
                {
                    **phase.row(),
                    "goodput_ratio": round(self.goodput_ratio(phase), 3),
                    "paced_refusal_p99_ms": None if refusal is None else round(refusal, 1),
                    "recovered_after_s": None if recovered is None else round(recovered, 2),
                }
            )
        return {
            "deadline_s": DEADLINE_S,
            "unloaded_p99_ms": round(self.unloaded_p99_ms, 1),
            "recovery_bound_ms": round(self.recovery_bound_s * 1000, 1),
            "recovery_s": self.recovery_s,
            "capacity_images_per_s": round(self.capacity.goodput, 1),
            "phases": rows,
        }


async def measure(
    config: StackConfig, images: list[bytes], duration_s: float, recovery_s: float = AFTER_S
) -> Report:
    """Capacity, then the closed crowd and the open crowd, each ``duration_s`` long, each with
    the paced caller during it and for ``recovery_s`` after it (the crowd's requests in flight
    end within :data:`DEADLINE_S` of it)."""
    target = f"127.0.0.1:{config.public_port}"
    groups = stack_groups(config)
    await offer(target, images, duration_s=3.0, concurrency=CAPACITY_CALLERS)  # warm up
    unloaded = p99_ms(await paced_calls(target, images, 5.0)) or 0.0
    with own_cpu() as cpu:
        async with peak_rss(groups) as peaks:
            summary = await offer(
                target, images, duration_s=duration_s, concurrency=CAPACITY_CALLERS
            )
    capacity = Phase("capacity", f"closed {CAPACITY_CALLERS}", summary, dict(peaks), *cpu)
    if not summary.images:
        raise RuntimeError(f"the capacity run served nothing: failed {summary.errors_by_code}")
    rate = capacity.goodput * CROWD_FACTOR
    crowds = []
    for name, concurrency, crowd_rate, offered in (
        ("closed crowd", CROWD_CALLERS, None, f"closed {CROWD_CALLERS}"),
        ("open crowd", 4 * CROWD_CALLERS, rate, f"open {rate:.0f}/s"),
    ):
        with own_cpu() as cpu:
            async with peak_rss(groups) as peaks:
                result = await spike(
                    target,
                    images,
                    duration_s=duration_s,
                    concurrency=concurrency,
                    rate=crowd_rate,
                    warmup_s=CROWD_WARMUP_S,
                    after_s=recovery_s,
                )
        crowds.append((Phase(name, offered, result.summary, dict(peaks), *cpu), result))
    return Report(unloaded, capacity, crowds, recovery_s)
