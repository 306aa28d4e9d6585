"""A pytest plugin (the root conftest.py loads it): a test session stops whatever it started,
however it ends.

Every process a test starts carries the session's owner token (:mod:`inferline_stack.reaper`).
SIGTERM and SIGHUP end the session as Ctrl-C does: pytest tears every fixture down, and a stack
of a test's own (:func:`inferline_testing.stacks.own_stack`) is taken down. Whatever still carries
the token when the session ends is stopped: what a test started and did not stop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from inferline_stack import reaper


@pytest.fixture(scope="session", autouse=True)
def stops_what_it_started() -> Iterator[None]:
    with reaper.owning(f"pytest-{os.getpid()}"):
        yield
