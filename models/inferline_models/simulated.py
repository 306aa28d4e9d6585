"""A *simulated* GPU: a Triton model whose batch of b items takes t0 + k·b and uses no CPU.

For scale-out measurements on machines without GPUs. Like a GPU, a large batch costs little
more than a small one (defaults: t0 = 8 ms, k = 0.1 ms per item); unlike a CPU model, the time
is spent waiting (``time.sleep``), so several replicas on one small machine do not compete for
cores. One model instance runs one batch at a time, as one GPU would.

Same I/O as ``efficientnet_lite0`` (``INPUT`` UINT8 [3, 224, 224] → ``PROBS`` FP32 [1000]), so
every hop in front of it is exercised with real tensor sizes. Its answers are *not* a
classification: each row of ``PROBS`` is one-hot at class (first two bytes of the image, as a
little-endian uint16) mod 1000, so that a caller can check it received its own answer.

Always labelled simulated: the model name, the log lines and every result that uses it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import cast

import numpy as np
import numpy.typing as npt
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

from inferline_models.binding import Binding
from inferline_models.repository import IMAGE_SIZE, INPUT_NAME, NUM_CLASSES, OUTPUT_NAME

logger = logging.getLogger(__name__)

SIMULATED_MODEL = "simulated_gpu"
T0_MS = 8.0
K_MS = 0.1
MAX_BATCH_SIZE = 64


@dataclasses.dataclass(frozen=True)
class GpuTiming:
    """A batch of b items takes ``t0_ms + k_ms * b`` milliseconds."""

    t0_ms: float = T0_MS
    k_ms: float = K_MS

    def __post_init__(self) -> None:
        if self.t0_ms < 0 or self.k_ms < 0:
            raise ValueError(f"simulated GPU timing must not be negative: {self}")

    def batch_seconds(self, items: int) -> float:
        return (self.t0_ms + self.k_ms * items) / 1000.0

    def capacity(self, max_batch_size: int) -> float:
        """Items per second one instance serves when every batch is full."""
        return max_batch_size / self.batch_seconds(max_batch_size)


def expected_class(images: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """The class the simulated model answers for each image of ``images`` ([b, ...] uint8)."""
    flat = images.reshape(images.shape[0], -1)
    return (flat[:, 0].astype(np.int64) | (flat[:, 1].astype(np.int64) << 8)) % NUM_CLASSES


class SimulatedGpu:
    """The infer callable: sleep for the batch's simulated GPU time, answer one-hot rows."""

    def __init__(self, timing: GpuTiming) -> None:
        self.timing = timing

    def infer(self, **inputs: npt.NDArray[np.generic]) -> dict[str, npt.NDArray[np.generic]]:
        images = np.asarray(inputs[INPUT_NAME], dtype=np.uint8)
        items = images.shape[0]
        time.sleep(self.timing.batch_seconds(items))  # waits; a spinning loop would burn a core
        probs = np.zeros((items, NUM_CLASSES), dtype=np.float32)
        probs[np.arange(items), expected_class(images)] = 1.0
        return {OUTPUT_NAME: probs}


def simulated_binding(
    *,
    name: str = SIMULATED_MODEL,
    timing: GpuTiming | None = None,
    max_batch_size: int = MAX_BATCH_SIZE,
    max_queue_delay_us: int | None = None,
    instances: int = 1,
) -> Binding:
    """The simulated GPU as a PyTriton binding.

    ``max_queue_delay_us``: Triton's dynamic batcher with that delay; ``None`` turns Triton's
    dynamic batching off (each request runs as it came, as behind the batcher service).
    """
    if "simulated" not in name:
        raise ValueError(f"a simulated model's name must say so: {name!r}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    timing = timing or GpuTiming()
    batcher = None if max_queue_delay_us is None else DynamicBatcher(max_queue_delay_us)
    logger.info(
        "SIMULATED GPU %s: a batch of b takes %.3g + %.3g·b ms (sleeps, no CPU); "
        "max_batch_size %d, %s, %d instance(s)",
        name,
        timing.t0_ms,
        timing.k_ms,
        max_batch_size,
        "no dynamic batching"
        if max_queue_delay_us is None
        else f"dynamic batching max_queue_delay {max_queue_delay_us} us",
        instances,
    )
    return Binding(
        name=name,
        infer_funcs=[batch(SimulatedGpu(timing).infer) for _ in range(instances)],
        inputs=[Tensor(name=INPUT_NAME, dtype=np.uint8, shape=(3, IMAGE_SIZE, IMAGE_SIZE))],
        outputs=[Tensor(name=OUTPUT_NAME, dtype=np.float32, shape=(NUM_CLASSES,))],
        # PyTriton writes dynamic_batching only when ``batcher`` is a DynamicBatcher.
        config=ModelConfig(
            batching=True, max_batch_size=max_batch_size, batcher=cast(DynamicBatcher, batcher)
        ),
    )
