"""PyTriton's wait for its own tritonserver, without its whole-second naps.

PyTriton starts ``tritonserver`` and then waits until it answers ready
(``pytriton.client.utils.wait_for_server_ready``): one check, then a check a second. The server
answers some 50 ms after its start, so the first check nearly always finds it not up yet and
every Triton replica started a second later than it could (a quarter of a simulated-GPU
replica's start here). :func:`install` puts :func:`wait_for_server_ready` in its place for
``pytriton.triton``, the module that makes that wait: the same checks, every
:data:`POLL_S`. The pinned PyTriton (constraints.txt) is the one this is written against; a test
(models/tests/test_server_wait.py) fails if the name it replaces is gone.
"""

from __future__ import annotations

import socket
import time
from typing import Any

POLL_S = 0.02
DEFAULT_TIMEOUT_S = 60.0  # PyTriton's, when its caller gives none


def wait_for_server_ready(
    client: Any, timeout_s: float | None = None, headers: dict[str, str] | None = None
) -> None:
    """Until ``client``'s server answers live and ready; PyTriton's timeout error after
    ``timeout_s``."""
    from grpc import RpcError
    from pytriton.client.exceptions import PyTritonClientTimeoutError
    from tritonclient.utils import InferenceServerException

    deadline = time.monotonic() + (DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
    while True:
        try:
            if client.is_server_ready(headers=headers) and client.is_server_live(headers=headers):
                return
        except (InferenceServerException, RpcError, ConnectionError, socket.gaierror):
            pass
        if time.monotonic() >= deadline:
            raise PyTritonClientTimeoutError("Waiting for server to be ready timed out.")
        time.sleep(POLL_S)


def install() -> None:
    """Make ``pytriton.triton`` wait with :func:`wait_for_server_ready`."""
    import pytriton.triton

    if not hasattr(pytriton.triton, "wait_for_server_ready"):
        raise RuntimeError(
            "pytriton.triton.wait_for_server_ready is gone: this PyTriton is not the pinned one "
            "(constraints.txt); inferline_models.server_wait needs a look"
        )
    pytriton.triton.wait_for_server_ready = wait_for_server_ready
