"""MCP under real ASGI servers (daphne sends no lifespan; uvicorn), several processes, and stdio."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from mcp import Client, StdioServerParameters

from assistant.dispatch.confirmation import confirm_action
from assistant.models import AuditEntry, PendingAction
from tests.mcp_clients import MODES, issue, mcp_client, server_processes
from tests.processes import ROOT, database_url
from tests.testapp.models import Order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

APPROVED = types.ElicitResult(action="accept", content={"approved": True})


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
@pytest.mark.parametrize("mode", MODES)
async def test_the_endpoint_serves_each_revision_under_each_server(
    server: str, mode: str, tmp_path: Path, reader: Any, clerk: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-1", owner=clerk)

    async def approve(ctx: Any, params: Any) -> types.ElicitResult:
        return APPROVED

    with server_processes([server], tmp_path) as [url]:
        async with mcp_client(url, await issue(reader), mode) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            orders = await client.call_tool("list_orders", {})
        async with mcp_client(
            url, await issue(clerk), mode, elicitation_callback=approve
        ) as client:
            approved = await client.call_tool("approve_order", {"order_id": order.pk})
    assert "list_orders" in listed
    assert "approve_order" not in listed
    assert orders.content[0].text == "ORD-1"
    assert approved.content[0].text == "Approved ORD-1"
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).approvals == 1


async def test_a_stateless_confirmation_retried_on_another_process_runs_exactly_once(
    tmp_path: Path, clerk: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-2", owner=clerk)
    secret = await issue(clerk)
    arguments = {"order_id": order.pk}
    with server_processes(["uvicorn", "daphne"], tmp_path) as [first, second]:
        async with (
            mcp_client(first, secret, "2026-07-28", elicitation_callback=_never) as one,
            mcp_client(second, secret, "2026-07-28", elicitation_callback=_never) as two,
        ):
            asked = await one.session.call_tool(
                "approve_order", arguments, allow_input_required=True
            )
            assert isinstance(asked, types.InputRequiredResult)
            assert list(asked.input_requests or {}) == ["approval"]
            answer = {"approval": APPROVED}
            state = asked.request_state
            ran = await two.session.call_tool(
                "approve_order", arguments, input_responses=answer, request_state=state
            )
            again = await one.session.call_tool(
                "approve_order", arguments, input_responses=answer, request_state=state
            )
    assert ran.content[0].text == "Approved ORD-2"
    assert again.is_error  # the same answer replayed: nothing runs a second time
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).approvals == 1
    confirmed = await sync_to_async(AuditEntry.objects.filter(decision="confirmed").count)()
    assert confirmed == 1


async def test_a_dangerous_action_approved_elsewhere_is_delivered_to_one_retry_across_processes(
    tmp_path: Path, superuser: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-3", owner=superuser)
    secret = await issue(superuser)
    arguments = {"order_id": order.pk}
    with server_processes(["uvicorn", "uvicorn"], tmp_path) as [first, second]:
        async with mcp_client(first, secret) as one, mcp_client(second, secret) as two:
            waiting = await one.call_tool("cancel_order", arguments)
            action_id = waiting.structured_content["action_id"]
            await sync_to_async(confirm_action)(action_id, user=superuser, source="rest")
            retries = await asyncio.gather(
                one.call_tool("cancel_order", arguments), two.call_tool("cancel_order", arguments)
            )
    texts = [retry.content[0].text for retry in retries]
    assert texts.count(f"Cancelled order {order.pk}") == 1, texts
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).status == "cancelled"
    confirmed = await sync_to_async(
        AuditEntry.objects.filter(operation="cancel_order", decision="confirmed").count
    )()
    assert confirmed == 1


async def _never(ctx: Any, params: Any) -> types.ElicitResult:
    raise AssertionError("the test answers this round itself")


# -- stdio ----------------------------------------------------------------------------------------


def stdio_server(username: str) -> StdioServerParameters:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
    }
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "django", "assistant_mcp", "--user", username],
        env=env,
        cwd=str(ROOT),
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_serves_that_users_tools_audited_as_mcp(mode: str, reader: Any) -> None:
    await sync_to_async(Order.objects.create)(reference="ORD-4", owner=reader)
    async with Client(stdio_server("reader"), mode=mode) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        orders = await client.call_tool("list_orders", {})
        denied = await client.call_tool("cancel_order", {"order_id": 1})
    assert "list_orders" in listed
    assert "cancel_order" not in listed
    assert orders.content[0].text == "ORD-4"
    assert denied.is_error
    entries = await sync_to_async(list)(AuditEntry.objects.order_by("id"))
    assert [(e.operation, e.decision, e.source) for e in entries] == [
        ("list_orders", "executed", "mcp"),
        ("cancel_order", "denied", "mcp"),
    ]
    assert entries[0].client.endswith("(stdio)")


def test_stdio_refuses_an_unknown_or_deactivated_user(make_user: Any) -> None:
    make_user("leaver", is_active=False)
    for username, problem in (("nobody", "No user named 'nobody'"), ("leaver", "deactivated")):
        params = stdio_server(username)
        finished = subprocess.run(
            [params.command, *params.args],
            env=params.env,
            cwd=params.cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert finished.returncode == 1
        assert problem in finished.stderr
        assert finished.stdout == ""  # stdout is the protocol's: nothing else is written there


async def test_a_pending_action_from_stdio_links_to_the_approvals_page_by_path(
    superuser: Any,
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-5", owner=superuser)
    async with Client(stdio_server("root"), mode="legacy") as client:
        waiting = await client.call_tool("cancel_order", {"order_id": order.pk})
    action = await sync_to_async(PendingAction.objects.get)()
    assert waiting.structured_content["approval_url"] == f"/assistant/approvals/?action={action.pk}"
