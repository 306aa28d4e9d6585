"""Top-k labels of single images, through Triton's classification extension."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.aio import InferRequestedOutput

from demo_client.load import OUTPUT_NAME, make_inputs


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


async def classify(
    client: Any, model: str, image: bytes, k: int = 5, timeout_s: float = 10.0
) -> list[Prediction]:
    """The top ``k`` classes of one encoded image, best first."""
    result = await client.infer(
        model,
        make_inputs([image]),
        outputs=[InferRequestedOutput(OUTPUT_NAME, class_count=k)],
        client_timeout=timeout_s,
    )
    entries = result.as_numpy(OUTPUT_NAME)
    if entries is None or entries.ndim != 2 or entries.shape[0] != 1:
        raise ValueError(f"unexpected {OUTPUT_NAME} in the response")
    return [parse_entry(e) for e in entries[0]]


def format_prediction(p: Prediction) -> str:
    """``label (score)``, falling back to the class index when the server sent no label."""
    return f"{p.label or f'class {p.index}'} ({p.score:.3f})"
