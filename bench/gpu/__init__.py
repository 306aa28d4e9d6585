"""The pipeline on a machine with an NVIDIA GPU -> bench/results/gpu.json: how many CPU cores
one GPU needs.

Three parts (``--parts``, all by default), each a figure the CPU-only benchmarks cannot give:

1. **decode**: DALI's mixed decoder (nvJPEG, and the hardware JPEG decoder where the GPU has
   one) on batches of 64 1920x1080 JPEGs: images/s (``bench.gpu_preprocess`` measures the same
   with its agreement checks).
2. **model**: the repository's EfficientNet-Lite0 on the GPU through the local Triton (PyTriton,
   ``python -m inferline_models.triton --execution-provider cuda|tensorrt``), ONNX Runtime with
   the CUDA and then the TensorRT execution provider (TensorRT as config.pbtxt asks of the
   official image: FP16, one engine for batch 1..64). At batch 1, 8, 16, 32 and 64, one request
   in flight: images/s and p50/p99 latency of tritonclient gRPC calls carrying already decoded
   uint8 batches. Then batch 64 with 4 requests in flight: the most images/s this Triton gets
   out of the GPU ("saturated").
3. **pipeline**: the default local stack with decoding on the GPU (preprocess with
   ``INFERLINE_PREPROCESS_BACKEND=dali-gpu``) and the model on the GPU (TensorRT, or CUDA
   where TensorRT does not start), under the demo client at 1 and 8 images per request: CPU
   ms per image by process (``bench.pipeline``'s table). Then **cores per GPU**: the server
   side's CPU ms per image (every process but the demo client, which stands for the users)
   times the GPU's saturated images/s from part 2, over 1,000 ms: the cores that are busy
   when the pipeline keeps one GPU saturated. ``cores_per_gpu_including_client`` adds the
   demo client's share, for a machine that also generates its own load.

Needs a CUDA GPU that DALI sees: without one it exits 2 saying so, or with
``--skip-if-no-gpu`` (CI) prints SKIPPED and exits 0, writing nothing. The model on the GPU
needs ONNX Runtime's GPU build in place of the CPU one, at the version constraints.txt pins::

    pip uninstall -y onnxruntime
    pip install 'onnxruntime-gpu[cuda,cudnn]==<onnxruntime's version>'

and the TensorRT provider needs TensorRT 10's libraries where the dynamic loader finds them
(e.g. the ``tensorrt-cu12`` wheel's ``tensorrt_libs`` directory on ``LD_LIBRARY_PATH``). A
provider that is missing or does not start is recorded under ``skipped`` with the reason, and
the other parts still run.

Time (``--duration`` D seconds per measurement, default 12), on a GPU machine:
decode ≈ 10 s (JPEGs, DALI pipelines) + 1 s warm-up + D; model, per provider, 6 points x
(2 s warm-up + D) plus Triton's start (≈ 15 s; TensorRT's first engine build ≈ 1-2 min more,
then cached under <tmp>/inferline-tensorrt); pipeline ≈ 40 s for the stack + 2 x (3 s warm-up
+ D + ≈ 4 s for the demo client's processes). About 230 s + 15·D: 410 s ≈ 7 min at D = 12
with a TensorRT build, ≈ 5.5 min with its engine cached, inside the 8 minutes the target gets.

    python -m bench.gpu [--duration 12] [--parts decode,model,pipeline] [--skip-if-no-gpu]

Modules: :mod:`.params` (the parts, the command line), :mod:`.machine` (whether DALI sees a
GPU, the versions installed), one module per part that is more than a call (:mod:`.model`,
:mod:`.pipeline`), :mod:`.report` (the summary table) and :mod:`.__main__` (the run).
"""
