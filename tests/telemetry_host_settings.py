"""Test settings of a project that set up OpenTelemetry itself, as ``opentelemetry-instrument``
does: a global tracer provider exporting over OTLP/HTTP (to ``OTEL_EXPORTER_OTLP_ENDPOINT``),
which the assistant then records into, beside the ``mcp`` SDK's own spans."""

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.settings import *  # noqa: F403
from tests.settings import ASSISTANT

ASSISTANT = {**ASSISTANT, "TELEMETRY": True}

_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))  # each span as it ends
trace.set_tracer_provider(_provider)
