"""A tool call's ``execute_tool`` span is opened at the door: what the handler starts (its own
tracer's spans, an instrumented client's) is its child, in a turn and in an MCP call alike."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from assistant import ToolCall, ToolResult, assistant_tool, telemetry
from assistant.access import tokens
from assistant.core.registry import ToolRegistry
from assistant.models import AuditEntry
from assistant.surfaces.mcp import transport
from assistant.turns.runs import run_turn
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.telemetry.tracing import CALLER_SPAN, CALLER_TRACE, children_of, mcp_tool_call
from tests.telemetry.tracing import otlp_receiver as otlp_receiver
from tests.telemetry.tracing import traced as traced

pytestmark = pytest.mark.django_db

HANDLERS_SPAN = "resolve host"


def resolve(host: str) -> ToolResult:
    """What a project's handler does: its own work in a span of its own tracer's."""
    active = telemetry.active()
    assert active is not None
    tracer = active.tracer_provider.get_tracer("project.hosts")
    with tracer.start_as_current_span(HANDLERS_SPAN):
        return ToolResult(text=f"{host} is up")


@pytest.fixture
def hosts() -> ToolRegistry:
    """A fresh registry: a sync and an async tool whose handlers trace their work, and one that
    needs a permission few have."""
    site = ToolRegistry("hosts")
    declared = {"domain": "hosts", "risk_level": "safe", "site": site}

    @assistant_tool(operation="check_host", description="Check a host", public=True, **declared)
    def check_host(call: ToolCall, host: str) -> ToolResult:
        return resolve(host)

    @assistant_tool(
        operation="acheck_host", description="Check a host (async)", public=True, **declared
    )
    async def acheck_host(call: ToolCall, host: str) -> ToolResult:
        return resolve(host)

    @assistant_tool(
        operation="drain_host",
        description="Drain a host",
        permission_checks=[("vault", "WRITE")],
        **declared,
    )
    def drain_host(call: ToolCall, host: str) -> ToolResult:
        return resolve(host)

    return site


@pytest.mark.parametrize("operation", ["check_host", "acheck_host"])
def test_a_handlers_own_span_is_a_child_of_its_execute_tool_span_in_a_turn(
    traced, use_llm, plain_user, hosts, operation
):
    use_llm().script(tool_calls(call(operation, {"host": "db1"})), text("db1 is up."))

    run_turn(plain_user, "is db1 up?", site=hosts)

    receiver = traced()
    agent = receiver.one("invoke_agent assistant")
    tool = receiver.one(f"execute_tool {operation}")
    handlers = receiver.one(HANDLERS_SPAN)
    assert tool["parent"] == agent["span_id"]
    assert handlers["parent"] == tool["span_id"]
    assert handlers["trace_id"] == tool["trace_id"] == agent["trace_id"]
    assert tool["start"] <= handlers["start"] <= handlers["end"] <= tool["end"]
    entry = AuditEntry.objects.get(operation=operation)
    assert tool["attributes"]["assistant.audit_entry_id"] == entry.pk
    assert tool["attributes"]["assistant.decision"] == "executed"
    (counted,) = receiver.metrics["assistant.tool_calls"]
    assert counted["value"] == 1


def test_a_refused_call_has_its_span_with_the_decision_and_no_handler_child(
    traced, use_llm, plain_user, hosts
):
    use_llm().script(tool_calls(call("drain_host", {"host": "db1"})), text("I may not."))

    run_turn(plain_user, "drain db1", site=hosts)

    receiver = traced()
    tool = receiver.one("execute_tool drain_host")
    assert tool["parent"] == receiver.one("invoke_agent assistant")["span_id"]
    assert tool["attributes"]["assistant.decision"] == "denied"
    assert tool["attributes"]["error.type"] == "unknown_operation"  # (hidden from this user)
    assert tool["status"] == 2  # ERROR
    assert children_of(receiver, tool) == []
    assert receiver.named(HANDLERS_SPAN) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operation", ["check_host", "acheck_host"])
async def test_a_handlers_own_span_is_a_child_of_its_execute_tool_span_in_an_mcp_call(
    traced, make_user, hosts, monkeypatch, operation
):
    monkeypatch.setattr(transport, "endpoint", transport.Endpoint(site=hosts))
    user = await sync_to_async(make_user)("operator")
    secret = (await sync_to_async(tokens.issue)(user, name="tracing"))[1]

    response = await mcp_tool_call(secret, operation, {"host": "db1"})

    assert response.status_code == 200, response.content
    receiver = traced()
    server = receiver.one(f"tools/call {operation}")
    assert (server["trace_id"], server["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    tool = receiver.one(f"execute_tool {operation}")
    assert tool["parent"] == server["span_id"]
    assert children_of(receiver, tool) == [HANDLERS_SPAN]
    assert tool["attributes"]["assistant.source"] == "mcp"
