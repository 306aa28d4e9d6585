"""The simulated GPU: its timing law, that it waits without using the CPU, and its binding."""

from __future__ import annotations

import time

import numpy as np
import pytest

from inferline_models.simulated import (
    SIMULATED_MODEL,
    GpuTiming,
    SimulatedGpu,
    expected_class,
    simulated_binding,
)
from inferline_models.triton import _bindings, _parse_args


def test_timing_law_and_capacity() -> None:
    timing = GpuTiming()
    assert (timing.t0_ms, timing.k_ms) == (8.0, 0.1)
    assert timing.batch_seconds(1) == pytest.approx(0.0081)
    assert timing.batch_seconds(64) == pytest.approx(0.0144)
    assert timing.capacity(64) == pytest.approx(64 / 0.0144)
    with pytest.raises(ValueError, match="must not be negative"):
        GpuTiming(-1.0, 0.1)


def test_a_batch_waits_t0_plus_k_b_without_using_the_cpu() -> None:
    timing = GpuTiming(t0_ms=100.0, k_ms=5.0)
    gpu = SimulatedGpu(timing)
    images = np.zeros((10, 3, 224, 224), dtype=np.uint8)
    simulated = timing.batch_seconds(10)  # 0.15 s
    # Lower bounds only, which no load can break: a wait never ends early (time.sleep), and a
    # thread that sleeps uses less CPU than the time it waits, however busy the machine is (a
    # spinning wait would use all of it). How long it took is printed, not asserted.
    waited, cpu = time.monotonic(), time.thread_time()
    gpu.infer(INPUT=images)
    waited, cpu = time.monotonic() - waited, time.thread_time() - cpu
    print(f"simulated {simulated:.3f} s: waited {waited:.3f} s, used {cpu:.4f} s of CPU")
    assert waited >= simulated - 1e-6  # (float rounding of the clock readings)
    assert cpu < 0.5 * simulated


def test_each_row_is_one_hot_at_the_images_own_class() -> None:
    images = np.zeros((3, 3, 224, 224), dtype=np.uint8)
    images[0, 0, 0, :2] = [7, 0]  # class 7
    images[1, 0, 0, :2] = [0xE8, 0x03]  # 1000 -> class 0
    images[2, 0, 0, :2] = [0x39, 0x05]  # 1337 -> class 337
    assert expected_class(images).tolist() == [7, 0, 337]
    probs = SimulatedGpu(GpuTiming(0.0, 0.0)).infer(INPUT=images)["PROBS"]
    assert probs.shape == (3, 1000) and probs.dtype == np.float32
    assert probs.argmax(axis=1).tolist() == [7, 0, 337]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)


def test_binding_is_labelled_simulated_and_dynamic_batching_is_a_choice() -> None:
    with_batcher = simulated_binding(max_batch_size=16, max_queue_delay_us=3000)
    assert with_batcher.name == SIMULATED_MODEL == "simulated_gpu"
    assert with_batcher.config.max_batch_size == 16
    assert with_batcher.config.batcher.max_queue_delay_microseconds == 3000
    assert [(t.name, t.shape) for t in with_batcher.inputs] == [("INPUT", (3, 224, 224))]
    assert [(t.name, t.shape) for t in with_batcher.outputs] == [("PROBS", (1000,))]
    assert simulated_binding(max_queue_delay_us=None).config.batcher is None
    with pytest.raises(ValueError, match="must say so"):
        simulated_binding(name="fast_gpu")


def test_cli_serves_the_simulated_model() -> None:
    args = _parse_args(
        ["--model", "simulated_gpu", "--no-dynamic-batching", "--simulated-t0-ms", "2",
         "--simulated-k-ms", "0.5", "--max-batch-size", "8", "--instances", "2"]
    )  # fmt: skip
    (binding,) = _bindings(args)
    assert binding.name == "simulated_gpu"
    assert binding.config.max_batch_size == 8 and binding.config.batcher is None
    assert len(binding.infer_funcs) == 2


def test_cli_model_defaults_to_lite0_and_repeats() -> None:
    assert _parse_args([]).models == ["efficientnet_lite0"]
    args = _parse_args(["--model", "simulated_gpu", "--model", "efficientnet_lite2"])
    assert args.models == ["simulated_gpu", "efficientnet_lite2"]
