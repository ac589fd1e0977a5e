"""What the telemetry tests share: telemetry on against the OTLP receiver, a caller's trace, an
MCP ``tools/call`` sent with it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import AsyncClient

from assistant import telemetry
from tests.mcp_clients import MODERN, envelope
from tests.otlp_receiver import Receiver
from tests.otlp_receiver import otlp_receiver as otlp_receiver  # the fixture

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's span kinds

Exported = Callable[[], Receiver]


@pytest.fixture
def traced(
    otlp_receiver: Receiver, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Exported]:
    """Telemetry on (the latest GenAI conventions), exporting to the receiver; ``exported()``
    flushes what is pending and returns the receiver."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.url)
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ops-tests")
    settings.ASSISTANT = {**settings.ASSISTANT, "TELEMETRY": True}

    def exported() -> Receiver:
        active = telemetry.active()
        assert active is not None
        active.flush()
        return otlp_receiver

    yield exported
    telemetry.reset()


def children_of(receiver: Receiver, parent: dict[str, Any]) -> list[str]:
    return sorted(
        span["name"]
        for span in receiver.spans
        if span["parent"] == parent["span_id"] and span["trace_id"] == parent["trace_id"]
    )


async def mcp_tool_call(
    secret: str, name: str, arguments: dict[str, Any], *, trace_in: str = "header"
) -> Any:
    """One MCP ``tools/call`` over Streamable HTTP, sent by a caller whose trace is TRACEPARENT:
    in the ``traceparent`` header, or (``trace_in="meta"``) in ``params._meta`` (SEP-414)."""
    body = envelope("tools/call", {"name": name, "arguments": arguments})
    headers = {**MODERN, "MCP-Method": "tools/call", "MCP-Name": name}
    headers |= {"Authorization": f"Bearer {secret}"}
    if trace_in == "meta":
        body["params"]["_meta"]["traceparent"] = TRACEPARENT
    else:
        headers["traceparent"] = TRACEPARENT
    return await AsyncClient().post(
        "/assistant/mcp/", json.dumps(body), content_type="application/json", headers=headers
    )
