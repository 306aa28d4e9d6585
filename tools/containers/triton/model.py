"""The Triton stand-in's ``onnxruntime`` backend: a Python-based Triton backend
(``/opt/tritonserver/backends/onnxruntime/model.py``) that Triton runs for every model whose
config.pbtxt says ``platform: "onnxruntime_onnx"`` or ``backend: "onnxruntime"``.

It loads the version's ``model.onnx`` (or the config's ``default_model_filename``) with ONNX
Runtime on the CPU, runs each batch Triton's dynamic batcher forms as one call (the requests'
inputs joined along the batch axis) and answers each request with its own rows. The official
image's C++ backend does the same natively, and also on GPUs (CUDA, TensorRT); this one is for a
machine where that image cannot be pulled (tools/containers/standins.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or "model.onnx"
        path = Path(args["model_repository"]) / args["model_version"] / filename
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = [tensor["name"] for tensor in config["input"]]
        self.outputs = [tensor["name"] for tensor in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            feeds = [
                {
                    name: pb_utils.get_input_tensor_by_name(r, name).as_numpy()
                    for name in self.inputs
                }
                for r in requests
            ]
            if not self.batched:
                return [self._respond(self.session.run(self.outputs, feed)) for feed in feeds]
            sizes = [len(feed[self.inputs[0]]) for feed in feeds]
            joined = {n: np.concatenate([feed[n] for feed in feeds]) for n in self.inputs}
            results = self.session.run(self.outputs, joined)
        except Exception as e:  # noqa: BLE001 - every request of the batch gets the error
            error = pb_utils.TritonError(f"ONNX Runtime: {e}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        responses, start = [], 0
        for size in sizes:
            responses.append(self._respond([r[start : start + size] for r in results]))
            start += size
        return responses

    def _respond(self, arrays: list[Any]) -> Any:
        tensors = [
            pb_utils.Tensor(n, np.ascontiguousarray(a))
            for n, a in zip(self.outputs, arrays, strict=True)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)
