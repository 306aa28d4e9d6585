"""Each Python hop's CPU per request, alone, against the grpc.aio floor measured beside it
-> bench/results/hops.json.

    python -m bench.hops [--seconds 10] [--rounds 2] [--images 1,8] [--hops floor,middleman,batcher]
    python -m bench.hops --hops middleman,middleman@/tmp/before   # a cut, before/after


One hop at a time runs as its real process (middleman in the in-pod placement, the batcher) in
front of a fake upstream that answers at once (any ModelInfer with PROBS and empty ERRORS for
its images), loaded by a client that sends one prebuilt ModelInferRequest of the demo client's
photos over and over; both are raw-bytes grpc.aio processes of their own whose CPU is not the
hop's. The hop's utime + stime over the run, divided by the requests answered, is its CPU per
request. Beside it, the floor of this machine: a grpc.aio server with a raw-bytes generic
handler that answers at once (one side), and one that forwards each call to the fake upstream
(two sides: what a hop that only passes requests on costs). Rounds alternate the hops, so a
cut's before/after pair is read from one sitting: ``<hop>@<dir>`` runs the hop from another
checkout of this repository (``git worktree add /tmp/before <rev>``), its service and
``common`` first on the path, beside the hop from this one. Results from another checkout are
printed, not written.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from tritonclient.grpc import service_pb2

from bench.benchlib import ROOT, run_main, write_result
from demo_client.samples import build_samples
from inferline import kserve, preprocessing
from inferline_stack.reaper import die_with_parent
from inferline_testing.ports import free_port
from inferline_testing.procfs import process_usage
from inferline_testing.waits import wait_until

SERVICE = "inference.GRPCInferenceService"
REPOSITORY = ROOT / "build" / "model_repository"
MODEL = "efficientnet_lite0"
CLASSES = 1000
CONCURRENCY = 32
HOPS = ("floor-leaf", "floor-forward", "middleman", "batcher")


def infer_request(images: Sequence[bytes], model: str) -> bytes:
    """The request a client sends middleman (``classifier``) or middleman the batcher (the
    Triton model, encoded images, PROBS and ERRORS asked for)."""
    if model == "classifier":
        request = service_pb2.ModelInferRequest(model_name=model)
        request.inputs.add(name="IMAGE", datatype="BYTES", shape=[len(images), 1])
        request.outputs.add(name="PROBABILITIES")
    else:
        request = service_pb2.ModelInferRequest(model_name=model)
        request.inputs.add(name=preprocessing.IMAGE, datatype="BYTES", shape=[len(images)])
        preprocessing.set_geometry(request, 256, 224)
        request.outputs.add(name="PROBS")
        request.outputs.add(name=preprocessing.ERRORS)
    request.raw_input_contents.append(kserve.join_bytes(images))
    return bytes(request.SerializeToString())


def infer_response(count: int) -> bytes:
    """What the GPU pod answers for ``count`` images: PROBS FP32 [count, 1000], no ERRORS."""
    response = service_pb2.ModelInferResponse(model_name=MODEL, model_version="1")
    response.outputs.add(name="PROBS", datatype="FP32", shape=[count, CLASSES])
    response.outputs.add(name=preprocessing.ERRORS, datatype="BYTES", shape=[count])
    response.raw_output_contents.append(bytes(4 * CLASSES * count))
    response.raw_output_contents.append(kserve.join_bytes([b""] * count))
    return bytes(response.SerializeToString())


# --- the processes the hop is measured between (python -m bench.hops upstream|client|floor) --

LARGE = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


class Forwarder(grpc.GenericRpcHandler):
    """Every unary call passed on to ``channel`` as the bytes it came in, answered as it comes
    back: the least a hop that only forwards can do (raw-bytes generic handlers, no parsing)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.calls: dict[str, Any] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = str(details.method)
        call = self.calls.get(method)
        if call is None:
            call = self.calls[method] = self.channel.unary_unary(method)

        async def forward(raw: bytes, context: Any) -> bytes:
            return bytes(await call(raw, timeout=context.time_remaining()))

        return grpc.unary_unary_rpc_method_handler(forward)


async def upstream(port: int, forward_to: str = "") -> None:
    """The fake upstream (answers at once), or with ``forward_to`` a pure forwarder to it."""
    cache: dict[int, bytes] = {}

    async def infer(raw: bytes, context: Any) -> bytes:
        request = service_pb2.ModelInferRequest.FromString(raw)
        count = int(request.inputs[0].shape[0])
        if count not in cache:
            cache[count] = infer_response(count)
        return cache[count]

    async def ready(raw: bytes, context: Any) -> bytes:
        return bytes(service_pb2.ModelReadyResponse(ready=True).SerializeToString())

    async def config(raw: bytes, context: Any) -> bytes:
        name = service_pb2.ModelConfigRequest.FromString(raw).name
        config = service_pb2.ModelConfigResponse()
        config.config.name, config.config.max_batch_size = name, 64
        return bytes(config.SerializeToString())

    methods = {"ModelInfer": infer, "ModelReady": ready, "ModelConfig": config}
    handler: grpc.GenericRpcHandler = grpc.method_handlers_generic_handler(
        SERVICE, {n: grpc.unary_unary_rpc_method_handler(h) for n, h in methods.items()}
    )
    if forward_to:
        handler = Forwarder(grpc.aio.insecure_channel(forward_to, options=LARGE))
    server = grpc.aio.server(options=LARGE)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def client(target: str, request_file: Path, seconds: float, concurrency: int) -> None:
    """Closed-loop raw-bytes ModelInfer calls; prints how many were answered."""
    request = await asyncio.to_thread(request_file.read_bytes)
    channel = grpc.aio.insecure_channel(target, options=LARGE)
    call = channel.unary_unary(f"/{SERVICE}/ModelInfer")
    answered, end = 0, time.monotonic() + seconds

    async def caller() -> None:
        nonlocal answered
        while time.monotonic() < end:
            await call(request, timeout=30)
            answered += 1

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    print(answered)


# --- the harness -----------------------------------------------------------------------------


def spawn(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv),
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent(),
    )


def me(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench.hops", *args]


def serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(f"/{SERVICE}/ServerLive")
        try:
            call(service_pb2.ServerLiveRequest().SerializeToString(), timeout=1)
        except grpc.RpcError as exc:
            return bool(exc.code() != grpc.StatusCode.UNAVAILABLE)  # UNIMPLEMENTED: it answers
        return True


@contextmanager
def hop(name: str, upstream_port: int) -> Iterator[tuple[int, int]]:
    """The measured process in front of the fake upstream: its port and pid."""
    port, metrics = free_port(), free_port()
    target = f"127.0.0.1:{upstream_port}"
    name, _, tree = name.partition("@")
    path = {"PYTHONPATH": f"{tree}/common:{tree}/services/{name}"} if tree else {}
    if name == "floor-leaf":
        process = spawn(me("upstream", str(port)))
    elif name == "floor-forward":
        process = spawn(me("upstream", str(port), target))
    elif name == "middleman":
        env = {
            "INFERLINE_MIDDLEMAN_HOST": "127.0.0.1", "INFERLINE_MIDDLEMAN_PORT": str(port),
            "INFERLINE_MIDDLEMAN_REST_PORT": str(free_port()),
            "INFERLINE_MIDDLEMAN_METRICS_PORT": str(metrics),
            "INFERLINE_MIDDLEMAN_TRITON_URL": target, "INFERLINE_MIDDLEMAN_PLACEMENT": "in-pod",
            "INFERLINE_MIDDLEMAN_REPOSITORY": str(REPOSITORY), "INFERLINE_MIDDLEMAN_MODELS": MODEL,
            "INFERLINE_MIDDLEMAN_TRITON_MODEL": MODEL,
        }  # fmt: skip
        process = spawn([sys.executable, "-m", "middleman"], {**env, **path})
    elif name == "batcher":
        env = {
            "INFERLINE_BATCHER_HOST": "127.0.0.1", "INFERLINE_BATCHER_PORT": str(port),
            "INFERLINE_BATCHER_METRICS_PORT": str(metrics),
            "INFERLINE_BATCHER_UPSTREAM_URL": target,
        }  # fmt: skip
        process = spawn([sys.executable, "-m", "batcher"], {**env, **path})
    else:
        raise SystemExit(f"unknown hop {name!r}; choose from {', '.join(HOPS)}")
    try:
        wait_until(lambda: serving(port), 60, f"{name} on port {port}")
        if process.poll() is not None:
            raise SystemExit(f"{name} exited ({process.returncode}) before it was measured")
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(30)


def measure(name: str, images: list[bytes], seconds: float, upstream_port: int) -> dict[str, float]:
    model = "classifier" if name.startswith("middleman") else MODEL
    with tempfile.NamedTemporaryFile(prefix="inferline-hops-", suffix=".bin") as request:
        request.write(infer_request(images, model))
        request.flush()
        with hop(name, upstream_port) as (port, pid):
            argv = me("client", f"127.0.0.1:{port}", request.name, "1", str(CONCURRENCY))
            subprocess.run(argv, check=True, capture_output=True)  # warm: connections, caches
            before = process_usage(pid).cpu_s
            argv[-2] = str(seconds)
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            used = process_usage(pid).cpu_s - before
    answered = int(done.stdout.strip().splitlines()[-1])
    return {
        "cpu_ms_per_request": round(used * 1000 / answered, 3),
        "cpu_ms_per_image": round(used * 1000 / answered / len(images), 3),
        "requests_per_s": round(answered / seconds, 1),
    }


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["upstream"]:
        asyncio.run(upstream(int(args[1]), *args[2:3]))
        return
    if args[:1] == ["client"]:
        asyncio.run(client(args[1], Path(args[2]), float(args[3]), int(args[4])))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.hops", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--images", default="1,8", help="images per request, comma-separated")
    parser.add_argument("--hops", default=",".join(HOPS))
    options = parser.parse_args(args)
    photos = [p.read_bytes() for p in build_samples()]
    results: dict[str, Any] = {}
    upstream_port = free_port()
    fake = spawn(me("upstream", str(upstream_port)))
    try:
        wait_until(lambda: serving(upstream_port), 60, "the fake upstream")
        for count in (int(n) for n in options.images.split(",")):
            images = (photos * count)[:count]
            for round_ in range(options.rounds):
                for name in options.hops.split(","):
                    figures = measure(name, images, options.seconds, upstream_port)
                    if "@" not in name:
                        row = results.setdefault(f"{count}_images", {}).setdefault(name, [])
                        row.append(figures)
                    print(
                        f"{count} image(s)/request, round {round_}, {name}: {figures}", flush=True
                    )
    finally:
        fake.terminate()
        fake.wait(30)
    print(f"wrote {write_result('hops', {'concurrency': CONCURRENCY, 'hops': results})}")


if __name__ == "__main__":
    sys.exit(run_main(main))
