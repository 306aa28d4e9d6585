"""middleman with the preprocess service (remote) and with decoding in process, through the real
Triton: the end-to-end suites run unchanged against both placements, plus classifier_video.

The preprocess service and the two middlemen run as processes, exactly as deployed, next to
the session's Triton; each is ready once its KServe ServerReady/ModelReady RPCs say so.
"""

from __future__ import annotations

import functools
import importlib.util
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_sync
import tritonclient.grpc.aio as triton
from tritonclient.utils import InferenceServerException

from inferline_stack.config import StackConfig
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable
from inferline_testing import media

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
VIDEO_LIMITS = {"MAX_VIDEO_DURATION_S": "20", "VIDEO_CHUNK_FRAMES": "4", "VIDEO_FPS": "2"}


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"e2e_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The end-to-end suites, unchanged: every test of theirs is collected here again, where
# `public_url` is this module's fixture (each placement in turn) instead of the stack's.
for _suite in ("test_bad_input.py", "test_classify.py"):
    _module = _load(ROOT / "tests" / "e2e" / _suite)
    globals().update({k: v for k, v in vars(_module).items() if k.startswith("test_")})


@pytest.fixture(scope="module")
def middlemen(
    stack: StackConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """{"remote": url, "in_process": url}: two middlemen on the session's Triton."""
    table = ProcessTable(tmp_path_factory.mktemp("placements"))
    preprocess = f"127.0.0.1:{_free_port()}"
    urls = {"remote": f"127.0.0.1:{_free_port()}", "in_process": f"127.0.0.1:{_free_port()}"}
    processes: list[tuple[str, list[str], dict[str, str], str, str]] = [
        ("preprocess", ["preprocess"], {
            "INFERLINE_PREPROCESS_HOST": "127.0.0.1",
            "INFERLINE_PREPROCESS_PORT": preprocess.split(":")[1],
            "INFERLINE_PREPROCESS_METRICS_PORT": str(_free_port()),
            "INFERLINE_PREPROCESS_WORKERS": "2",
            **{f"INFERLINE_PREPROCESS_{k}": v for k, v in VIDEO_LIMITS.items()},
        }, preprocess, "preprocess"),
    ]  # fmt: skip
    for name, url in urls.items():
        env = {
            "INFERLINE_MIDDLEMAN_HOST": "127.0.0.1",
            "INFERLINE_MIDDLEMAN_PORT": url.split(":")[1],
            "INFERLINE_MIDDLEMAN_METRICS_PORT": str(_free_port()),
            "INFERLINE_MIDDLEMAN_TRITON_URL": f"127.0.0.1:{stack.triton_grpc_port}",
            "INFERLINE_MIDDLEMAN_PREPROCESS_URL": preprocess if name == "remote" else "",
            **{f"INFERLINE_MIDDLEMAN_{k}": v for k, v in VIDEO_LIMITS.items()},
        }
        processes.append((f"middleman_{name}", ["middleman"], env, url, "classifier"))
    try:
        for name, argv, env, url, model in processes:
            table.start(name, [sys.executable, "-m", *argv], env)
            if not wait_ready(url, model, 60, functools.partial(table.running, name)):
                pytest.fail(f"{name} did not become ready:\n{table.log_tail(name)}")
        yield urls
    finally:
        for name, *_ in reversed(processes):
            table.stop(name, 10)


@pytest.fixture(scope="module", params=["remote", "in_process"])
def public_url(request: pytest.FixtureRequest, middlemen: dict[str, str]) -> str:
    return middlemen[request.param]


async def classify_video(
    url: str, video: bytes, outputs: list[triton.InferRequestedOutput] | None = None, **params: Any
) -> list[triton.InferResult]:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        tensor = triton.InferInput("VIDEO", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([video], dtype=np.object_))
        yield {"model_name": "classifier_video", "inputs": [tensor], "outputs": outputs,
               "parameters": params or None}  # fmt: skip

    results = []
    async with triton.InferenceServerClient(url) as client:
        async for result, error in client.stream_infer(requests()):
            assert error is None, error
            results.append(result)
    return results


async def test_one_response_per_sampled_frame_with_top_k(public_url: str) -> None:
    results = await classify_video(public_url, media.make_video("mpeg4_mp4"))  # 3 s, 10 fps
    assert [int(r.as_numpy("FRAME_INDEX")[0]) for r in results] == [0, 5, 10, 15, 20, 25]
    stamps = [float(r.as_numpy("TIMESTAMP")[0]) for r in results]
    np.testing.assert_allclose(stamps, [0, 0.5, 1, 1.5, 2, 2.5], atol=0.011)
    final = [r.get_response().parameters["triton_final_response"].bool_param for r in results]
    assert final == [False] * 5 + [True]
    for result in results:
        top = result.as_numpy("PROBABILITIES")
        assert top.shape == (1, 5)  # video_top_k by default
        indices = {int(item.split(b":")[1]) for item in top[0]}
        assert indices & set(media.CAT_CLASSES), top


async def test_video_outputs_and_sampling_are_the_requests_to_choose(public_url: str) -> None:
    outputs = [
        triton.InferRequestedOutput("PROBABILITIES"),
        triton.InferRequestedOutput("FRAME_INDEX"),
    ]
    results = await classify_video(public_url, media.make_video("vp9_webm"), outputs, every_n=10)
    assert [int(r.as_numpy("FRAME_INDEX")[0]) for r in results] == [0, 10, 20]
    for result in results:
        probabilities = result.as_numpy("PROBABILITIES")
        assert probabilities.shape == (1, 1000) and probabilities.dtype == np.float32
        assert int(probabilities.argmax()) in media.CAT_CLASSES
        assert result.as_numpy("TIMESTAMP") is None


async def test_a_refused_video_is_invalid_argument_naming_the_limit(public_url: str) -> None:
    long_video = media.make_video("mpeg4_mp4", media.video_frames(25, 64, 48), fps=1.0)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await classify_video(public_url, long_video)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "25.0 s; the limit (max_video_duration_s) is 20" in (caught.value.details() or "")


def test_classifier_video_is_streamed_only(public_url: str) -> None:
    with triton_sync.InferenceServerClient(public_url) as client:
        assert client.is_model_ready("classifier_video")
        config = client.get_model_config("classifier_video").config
        assert config.model_transaction_policy.decoupled
        tensor = triton_sync.InferInput("VIDEO", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"video"], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="call ModelStreamInfer"):
            client.infer("classifier_video", [tensor])
