"""inferline_models.server_wait: PyTriton's wait for its server, polled finely."""

from __future__ import annotations

import pytest
import pytriton.triton
from pytriton.client.exceptions import PyTritonClientTimeoutError
from tritonclient.utils import InferenceServerException

from inferline_models import server_wait


class Server:
    """A client whose server refuses ``refusals`` checks, then answers ready and live."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.checks = 0
        self.headers: list[dict[str, str] | None] = []

    def is_server_ready(self, headers: dict[str, str] | None = None) -> bool:
        self.checks += 1
        self.headers.append(headers)
        if self.checks <= self.refusals:
            raise InferenceServerException("connection refused")
        return True

    def is_server_live(self, headers: dict[str, str] | None = None) -> bool:
        return True


def test_install_replaces_the_wait_pytriton_starts_its_server_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pytriton.triton, "wait_for_server_ready", None)
    server_wait.install()
    assert pytriton.triton.wait_for_server_ready is server_wait.wait_for_server_ready


def test_install_fails_by_name_where_pytriton_has_no_such_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(pytriton.triton, "wait_for_server_ready")
    with pytest.raises(RuntimeError, match="not the pinned one"):
        server_wait.install()


def test_the_wait_checks_again_until_the_server_answers_with_the_headers_given() -> None:
    server = Server(refusals=3)
    server_wait.wait_for_server_ready(server, timeout_s=10.0, headers={"token": "t"})
    assert server.checks == 4
    assert server.headers == [{"token": "t"}] * 4


def test_a_server_that_never_answers_times_out_as_pytriton_does() -> None:
    server = Server(refusals=10**9)
    with pytest.raises(PyTritonClientTimeoutError):
        server_wait.wait_for_server_ready(server, timeout_s=0.1)
    assert server.checks >= 2
