"""CPU the pipeline spends per image, by process, and how its throughput scales out
-> bench/results/pipeline.json.

1. **CPU per image, by placement.** The stack under the demo client in
   each placement (in-pod, the default; remote; in-process), on the simulated GPU at 1 and at 8
   images per request (the model costs no CPU, so what is left is the pipeline's own cost),
   plus the real model (EfficientNet-Lite0 with ONNX Runtime on these cores) and REST. For each
   process (its whole group: Triton's holds PyTriton, tritonserver and its stubs; in-pod, the
   preprocess of the pod counts as preprocess), utime + stime from /proc over the measured run,
   divided by the images answered; the demo client's from its rusage. From the total: images/s
   per core, the cores per 1,000 images/s, and the **pipeline overhead**: total - Triton - the
   demo client - the decoder's own CPU per image on the same photos (a plain single-thread loop,
   measured in the same run), the part that no GPU takes away. And the bytes through Envoy per
   image (every cluster's upstream received + sent).
2. **Scale-out efficiency.** The simulated GPU with its clock slowed (a batch of b takes
   ``t0 + k·b`` = 400 + 10·b ms, at most 8 images) so that these cores are never the limit:
   saturation throughput X(N) at N = 1, 2, 4 Triton replicas, and X(N) / (N·X(1)).

    python -m bench.pipeline [--duration 20] [--scenarios real_1,simulated_1,simulated_8]
                             [--skip-scale-out] [--out PATH] [--compare NAME=IMAGES_PER_S_PER_CORE]

Each placement runs twice, its inner hops dialled proxyless (the default) and through Envoy
(``_envoy``); the default arrangement runs with tracing on too, at the default sampling ratio
and with every request sampled (``simulated_1_traced``, ``_traced_all``), and without per-hop
timing in its answers (``simulated_1_untimed``).

Modules: :mod:`.scenarios` (what each run is), :mod:`.stack` (the stack and its environment),
:mod:`.measure` (CPU per image over one demo-client run), :mod:`.scale_out` (part 2),
:mod:`.report` (the tables) and :mod:`.__main__` (the command line, the runs, the result).
"""
