"""Prometheus metrics of the preprocess service, every one labelled by the backend that did it."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from inferline.metrics import LATENCY_BUCKETS

BACKEND = Gauge(
    "inferline_preprocess_backend_info",
    "The decoding backends this process chose (value 1), by media",
    ["backend", "media"],
)
IMAGES = Counter("inferline_preprocess_images_total", "Images decoded", ["backend"])
FRAMES = Counter(
    "inferline_preprocess_frames_total", "Video frames decoded and returned", ["backend"]
)
BYTES_IN = Counter(
    "inferline_preprocess_input_bytes_total", "Encoded bytes received", ["backend", "media"]
)
BYTES_OUT = Counter(
    "inferline_preprocess_output_bytes_total", "Tensor bytes returned", ["backend", "media"]
)
DECODE_SECONDS = Histogram(
    "inferline_preprocess_decode_duration_seconds",
    "Decoding time of one request's images, or of one chunk of video frames",
    ["backend", "media"],
    buckets=LATENCY_BUCKETS,
)
ERRORS = Counter(
    "inferline_preprocess_errors_total",
    "Images and videos refused, by kind (too_large, too_many_pixels, corrupt, ...)",
    ["backend", "media", "kind"],
)
REFUSED = Counter(
    "inferline_preprocess_refused_requests_total",
    "Requests refused with RESOURCE_EXHAUSTED: too many requests or bytes in flight",
    ["reason"],
)
EXPIRED = Counter(
    "inferline_preprocess_expired_requests_total",
    "Requests whose deadline had passed before decoding began (not decoded)",
    ["media"],
)
# In-pod placement (preprocess beside Triton): the decoded batches handed over in shared memory.
SHM_BYTES = Counter(
    "inferline_preprocess_shared_memory_bytes_total",
    "Decoded tensor bytes handed to the pod's Triton through shared memory (never the network)",
)
SHM_SLOTS = Gauge(
    "inferline_preprocess_shared_memory_slots_in_use",
    "Slots of the shared-memory ring holding a batch (decoding, or at Triton)",
)
