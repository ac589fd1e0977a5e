"""A project with its own global tracer provider (``opentelemetry-instrument``) gets one SERVER
span per MCP tool call, not the ``mcp`` SDK's and ours: the SDK's middleware keeps every other
message's span."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from asgiref.sync import sync_to_async

from assistant.access import tokens
from tests.mcp_clients import MODERN, envelope, server_processes
from tests.otlp_receiver import Receiver
from tests.telemetry.tracing import CALLER_SPAN, CALLER_TRACE, TRACEPARENT, children_of
from tests.telemetry.tracing import otlp_receiver as otlp_receiver  # the fixture

SERVER = 2  # OTLP's span kind

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def post(url: str, secret: str, method: str, params: dict[str, Any]) -> httpx2.Response:
    headers = {**MODERN, "MCP-Method": method, "Authorization": f"Bearer {secret}"}
    if method == "tools/call":
        headers |= {"MCP-Name": params["name"], "traceparent": TRACEPARENT}
    body = envelope(method, params)
    return httpx2.post(f"{url}/assistant/mcp/", json=body, headers=headers, timeout=20)


def exported(receiver: Receiver, *names: str) -> None:
    deadline = time.monotonic() + 10
    while not all(receiver.named(name) for name in names):
        assert time.monotonic() < deadline, f"not exported: {names}, got {receiver.spans}"
        time.sleep(0.1)


async def test_one_server_span_per_tool_call_under_the_projects_own_provider(
    otlp_receiver: Receiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make_user: Any
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.url)
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    reader = await sync_to_async(make_user)("reader", "testapp.view_order")
    secret = (await sync_to_async(tokens.issue)(reader, name="host tracing"))[1]

    with server_processes(["uvicorn"], tmp_path, "tests.telemetry_host_settings") as [url]:
        listed = await sync_to_async(post)(url, secret, "tools/list", {})
        called = await sync_to_async(post)(url, secret, "tools/call", {"name": "ping"})
        assert (listed.status_code, called.status_code) == (200, 200), called.text
        exported(otlp_receiver, "tools/list", "execute_tool ping")

    (server,) = otlp_receiver.named("tools/call ping")  # ours alone, not the SDK's as well
    assert server["kind"] == SERVER
    assert (server["trace_id"], server["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    assert children_of(otlp_receiver, server) == ["execute_tool ping"]
    assert otlp_receiver.one("tools/list")["kind"] == SERVER  # the SDK's, for other messages
