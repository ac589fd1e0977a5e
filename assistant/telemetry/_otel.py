"""The OpenTelemetry side of telemetry, imported only once it is on.

Follows the GenAI semantic conventions v1.41.0 when ``OTEL_SEMCONV_STABILITY_OPT_IN`` holds
``gen_ai_latest_experimental``, and their v1.36.0 baseline otherwise (``gen_ai.system`` for
the provider; a tool's arguments and result under ``assistant.*``, as v1.36.0 names neither).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import SpanKind, StatusCode

from ..conf import assistant_settings
from ..core.redaction import redact_text, sensitive_values

logger = logging.getLogger("assistant.telemetry")
SEMCONV_VERSION = "1.41.0"
BASELINE_VERSION = "1.36.0"
OPT_IN = "gen_ai_latest_experimental"
SCOPE = "django-ops-assistant"
DEFAULT_SERVICE = "django-ops-assistant"
# gen_ai.provider.name of the hosted endpoints the conventions name (v1.41.0's well-known values),
# by the host of ``LLM["BASE_URL"]``; any other endpoint (a local server, a proxy) is named
# OTHER_PROVIDER, a custom value as the conventions allow: "openai" would count its calls as
# OpenAI's. ``LLM["PROVIDER_NAME"]`` names it instead.
PROVIDER_HOSTS = [
    (re.compile(pattern), provider)
    for pattern, provider in (
        (r"api\.openai\.com", "openai"),
        (r"[a-z0-9-]+\.(openai\.azure|cognitiveservices\.azure)\.com", "azure.ai.openai"),
        (r"models\.inference\.ai\.azure\.com", "azure.ai.inference"),
        (r"generativelanguage\.googleapis\.com", "gcp.gemini"),
        (r"([a-z0-9-]+-)?aiplatform\.googleapis\.com", "gcp.vertex_ai"),
        (r"api\.anthropic\.com", "anthropic"),
        (r"bedrock-runtime(-fips)?\.[a-z0-9-]+\.amazonaws\.com", "aws.bedrock"),
        (r"api\.mistral\.ai", "mistral_ai"),
        (r"api\.groq\.com", "groq"),
        (r"api\.deepseek\.com", "deepseek"),
        (r"api\.x\.ai", "x_ai"),
        (r"api\.perplexity\.ai", "perplexity"),
        (r"api\.cohere\.(ai|com)", "cohere"),
        (r"[a-z0-9-]+\.ml\.cloud\.ibm\.com", "ibm.watsonx.ai"),
    )
]
OTHER_PROVIDER = "openai_compatible"
# The conventions' recommended bucket boundaries (seconds; tokens).
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]
DURATION_BUCKETS += [40.96, 81.92]
TOKEN_BUCKETS = [float(4**power) for power in range(14)]
# Decisions that are no error: the call ran, waits for a person, or a person refused it.
NOT_ERRORS = {"executed", "confirmed", "confirmation_requested", "cancelled", "expired"}


def latest() -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the latest GenAI conventions."""
    asked = os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
    return OPT_IN in {part.strip() for part in asked.split(",")}


def error_type(exc: BaseException) -> str:
    """A low-cardinality name for what ended an operation: an assistant error's code, else its
    class (never its message, which may quote what a user typed)."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else type(exc).__qualname__


@dataclass(kw_only=True, slots=True)
class Names:
    """The attribute names that differ between the baseline and the latest conventions."""

    provider: str
    arguments: str
    result: str
    agent_kind: SpanKind

    @classmethod
    def chosen(cls) -> Names:
        if latest():
            return cls(
                provider="gen_ai.provider.name",
                arguments="gen_ai.tool.call.arguments",
                result="gen_ai.tool.call.result",
                agent_kind=SpanKind.INTERNAL,
            )
        return cls(
            provider="gen_ai.system",
            arguments="assistant.tool.call.arguments",
            result="assistant.tool.call.result",
            agent_kind=SpanKind.CLIENT,
        )


@dataclass(slots=True)
class OpenSpan:
    """An open span and what instrumented code told it (kept for the metrics at its end)."""

    span: trace.Span
    noted: dict[str, Any] = field(default_factory=dict)
    failed: str = ""
    settled: bool = False  # what its operation came to is recorded: an exception changes nothing

    def set(self, name: str, value: Any) -> None:
        if value is None or value == "" or value == []:
            return
        self.noted[name] = value
        self.span.set_attribute(name, value)

    def fail(self, error_type: str) -> None:
        self.failed = error_type
        self.span.set_attribute("error.type", error_type)
        self.span.set_status(StatusCode.ERROR, error_type)


class Instruments:
    """The metrics: GenAI's two histograms and the assistant's two counters."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.turns = meter.create_counter(
            "assistant.turns", unit="{turn}", description="Turns run, by how they ended"
        )
        self.tool_calls = meter.create_counter(
            "assistant.tool_calls", unit="{call}", description="Tool calls, by decision"
        )


class Telemetry:
    """The tracer and meter the assistant records with, and the providers it owns (if any)."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, *, owned: bool) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.owned = owned
        schema = (
            f"https://opentelemetry.io/schemas/{SEMCONV_VERSION if latest() else BASELINE_VERSION}"
        )
        self.tracer = tracer_provider.get_tracer(SCOPE, schema_url=schema)
        self.instruments = Instruments(meter_provider.get_meter(SCOPE, schema_url=schema))
        self.names = Names.chosen()

    @classmethod
    def start(cls) -> Telemetry:
        """The host's providers if it configured its own; else ours, exporting over OTLP/HTTP to
        where the ``OTEL_EXPORTER_OTLP_*`` variables say (http://localhost:4318 by default)."""
        host = trace.get_tracer_provider()
        if not isinstance(host, trace.ProxyTracerProvider):
            return cls(host, metrics.get_meter_provider(), owned=False)
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": DEFAULT_SERVICE}
        resource = Resource.create(named)
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        return cls(tracer_provider, meter_provider, owned=True)

    def flush(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            force_flush = getattr(provider, "force_flush", None)
            if force_flush is not None:
                force_flush()

    def shutdown(self) -> None:
        """Export what is pending and stop our exporters (the host's are the host's)."""
        if self.owned:
            self.tracer_provider.shutdown()
            self.meter_provider.shutdown()

    # -- spans -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def opened(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        parent: Any = None,
        *,
        current: bool = True,
    ) -> Iterator[OpenSpan]:
        """A span for the block (current in it, unless not); what raises through it is its
        ``error.type``."""
        span = self.tracer.start_span(name, context=parent, kind=kind)
        opened = OpenSpan(span)
        for key, value in attributes.items():
            opened.set(key, value)
        token = otel_context.attach(trace.set_span_in_context(span, parent)) if current else None
        try:
            yield opened
        except BaseException as exc:
            if not opened.failed and not opened.settled:
                opened.fail(error_type(exc))
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
            span.end()

    @contextlib.contextmanager
    def within(self, span: Any) -> Iterator[None]:
        token = otel_context.attach(trace.set_span_in_context(span.span))
        try:
            yield
        finally:
            otel_context.detach(token)

    @contextlib.contextmanager
    def incoming(self, carrier: Mapping[str, str]) -> Iterator[None]:
        token = otel_context.attach(propagate.extract(carrier))
        try:
            yield
        finally:
            otel_context.detach(token)

    def server_span(
        self,
        name: str,
        carrier: Mapping[str, str] | None,
        attributes: dict[str, Any],
        *,
        current: bool = True,
    ) -> contextlib.AbstractContextManager[OpenSpan]:
        parent = propagate.extract(carrier) if carrier else None
        return self.opened(name, SpanKind.SERVER, attributes, parent, current=current)

    @contextlib.contextmanager
    def turn_span(self, turn: Any) -> Iterator[OpenSpan]:
        agent = assistant_settings.TELEMETRY_AGENT_NAME
        provider = provider_name(assistant_settings.llm)
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            self.names.provider: provider,
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": turn.thread_id,
            "assistant.run_id": turn.run_id,
            "assistant.source": turn.source,
        }
        started = time.perf_counter()
        with self.opened(f"invoke_agent {agent}", self.names.agent_kind, attributes) as span:
            try:
                yield span
            finally:
                span.set("gen_ai.response.model", turn.model or None)
                span.set("gen_ai.usage.input_tokens", turn.usage.get("prompt_tokens"))
                span.set("gen_ai.usage.output_tokens", turn.usage.get("completion_tokens"))
                measured = {"gen_ai.operation.name": "invoke_agent", self.names.provider: provider}
                if span.failed:
                    measured["error.type"] = span.failed
                self.instruments.duration.record(time.perf_counter() - started, measured)
                status = span.noted.get("assistant.turn.status", "unknown")
                self.instruments.turns.add(1, {"assistant.turn.status": status})

    @contextlib.contextmanager
    def model_span(self, config: Mapping[str, Any]) -> Iterator[OpenSpan]:
        model = str(config.get("MODEL") or "")
        provider = provider_name(config)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            self.names.provider: provider,
            "gen_ai.request.model": model,
            "gen_ai.request.temperature": config.get("TEMPERATURE"),
        }
        attributes.update(server_of(config.get("BASE_URL")))
        started = time.perf_counter()
        with self.opened(f"chat {model}".strip(), SpanKind.CLIENT, attributes) as span:
            try:
                yield span
            finally:
                self.measure_model_call(span, model, provider, time.perf_counter() - started)

    def measure_model_call(self, span: OpenSpan, model: str, provider: str, seconds: float) -> None:
        measured: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            self.names.provider: provider,
            "gen_ai.request.model": model,
        }
        if "gen_ai.response.model" in span.noted:
            measured["gen_ai.response.model"] = span.noted["gen_ai.response.model"]
        if span.failed:
            measured["error.type"] = span.failed
        self.instruments.duration.record(seconds, measured)
        for token_type, name in (
            ("input", "gen_ai.usage.input_tokens"),
            ("output", "gen_ai.usage.output_tokens"),
        ):
            if name in span.noted:
                self.instruments.tokens.record(
                    span.noted[name], {**measured, "gen_ai.token.type": token_type}
                )

    def tool_span(self, call: Any) -> contextlib.AbstractContextManager[OpenSpan]:
        """A call's ``execute_tool`` span from the door on: the parent of what its steps and its
        handler start (``tool_called`` adds what it came to)."""
        name = tool_name(call.tool, call.operation)
        context = call.context
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": context.call_id or None,
            "gen_ai.conversation.id": str(context.conversation.pk)
            if context.conversation
            else None,
            "assistant.source": context.source,
        }
        return self.opened(f"execute_tool {name}", SpanKind.INTERNAL, attributes)

    def tool_called(self, span: Any, call: Any, outcome: Any) -> None:
        tool = outcome.tool or outcome.audit_tool
        name = tool_name(tool, outcome.operation)
        decision = str(outcome.audit_decision or outcome.decision)
        shown = outcome.entities if outcome.audit_entities is None else outcome.audit_entities
        if span.noted.get("gen_ai.tool.name") != name:  # (a hidden tool's call: found by audit)
            span.span.update_name(f"execute_tool {name}")
            span.set("gen_ai.tool.name", name)
        span.set("gen_ai.tool.description", tool.description if tool is not None else None)
        span.set(self.names.arguments, json.dumps(shown, default=str))  # redacted as audited
        span.set("assistant.audit_entry_id", outcome.audit_id)
        span.set("assistant.decision", decision)
        span.set("assistant.risk_level", tool.risk_level.value if tool is not None else None)
        if assistant_settings.TELEMETRY_RESULTS and outcome.result is not None:
            secrets = sensitive_values(tool, call.values or call.raw)
            span.set(self.names.result, redact_text(str(outcome.result.text), secrets))
        if decision not in NOT_ERRORS:
            span.fail(outcome.code or decision)
        span.settled = True
        self.instruments.tool_calls.add(
            1, {"gen_ai.tool.name": name, "assistant.decision": decision}
        )


def tool_name(tool: Any, operation: Any) -> str:
    """A call's tool name: its tool's operation, else what the caller asked for (cut short)."""
    return tool.operation if tool is not None else str(operation)[:64]


def provider_name(llm: Mapping[str, Any]) -> str:
    """``gen_ai.provider.name``: ``LLM["PROVIDER_NAME"]``, else the well-known provider whose
    hosted endpoint ``LLM["BASE_URL"]`` names (OpenAI's without one), else OTHER_PROVIDER."""
    named = llm.get("PROVIDER_NAME")
    if isinstance(named, str) and named.strip():
        return named.strip()
    base_url = llm.get("BASE_URL")
    if not isinstance(base_url, str) or not base_url:
        return "openai"
    host = (urlsplit(base_url).hostname or "").lower()
    for pattern, provider in PROVIDER_HOSTS:
        if pattern.fullmatch(host):
            return provider
    return OTHER_PROVIDER


def server_of(base_url: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of the model's endpoint (OpenAI's by default)."""
    if not isinstance(base_url, str) or not base_url:
        return {"server.address": "api.openai.com", "server.port": 443}
    parts = urlsplit(base_url)
    default = 443 if parts.scheme == "https" else 80
    return {"server.address": parts.hostname, "server.port": parts.port or default}
