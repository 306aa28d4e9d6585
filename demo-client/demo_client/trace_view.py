"""Links to a trace viewer: a URL template (``--trace-view``) with ``{trace_id}`` where a trace's
32 hex digits go, e.g. MLflow's
``http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}`` (pure)."""

from __future__ import annotations

from urllib.parse import urlsplit

FIELD = "{trace_id}"


def check_template(template: str) -> str:
    """``template`` when it makes links: an http(s) URL with ``{trace_id}`` in it, or ``""``
    for none; else ``ValueError`` saying why not."""
    if not template:
        return ""
    if FIELD not in template:
        raise ValueError(f"{template!r} has no {FIELD}: where the trace's id goes in the link")
    url = urlsplit(template.replace(FIELD, "0" * 32))
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ValueError(f"{template!r} is not an http:// or https:// URL")
    return template


def trace_url(template: str, trace_id: str) -> str | None:
    """The link to trace ``trace_id``; ``None`` without a template."""
    return template.replace(FIELD, trace_id) if template else None
