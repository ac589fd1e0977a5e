"""An MCP client's dangerous call approved by its user on the approvals page, in Debian's chromium."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.access import tokens
from assistant.models import AuditEntry, PendingAction
from tests.browsing import ARTIFACTS
from tests.mcp_clients import mcp_client
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def call_over_mcp(url: str, secret: str, operation: str, arguments: dict[str, Any]) -> Any:
    """One MCP call, on a thread of its own (Playwright's sync API owns this thread's loop)."""

    async def call() -> Any:
        async with mcp_client(url, secret) as client:
            return await client.call_tool(operation, arguments)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, call()).result()


def test_a_dangerous_mcp_call_is_approved_on_the_page_it_links_to_and_the_retry_gets_the_run(
    open_chat: Callable[..., Page], asgi_live_server: str, superuser: Any
) -> None:
    order = Order.objects.create(reference="ORD-M", owner=superuser)
    _, secret = tokens.issue(superuser, name="claude")
    arguments = {"order_id": order.pk}

    waiting = call_over_mcp(asgi_live_server, secret, "cancel_order", arguments)
    link = waiting.structured_content["approval_url"]

    page = open_chat(superuser)
    page.goto(link)  # where the MCP client sent its user
    card = page.locator(".inbox-item").filter(has_text=f"order_id: {order.pk}")
    expect(card).to_have_count(1)
    expect(card).to_contain_text("Cancel an order for good")
    expect(card.locator(".where")).to_contain_text("asked by an MCP client")
    page.screenshot(path=str(ARTIFACTS / "mcp-approval.png"), full_page=True)
    button = card.get_by_role("button", name="Hold to approve")
    button.hover()
    page.mouse.down()
    page.wait_for_timeout(1300)
    page.mouse.up()
    expect(card.locator(".approval-result")).to_have_text(f"confirmed: Cancelled order {order.pk}")

    retried = call_over_mcp(asgi_live_server, secret, "cancel_order", arguments)
    assert retried.content[0].text == f"Cancelled order {order.pk}"
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    action = PendingAction.objects.get()
    assert action.status == "confirmed"
    assert action.delivered_at is not None
    assert list(
        AuditEntry.objects.filter(operation="cancel_order")
        .order_by("id")
        .values_list("decision", "source")
    ) == [("confirmation_requested", "mcp"), ("confirmed", "websocket")]
