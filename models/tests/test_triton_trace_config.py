"""tritonserver's --trace-config from the OTEL_* environment (the e2e trace test runs it)."""

from __future__ import annotations

from inferline_models.triton import TRACE_RATE_NEVER, trace_config


def test_triton_traces_to_the_services_collector_and_starts_no_trace_of_its_own() -> None:
    settings = trace_config(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    )
    assert settings == [
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        f"rate={TRACE_RATE_NEVER}",
        "opentelemetry,url=http://collector:4318/v1/traces",
        "opentelemetry,resource=service.name=triton",
        "opentelemetry,bsp_schedule_delay=50",
    ]


def test_triton_is_not_traced_while_tracing_is_off_or_over_otlp_grpc() -> None:
    assert trace_config({}) == []
    assert (
        trace_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
        == []
    )
    grpc = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert trace_config(grpc) == []  # Triton exports OTLP/HTTP only
