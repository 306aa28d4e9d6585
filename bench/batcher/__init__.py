"""The batcher against a *simulated* GPU backend: batching before the balancer, measured.

Every backend here is the simulated GPU (``inferline_models.simulated``) served by the real
Triton server through PyTriton: a batch of b images takes t0 + k·b and uses no CPU. Load comes
from the demo client's generator (``demo_client.load``). Three parts, side by side in one run:

1. throughput: closed-loop clients at concurrency 1, 8 and 64 against one replica, with the
   batcher in front vs no batching anywhere (the replica runs each request as it comes);
2. scale-out: N = 1, 2, 4 replicas behind the real Envoy as deployed (rendered from the one
   template: EDS clusters over ADS from the real control plane, ``python -m eds`` with the file
   source; least request by full scan, health checks, outlier detection, retries, circuit
   breakers), open-loop Poisson load at fractions of the replicas' capacity; the batcher before
   Envoy (replicas without dynamic batching, ``max_inflight`` = N) vs Triton's own dynamic
   batcher at each replica only (same ``max_queue_delay``, same ``max_batch_size``). Per point:
   mean batch at the replicas and images per busy backend-second (both from Triton's
   per-execution statistics: batch sizes and compute time) and the clients' p99 latency, beside what
   a queueing model (``bench.batchsim``) predicts;
3. added latency: p50 at concurrency 1 through the batcher (``max_queue_delay`` 0) minus p50
   straight to the replica, requests interleaved.

Part 2 runs on a slowed clock (``--time-scale``, default 50: t0 = 400 ms, k = 5 ms, delay
= 150 ms), for two reasons. Offered load: at the real t0 of 8 ms, four replicas at 9/10 of
capacity need 16,000 images/s from one Python load generator. Data movement: a batch of 64
images is 9.6 MB, which Python, Envoy and PyTriton move in tens of milliseconds on a small
machine; that time is nothing like a GPU's and must stay small beside t0. The queueing behaviour
depends only on the ratios of t0, k, the delay and the arrival interval, so the ratios between
the two arrangements carry over; absolute figures are scaled (and labelled so).

    python -m bench.batcher [--quick] [--parts throughput,scale-out,latency]

Writes bench/results/batcher.json and prints a table. Modules: :mod:`.params` (parameters,
command line), :mod:`.processes` (replicas, batchers, Envoy and the control plane),
:mod:`.measure` (load through the demo client, Triton's counters), one module per part
(:mod:`.throughput`, :mod:`.scale_out`, :mod:`.latency`) and :mod:`.report` (goals, tables).
"""
