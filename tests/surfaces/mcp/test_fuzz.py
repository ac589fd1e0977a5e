"""Hypothesis against the MCP endpoint: any body, any tool call, never a server error or an
unaudited run, and nothing changes for what is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.inbound import encode_header_value

from assistant.access import tokens
from assistant.models import AuditEntry, PendingAction
from tests.mcp_clients import EXAMPLES, MODERN, envelope, json_values
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

OPERATIONS = ["list_orders", "approve_order", "cancel_order", "echo_types", "ping", "explode"]


async def post(
    client: AsyncClient, secret: str, body: bytes, method: str, name: str | None = None
) -> Any:
    """A stateless request with the routing headers a client sends (``Mcp-Name`` for a call)."""
    headers = {**MODERN, "MCP-Method": method, "Authorization": f"Bearer {secret}"}
    if name is not None:
        headers["MCP-Name"] = encode_header_value(name)
    return await client.post(
        "/assistant/mcp/", body, content_type="application/json", headers=headers
    )


def answered_without_a_server_error(response: Any) -> dict[str, Any] | None:
    assert response.status_code < 500, response.status_code
    assert not response.streaming  # quick calls are answered as one JSON document
    raw = response.content
    if not raw:
        return None
    text = raw.decode()
    if text.startswith(("event:", "data:")):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)


@pytest.fixture
def secret(make_user: Any) -> str:
    reader = make_user("reader", "testapp.view_order", "assistant.reports_read")
    return tokens.issue(reader, name="fuzz")[1]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_body_gets_an_answer_not_a_server_error(secret: str, body: bytes) -> None:
    from asgiref.sync import async_to_sync

    response = async_to_sync(post)(AsyncClient(), secret, body, "tools/list")
    answered_without_a_server_error(response)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(OPERATIONS) | st.text(max_size=70),
    arguments=st.dictionaries(st.sampled_from(["order_id", "status", "count", "x"]), json_values)
    | json_values,
)
def test_every_call_that_reaches_dispatch_is_audited_and_refusals_change_nothing(
    secret: str, name: str, arguments: Any
) -> None:
    from asgiref.sync import async_to_sync

    order = Order.objects.get_or_create(reference="ORD-F")[0]
    before = AuditEntry.objects.count()
    body = json.dumps(envelope("tools/call", {"name": name, "arguments": arguments})).encode()
    answer = answered_without_a_server_error(
        async_to_sync(post)(AsyncClient(), secret, body, "tools/call", name)
    )
    assert answer is not None
    audited = AuditEntry.objects.count() - before
    if name in OPERATIONS and isinstance(arguments, dict):
        assert "result" in answer, answer  # a well-formed call reaches dispatch…
    if "result" in answer:
        assert audited == 1, answer  # … and every call that does is audited, once
    else:
        assert audited == 0, answer  # refused by the protocol layer: dispatch never saw it
    # a reader may approve and cancel nothing: whatever was asked, the order is as it was
    order.refresh_from_db()
    assert (order.status, order.approvals) == ("open", 0)
    assert not PendingAction.objects.exists()


async def test_a_refused_envelope_is_a_json_rpc_error(secret: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}).encode()
    answer = answered_without_a_server_error(await post(AsyncClient(), secret, body, "tools/call"))
    assert answer is not None
    assert "error" in answer
    assert await sync_to_async(AuditEntry.objects.count)() == 0
