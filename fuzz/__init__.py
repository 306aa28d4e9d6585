"""Coverage-guided fuzzing of the parsers that take untrusted bytes (`make fuzz`).

Each target in :mod:`fuzz.targets` feeds libFuzzer's inputs (through atheris) to one entry
point: image decoding (every backend available here), the KServe v2 tensor parsing of a gRPC
request (as wire bytes, and built field by field), the KServe v2 REST body parser, and the video
container check. A refusal by the project's own errors (``InferError``, ``DecodeError``) is the
expected answer to bad input; anything else -- another exception, a crash, an input that runs
past the per-input time limit, memory past the target's bound -- is a finding.

``python -m fuzz run TARGET --seconds N`` runs one target; ``python -m fuzz all`` runs every
one; ``python -m fuzz reproduce TARGET FILE...`` runs the target once on each file (how a
finding becomes a regression test: its input goes to ``fuzz/regressions/<target>/``).
"""
