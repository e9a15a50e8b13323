"""OpenTelemetry, set up once at process start by the entry point.

Traces: every RPC (gRPC aio server instrumentation) and every database call (psycopg
instrumentation). Metrics: `memplane.rpc.duration` histogram (seconds) by method and
status code. Exported over OTLP/gRPC only when the standard OTEL_EXPORTER_OTLP_ENDPOINT
is set, and served for Prometheus at http://OTEL_EXPORTER_PROMETHEUS_HOST:PORT/metrics
(OpenTelemetry's variables; defaults localhost:9464) when OTEL_METRICS_EXPORTER names
`prometheus`; otherwise the no-op providers stay in place and nothing leaves the process.
Spans never carry memory text or embeddings: psycopg spans hold the SQL text with its
parameters as placeholders (we pass values as bound parameters or literals compiled
by psycopg — `capture_parameters` stays off), RPC spans the method and status. The gRPC interceptors live at the edge
(`memplane.server.api.interceptors`).
"""

from __future__ import annotations

import os

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

SERVICE_NAME = "memplane"


def setup_telemetry(*, span_processor: SpanProcessor | None = None, force: bool = False) -> bool:
    """Install tracer and meter providers and instrument psycopg. Does nothing (returns
    False) unless OTEL_EXPORTER_OTLP_ENDPOINT is set, *force* is true, or a
    *span_processor* (tests: an in-memory exporter) is given."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    prometheus = "prometheus" in os.environ.get("OTEL_METRICS_EXPORTER", "").split(",")
    if not (endpoint or prometheus or force or span_processor):
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", SERVICE_NAME)})
    provider = TracerProvider(resource=resource)
    if span_processor is not None:
        provider.add_span_processor(span_processor)
    readers: list[MetricReader] = []
    if endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    if prometheus:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost")
        start_http_server(int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464")), addr=host)
        readers.append(PrometheusMetricReader())
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    PsycopgInstrumentor().instrument(enable_commenter=False, skip_dep_check=True)
    return True
