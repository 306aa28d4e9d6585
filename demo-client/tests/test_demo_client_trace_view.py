"""Links to a trace viewer: the ``--trace-view`` template, checked, and the links it makes."""

from __future__ import annotations

import pytest

from demo_client.trace_view import check_template, trace_url

MLFLOW = "http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_template_puts_the_trace_id_where_it_says() -> None:
    assert check_template(MLFLOW) == MLFLOW
    assert trace_url(MLFLOW, TRACE_ID) == (
        f"http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{TRACE_ID}"
    )
    assert trace_url("https://jaeger:16686/trace/{trace_id}", TRACE_ID) == (
        f"https://jaeger:16686/trace/{TRACE_ID}"
    )


def test_no_template_makes_no_links() -> None:
    assert check_template("") == ""
    assert trace_url("", TRACE_ID) is None


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("http://127.0.0.1:5000/#/traces", "has no {trace_id}"),
        ("javascript:alert('{trace_id}')", "is not an http:// or https:// URL"),
        ("ftp://host/{trace_id}", "is not an http:// or https:// URL"),
        ("/traces/{trace_id}", "is not an http:// or https:// URL"),
    ],
)
def test_a_template_that_makes_no_http_link_to_a_trace_is_refused(template: str, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("{", r"\{").replace("}", r"\}")):
        check_template(template)
