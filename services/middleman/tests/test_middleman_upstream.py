import grpc
import numpy as np
import pytest

from inferline.errors import InferError
from middleman.pipeline import TritonUpstream


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends


async def test_unreachable_upstream_is_unavailable_naming_the_hop() -> None:
    url = f"127.0.0.1:{closed_port()}"
    upstream = TritonUpstream(url, "efficientnet_lite0", "INPUT", "PROBS")
    try:
        assert not await upstream.ready(time_left=0.5)
        with pytest.raises(InferError) as caught:
            await upstream.infer(np.zeros((1, 3, 224, 224), np.uint8), time_left=0.5)
        assert caught.value.code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )
        assert f"inference at {url}" in caught.value.message
    finally:
        await upstream.close()
