"""Test support for inferline's suites and benchmarks; no production package imports it.

:mod:`.media` (real photos, unusual and hostile images, test videos), :mod:`.ports` (free
ports, a stack configuration on them), :mod:`.waits` (poll for an event with a deadline),
:mod:`.fake_backend` (a fake KServe v2 backend that says which replica served a call) and
:mod:`.harness` (real processes on free ports: Envoy, the control plane, fake backends).
"""
