"""Part 2: N replicas behind the deployed Envoy under open-loop load, the batcher before the
balancer vs Triton's own dynamic batcher at each replica, beside the queueing model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.batcher.measure import late_p99_ms, open_loop, summary
from bench.batcher.params import Params
from bench.batcher.processes import Replica
from bench.batcher.report import console
from bench.batchsim import Prediction, simulate
from demo_client.stats import Recorder

# replicas N -> (the address the clients call, the replicas that serve it)
Routes = Mapping[int, tuple[str, Sequence[Replica]]]


async def part_scale_out(params: Params, triton_only: Routes, batched: Routes) -> dict[str, Any]:
    scale = params.time_scale
    points: list[dict[str, Any]] = []
    for n in params.replicas:
        for fraction in params.loads:
            rate = fraction * n * params.capacity(scale)
            seconds = params.point_s(rate)
            point: dict[str, Any] = {
                "replicas": n,
                "load": fraction,
                "rate_per_s": round(rate, 1),
                "seconds": seconds,
            }
            arrangements = [("triton_only", triton_only[n]), ("batcher", batched[n])]
            if len(points) % 2:
                arrangements.reverse()  # alternate which goes first: drift hits both alike
            for name, (url, replicas) in arrangements:
                seed = n * 1000 + int(fraction * 100)  # the same arrivals for both
                recorder, delta = await open_loop(
                    url, rate, seconds, params.warmup_s, replicas, seed
                )
                point[name] = arrangement_point(recorder, delta, scale)
            point["predicted"] = predict(params, n, rate)
            point["ratios"] = ratios(point["batcher"], point["triton_only"])
            point["ok"] = at_least_as_good(point["ratios"], params.tolerance)
            points.append(point)
            t, b = point["triton_only"], point["batcher"]
            tb, bb = t["images_per_busy_backend_s"], b["images_per_busy_backend_s"]
            console.print(
                f"  N={n} load {fraction:5.3f} ({rate:6.1f}/s): mean batch "
                f"{t['mean_batch']:6.2f} -> {b['mean_batch']:6.2f}, p99 {t['p99_ms']:7.1f} -> "
                f"{b['p99_ms']:7.1f} ms, img/busy-s {tb:7.1f} -> {bb:7.1f}"
            )
    return {"points": points}


def arrangement_point(
    recorder: Recorder, delta: Mapping[str, float], scale: float
) -> dict[str, Any]:
    executions, images, busy_s = delta["executions"], delta["images"], delta["busy_s"]
    return {
        **summary(recorder),
        "mean_batch": round(images / executions, 2) if executions else math.nan,
        "images_per_busy_backend_s": round(images / busy_s, 1) if busy_s else math.nan,
        "images_per_busy_backend_s_unscaled": round(images / busy_s * scale, 1)
        if busy_s
        else math.nan,
        "generator_late_p99_ms": round(late_p99_ms(recorder), 2),
    }


def predict(params: Params, n: int, rate: float) -> dict[str, Any]:
    s = params.time_scale
    t0, k, delay = (ms * s / 1000 for ms in (params.t0_ms, params.k_ms, params.max_queue_delay_ms))
    triton: Prediction = simulate("triton", n, rate, params.max_batch, t0, k, delay)
    batcher: Prediction = simulate("batcher", n, rate, params.max_batch, t0, k, delay)
    return {
        "triton_only": {
            "mean_batch": round(triton.mean_batch, 2),
            "p99_ms": round(triton.p99_s * 1000, 1),
        },
        "batcher": {
            "mean_batch": round(batcher.mean_batch, 2),
            "p99_ms": round(batcher.p99_s * 1000, 1),
        },
        "batch_ratio": round(batcher.mean_batch / triton.mean_batch, 2),
        "p99_ratio": round(batcher.p99_s / triton.p99_s, 2),
    }


def ratios(batcher: Mapping[str, Any], triton: Mapping[str, Any]) -> dict[str, float]:
    def ratio(key: str) -> float:
        return round(batcher[key] / triton[key], 3) if triton[key] else math.nan

    return {
        "batch": ratio("mean_batch"),
        "p99": ratio("p99_ms"),
        "images_per_busy_s": ratio("images_per_busy_backend_s"),
    }


def at_least_as_good(r: Mapping[str, float], tolerance: float) -> bool:
    return (
        r["batch"] >= 1 - tolerance
        and r["p99"] <= 1 + tolerance
        and r["images_per_busy_s"] >= 1 - tolerance
    )
