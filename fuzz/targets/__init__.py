"""The fuzz targets: what each one fuzzes and its bounds. Light on purpose: importing this imports
no project code, so that the worker can import each target's module while atheris instruments it.

A target module has two functions:

- ``seeds() -> dict[str, bytes]``: named real inputs the corpus starts from (written to a folder
  on every run, never committed);
- ``setup() -> Callable[[bytes], None]``: builds what the target needs once (a DALI pipeline,
  say) and returns the one-input function. That function returns on the project's own refusals
  and raises (or crashes, or hangs) on anything else.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    name: str
    module: str  # the module with seeds() and setup()
    summary: str
    # Top-level packages whose Python code atheris instruments: their branches guide the fuzzer
    # (native code -- OpenCV, libjpeg, DALI, protobuf's upb -- runs uninstrumented).
    instrument: tuple[str, ...]
    max_len: int  # bytes: the largest input the fuzzer makes (libFuzzer -max_len)
    timeout_s: int  # one input running longer is a hang (libFuzzer -timeout)
    # What one input may allocate: the worker's address space may grow by this much past where
    # it stands after setup (RLIMIT_AS), so one allocation over it fails and is a finding.
    memory_mb: int
    rss_limit_mb: int  # the whole process's resident memory (libFuzzer -rss_limit_mb)
    # Warnings are errors in the parsers: a numpy or protobuf warning there means a value was
    # silently changed (wrapped, truncated) on its way into a tensor.
    warnings_as_errors: bool = False
    needs: str = ""  # a module that must be importable, or the target is skipped
    dictionary: tuple[bytes, ...] = ()  # tokens for the mutator (libFuzzer -dict)
    env: tuple[tuple[str, str], ...] = ()  # the worker's environment, besides the runner's

    def unavailable(self) -> str:
        """Why this target cannot run here ("" when it can)."""
        if not self.needs:
            return ""
        try:
            found = importlib.util.find_spec(self.needs) is not None
        except ModuleNotFoundError:  # its parent package is missing
            found = False
        return "" if found else f"{self.needs} is not installed"


# The targets that run the hops' request checks: every service instrumented, a small budget, and
# a warning (numpy's overflow, say) a crash.
_KSERVE_CHECKS: dict[str, Any] = {
    "instrument": ("inferline", "middleman", "preprocess", "batcher"),
    "timeout_s": 5,
    "memory_mb": 256,
    "rss_limit_mb": 1024,
    "warnings_as_errors": True,
}

_JSON_TOKENS = (
    b'"inputs"', b'"outputs"', b'"name"', b'"shape"', b'"datatype"', b'"data"', b'"id"',
    b'"parameters"', b'"binary_data_size"', b'"binary_data"', b'"binary_data_output"',
    b'"content_type"', b'"base64"', b'"classification"', b'"timeout"',
    b'"shared_memory_region"', b'"IMAGE"', b'"PROBABILITIES"', b'"BYTES"', b'"UINT8"',
    b'"INT8"', b'"INT64"', b'"UINT64"', b'"FP16"', b'"FP32"', b'"FP64"', b'"BOOL"', b'"BF16"',
    b"true", b"false", b"null", b"1e400", b"-1", b"-0", b"0.5", b"18446744073709551616",
    b"9223372036854775808", b"NaN", b"Infinity", b"-Infinity", b'"\\ud800"', b"[[", b"]]",
    b"{}", b"[]", b"\n",
)  # fmt: skip

TARGETS = {
    t.name: t
    for t in (
        Target(
            "decode",
            "fuzz.targets.decode",
            "encoded image -> tensor on the CPU (inferline.imaging.decode: the header probe and "
            "its limits, OpenCV's and Pillow's decoders): preprocess's opencv backend, and "
            "middleman decoding in process; the decoded size never exceeds what the header said",
            instrument=("inferline", "PIL"),
            max_len=512 * 1024,
            timeout_s=10,
            memory_mb=1024,
            rss_limit_mb=2048,
        ),
        Target(
            "dali",
            "fuzz.targets.dali",
            "encoded image -> tensor through preprocess's DALI backend on the CPU (dali-cpu: "
            "the header probe, then DALI's decoder; a batch that fails is retried image by image)",
            instrument=("inferline", "preprocess"),
            max_len=512 * 1024,
            timeout_s=10,
            memory_mb=1536,
            rss_limit_mb=3072,
            needs="nvidia.dali",
        ),
        Target(
            "kserve-wire",
            "fuzz.targets.kserve_wire",
            "a ModelInferRequest's protobuf bytes (what a gRPC hop receives) -> every check the "
            "hops make: inferline.kserve (tensors, BYTES length prefixes, shapes, parameters, "
            "class_count), middleman's inputs/outputs, preprocess's geometry and video sampling "
            "parameters, the batcher's plan/merge/split",
            max_len=64 * 1024,
            **_KSERVE_CHECKS,
        ),
        Target(
            "kserve-tensors",
            "fuzz.targets.kserve_tensors",
            "the same checks on requests built field by field from the input (names, datatypes, "
            "shapes up to 2^63, raw or typed contents, parameters of every kind)",
            max_len=16 * 1024,
            **_KSERVE_CHECKS,
        ),
        Target(
            "rest",
            "fuzz.targets.rest",
            "a KServe v2 REST infer body, JSON or JSON + binary (Inference-Header-Content-Length) "
            "-> inferline.kserve_rest.parse_infer -> the same checks as a gRPC request; a "
            "response echoing its tensors through infer_response reads back as sent",
            max_len=64 * 1024,
            **_KSERVE_CHECKS,
            dictionary=_JSON_TOKENS,
        ),
        Target(
            "video",
            "fuzz.targets.video",
            "an uploaded video's container check and FFmpeg open from memory "
            "(inferline.imaging.video.probe_video and its header limits); frame decoding, "
            "being reworked, is left out",
            instrument=("inferline",),
            max_len=64 * 1024,
            timeout_s=10,
            memory_mb=1536,
            rss_limit_mb=2048,
            # FFmpeg and OpenCV log every malformed box or element to stderr: thousands of
            # lines a second, and nothing the target checks.
            env=(("OPENCV_LOG_LEVEL", "OFF"), ("OPENCV_FFMPEG_LOGLEVEL", "-8")),
        ),
    )
}
