"""Top-k labels of images, through Triton's classification extension: how an answer's entries
read (single files: ``python -m demo_client classify``, :mod:`demo_client.timed`), and of some of
a load's requests (the web view's recent images)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from demo_client.load import OUTPUT_NAME, InferRequest, RequestFactory, image_requests, make_inputs
from demo_client.transports import GRPC, Transport

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prediction:
    """One class of a top-k answer."""

    score: float
    index: int
    label: str


def parse_entry(entry: bytes | str) -> Prediction:
    """Parse one ``"score:index:label"`` string (the label may itself contain ``:``)."""
    text = entry.decode("utf-8") if isinstance(entry, bytes) else entry
    parts = text.split(":", 2)
    if len(parts) < 2:
        raise ValueError(f"not a classification result: {text!r}")
    label = parts[2] if len(parts) == 3 else ""
    return Prediction(score=float(parts[0]), index=int(parts[1]), label=label)


def format_prediction(p: Prediction) -> str:
    """``label (score)``, falling back to the class index when the server sent no label."""
    return f"{p.label or f'class {p.index}'} ({p.score:.3f})"


def labelled_requests(
    images: Sequence[bytes],
    batch: int,
    on_label: Callable[[int, Prediction], None],
    every_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    transport: Transport = GRPC,
) -> RequestFactory:
    """The load's requests (:func:`~demo_client.load.image_requests`, the same images in the
    same order), except that the first request taken after every ``every_s`` seconds asks for
    the top class (``class_count=1``) instead of the probabilities; each of its images' top
    class goes to ``on_label(image index, prediction)``.

    A labelled request does all the work of the others (decoding, batching, the model); only
    middleman's last step differs (one ``score:index:label`` string per image instead of the
    4 kB of probabilities), and at most a few a second are labelled, so the load measured is
    the terminal view's.
    """
    if every_s <= 0:
        raise ValueError("every_s must be positive")
    plain = image_requests(images, batch, transport)
    pool = list(images)
    outputs = [transport.requested_output(OUTPUT_NAME, class_count=1)]
    made: dict[int, InferRequest] = {}
    next_at: float | None = None

    def answered(start: int) -> Callable[[npt.NDArray[Any]], None]:
        def on_answer(output: npt.NDArray[Any]) -> None:
            for row, entries in enumerate(output):
                try:
                    prediction = parse_entry(entries if output.ndim == 1 else entries[0])
                except (ValueError, IndexError, TypeError, UnicodeDecodeError):
                    logger.debug("not a classification result: %r", entries)
                    continue
                on_label((start + row) % len(pool), prediction)

        return on_answer

    def request(number: int) -> InferRequest:
        nonlocal next_at
        now = clock()
        if next_at is not None and now < next_at:
            return plain(number)
        next_at = now + every_s
        start = (number * batch) % len(pool)
        found = made.get(start)
        if found is None:
            chosen = [pool[(start + i) % len(pool)] for i in range(batch)]
            inputs = make_inputs(chosen, transport)
            found = made[start] = InferRequest(inputs, outputs, batch, answered(start))
        return found

    return request
