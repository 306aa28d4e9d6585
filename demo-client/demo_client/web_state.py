"""The web view's state: what the page shows, from the run's recorder, Envoy's per-host request
counters, the images the pipeline labelled lately and the timer's requests (pure: no I/O
and no clock of its own; every method that needs the time takes ``now``, monotonic seconds).

Per-replica images/s are not measured at the replicas: each replica's *share of the cluster's
requests* in the last window (deltas of Envoy's cumulative ``rq_total`` per host) times the
images/s the client measured. With the batcher in front of Triton a request is a batch, so the
split is exact when the replicas get batches of one size and close otherwise; the page says so.

Where the time went comes from the timer (:mod:`demo_client.timer`): a request every half
second beside the load, whose answer's ``Server-Timing`` becomes a stacked bar of each hop's own
time (:func:`demo_client.hops.exclusive_segments`). The page shows the latest ones, and the
slowest of the last minute with links to their traces when a trace view is configured.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from demo_client.hops import ABOUT, OUTSIDE, SEGMENTS, exclusive_segments, outside_ms
from demo_client.stats import Recorder
from demo_client.trace_view import trace_url

WINDOW_S = 2.0  # the recorder's images/s window, and the shares' window
HISTORY_EVERY_S = 0.5
HISTORY_LEN = 240  # two minutes of points
RECENT_LEN = 10
TIMED_LEN = 20  # the timed requests drawn as bars, newest first
SLOWEST_WINDOW_S = 60.0  # the slowest timed requests are of this last stretch
SLOWEST_LEN = 5

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


@dataclass(frozen=True)
class HostCounters:
    """One endpoint of a cluster as Envoy's admin sees it."""

    address: str  # host:port, the replica's label
    rq_total: int  # requests Envoy sent it, ever (cumulative)
    state: str  # healthy, draining, or Envoy's failing flags
    hostname: str = ""  # what the control plane calls it (triton-1, a pod's name), when it says


@dataclass(frozen=True)
class Labelled:
    """An image the load sent, with the top class the pipeline answered for it."""

    image: int  # index into the run's images
    label: str
    score: float
    elapsed_s: float  # seconds into the run


@dataclass(frozen=True)
class Frame:
    """A sampled frame of a video streamed in chunks, with the pipeline's top class."""

    index: int
    timestamp_s: float
    label: str
    score: float
    elapsed_s: float  # into the run, when its answer came


@dataclass(frozen=True)
class TimedRequest:
    """A timed request: one image, timed hop by hop, traced under a trace id of its own."""

    elapsed_s: float  # into the run, when its answer came
    trace_id: str  # 32 hex digits
    total_ms: float  # as the client measured it
    timing: dict[str, float]  # its answer's Server-Timing: hop -> ms, nested
    segments: dict[str, float]  # each hop's own ms by segment name, then OUTSIDE's


class ReplicaShares:
    """Each host's share of a cluster's requests over about the last ``window_s`` seconds, from
    successive samples of Envoy's cumulative per-host counters."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._samples: deque[tuple[float, dict[str, int]]] = deque()
        self.hosts: list[HostCounters] = []  # the latest sample's, sorted by address

    def add(self, now: float, hosts: Sequence[HostCounters]) -> None:
        """A sample taken at ``now``."""
        self.hosts = sorted(hosts, key=lambda h: address_key(h.address))
        self._samples.append((now, {h.address: h.rq_total for h in hosts}))
        horizon = now - self.window_s
        # Keep the newest sample at or before the horizon as the window's base.
        while len(self._samples) > 1 and self._samples[1][0] <= horizon:
            self._samples.popleft()

    def clear(self) -> None:
        """Forget every sample (the counters are unavailable)."""
        self._samples.clear()
        self.hosts = []

    def requests(self) -> dict[str, int]:
        """Requests per host of the latest sample since the window's base. A host that was not
        in the base sample, or whose counter went back (removed and added again), counts from 0.
        """
        if not self._samples:
            return {}
        base, latest = self._samples[0][1], self._samples[-1][1]
        out = {}
        for address, total in latest.items():
            before = base.get(address, 0)
            out[address] = total - before if total >= before else total
        return out

    def shares(self) -> dict[str, float]:
        """Each host's fraction of the window's requests (all 0 when there were none)."""
        requests = self.requests()
        total = sum(requests.values())
        return {a: (n / total if total else 0.0) for a, n in requests.items()}


def address_key(address: str) -> tuple[str, int]:
    """Sorts host:port by host, then port as a number."""
    name, _, port = address.rpartition(":")
    return (name, int(port)) if port.isdigit() else (address, 0)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class _Point:
    elapsed_s: float
    total: float
    replicas: dict[str, float]


class WebState:
    """What the page shows, as JSON-ready snapshots.

    ``run`` describes the run for the header (target, model, concurrency, …); ``images`` are
    the names of the run's images, by index. ``timer_every_s``: how often the timer times a
    request (``None``: no timer, and no timing panel); ``trace_view``: the template of a link to
    a timed request's trace (:mod:`demo_client.trace_view`; ``""``: no links).
    """

    def __init__(
        self,
        run: Mapping[str, Any],
        images: Sequence[str],
        *,
        window_s: float = WINDOW_S,
        history_every_s: float = HISTORY_EVERY_S,
        history_len: int = HISTORY_LEN,
        recent_len: int = RECENT_LEN,
        timer_every_s: float | None = None,
        trace_view: str = "",
        timed_len: int = TIMED_LEN,
        slowest_window_s: float = SLOWEST_WINDOW_S,
        slowest_len: int = SLOWEST_LEN,
    ) -> None:
        if history_every_s <= 0:
            raise ValueError("history_every_s must be positive")
        self.run = dict(run)
        self.images = list(images)
        self.phase = WAITING
        self.message = ""
        self.shares = ReplicaShares(window_s)
        self.replicas_note = "waiting for Envoy's admin"
        self.replicas_available = False
        self._history_every_s = history_every_s
        self._history: deque[_Point] = deque(maxlen=history_len)
        self._next_point: float | None = None
        self._recent: deque[Labelled] = deque(maxlen=recent_len)
        self._frames: deque[Frame] = deque(maxlen=recent_len)
        self._video: dict[str, Any] | None = None  # a video run: its file and upload
        self._timer_every_s = timer_every_s
        self._trace_view = trace_view
        self._timed: deque[TimedRequest] = deque(maxlen=timed_len)
        self._slowest_window_s = slowest_window_s
        self._slowest_len = slowest_len
        self._window: deque[tuple[float, TimedRequest]] = (
            deque()
        )  # (now, timed) of the last stretch
        self.timed_failed = 0
        self._timing_error = ""  # the last failure, in words

    # --- what happens --------------------------------------------------------------------------
    def waiting(self, message: str) -> None:
        """Before the load: waiting for the server (``message`` says for what)."""
        self.phase, self.message = WAITING, message

    def running(self) -> None:
        """The load has started."""
        self.phase, self.message = RUNNING, ""

    def finished(self, message: str = "the run is over") -> None:
        """The load has ended: the last snapshot."""
        self.phase, self.message = FINISHED, message

    def envoy(self, now: float, hosts: Sequence[HostCounters]) -> None:
        """A sample of the cluster's hosts from Envoy's admin."""
        self.shares.add(now, hosts)
        self.replicas_available = True
        self.replicas_note = ""

    def envoy_unavailable(self, reason: str) -> None:
        """Envoy's admin did not answer (or has no such cluster): no per-replica lines."""
        self.shares.clear()
        self.replicas_available = False
        self.replicas_note = reason

    def labelled(self, elapsed_s: float, image: int, label: str, score: float) -> None:
        """The pipeline's top class for image ``image`` of the run."""
        self._recent.append(Labelled(image, label, score, elapsed_s))

    def video(self, file: str, bytes_sent: int, total_bytes: int) -> None:
        """A video run: the file streamed in chunks, and how much of it has been sent."""
        self._video = {"file": file, "bytes_sent": bytes_sent, "total_bytes": total_bytes}

    def framed(self, frame: Frame) -> None:
        """A video's sampled frame, classified."""
        self._frames.append(frame)

    def timed(
        self,
        now: float,
        elapsed_s: float,
        trace_id: str,
        total_ms: float,
        timing: Mapping[str, float],
    ) -> None:
        """A timed request's answer: ``total_ms`` as the client measured it, ``timing`` as its
        ``Server-Timing`` said (hop -> ms)."""
        segments = exclusive_segments(timing)
        segments[OUTSIDE] = outside_ms(segments, total_ms)
        timed = TimedRequest(elapsed_s, trace_id, total_ms, dict(timing), segments)
        self._timed.append(timed)
        self._window.append((now, timed))
        self._forget(now)

    def timing_failed(self, now: float, elapsed_s: float, error: str) -> None:
        """A timed request failed (``error``: why, in words); it is counted and said."""
        self.timed_failed += 1
        self._timing_error = (
            f"the last failed timed request ({elapsed_s:.1f} s into the run): {error}"
        )
        self._forget(now)

    def _forget(self, now: float) -> None:
        horizon = now - self._slowest_window_s
        while self._window and self._window[0][0] < horizon:
            self._window.popleft()

    def tick(self, now: float, recorder: Recorder) -> None:
        """Add a point to the history when one is due (every ``history_every_s`` while the
        load runs)."""
        if self.phase != RUNNING:
            return
        if self._next_point is not None and now < self._next_point:
            return
        self._next_point = now + self._history_every_s
        self._history.append(
            _Point(recorder.elapsed(), recorder.rate_now(), self.replica_rates(recorder))
        )

    # --- what the page gets --------------------------------------------------------------------
    def replica_rates(self, recorder: Recorder) -> dict[str, float]:
        """Images/s per replica: its share of the window's requests times the measured rate."""
        total = recorder.rate_now()
        return {a: share * total for a, share in self.shares.shares().items()}

    def snapshot(self, recorder: Recorder) -> dict[str, Any]:
        """Everything the page shows, JSON-ready."""
        p50, p95, p99 = recorder.percentiles_ms()
        errors = recorder.errors_by_code
        shares = self.shares.shares()
        requests = self.shares.requests()
        total = recorder.rate_now()
        lines = [
            {
                "address": h.address,
                "hostname": h.hostname,
                "state": h.state,
                "share": round(shares.get(h.address, 0.0), 4),
                "requests": requests.get(h.address, 0),
                "images_per_s": round(shares.get(h.address, 0.0) * total, 1),
            }
            for h in self.shares.hosts
        ]
        return {
            "run": self.run,
            "phase": self.phase,
            "message": self.message,
            "elapsed_s": round(recorder.elapsed(), 2),
            "images": recorder.images,
            "requests": recorder.requests,
            "images_per_s": round(total, 1),
            "average_images_per_s": round(recorder.rate_average(), 1),
            "latency_ms": {"p50": _round(p50), "p95": _round(p95), "p99": _round(p99)},
            "errors": {"total": sum(errors.values()), "by_code": errors},
            "replicas": {
                "available": self.replicas_available,
                "note": self.replicas_note,
                "lines": lines,
            },
            "history": self._history_json(),
            "video": None
            if self._video is None
            else {
                **self._video,
                "frames": [
                    {
                        "index": f.index,
                        "timestamp_s": round(f.timestamp_s, 3),
                        "label": f.label,
                        "score": round(f.score, 4),
                        "elapsed_s": round(f.elapsed_s, 2),
                    }
                    for f in reversed(self._frames)
                ],
            },
            "timing": self._timing_json(),
            "recent": [
                {
                    "image": r.image,
                    "name": self.images[r.image] if 0 <= r.image < len(self.images) else "",
                    "label": r.label,
                    "score": round(r.score, 4),
                    "elapsed_s": round(r.elapsed_s, 2),
                }
                for r in reversed(self._recent)
            ],
        }

    def _timing_json(self) -> dict[str, Any] | None:
        """The timed requests: ``recent`` newest first, the ``slowest`` of the last stretch slowest
        first, each with its segments (in ``hops``' order) and link; ``None`` without a timer."""
        if self._timer_every_s is None:
            return None
        slowest = sorted((p for _, p in self._window), key=lambda p: -p.total_ms)
        notes = [self._timing_error] if self._timing_error else []
        if self._timed and not self._timed[-1].timing:
            notes.insert(0, "the latest answer carried no Server-Timing: only the client's total")
        hops = [*SEGMENTS, OUTSIDE]
        return {
            "every_s": self._timer_every_s,
            "hops": hops,
            "about": {name: ABOUT[name] for name in hops},
            "recent": [self._timed_json(p) for p in reversed(self._timed)],
            "slowest": [self._timed_json(p) for p in slowest[: self._slowest_len]],
            "failed": self.timed_failed,
            "note": "; ".join(notes),
            "trace_view": bool(self._trace_view),
        }

    def _timed_json(self, timed: TimedRequest) -> dict[str, Any]:
        return {
            "trace_id": timed.trace_id,
            "elapsed_s": round(timed.elapsed_s, 2),
            "total_ms": round(timed.total_ms, 2),
            "segments": {name: round(ms, 2) for name, ms in timed.segments.items()},
            "server_timing": {hop: round(ms, 2) for hop, ms in timed.timing.items()},
            "trace_url": trace_url(self._trace_view, timed.trace_id),
        }

    def _history_json(self) -> dict[str, Any]:
        """Aligned series: ``t`` (seconds into the run), ``total``, and one per replica that
        has a value in the window (``None`` where it was not in the cluster)."""
        points = list(self._history)
        addresses = sorted({a for p in points for a in p.replicas}, key=address_key)
        return {
            "t": [round(p.elapsed_s, 2) for p in points],
            "total": [round(p.total, 1) for p in points],
            "replicas": {a: [_round(p.replicas.get(a)) for p in points] for a in addresses},
        }
