"""The chat page people read: it fits a phone, says each thing once and in words, light and dark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.models import Conversation, PendingAction
from tests.browsing import ARTIFACTS, PHONE, go, send
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (390, 768, 1280)
# nine columns of a report, as a tool's data (the shape of an SQL result)
WIDE = {
    "columns": [
        "reference",
        "customer",
        "status",
        "warehouse",
        "carrier",
        "created",
        "shipped",
        "amount",
        "note",
    ],
    "rows": [
        [
            f"ORD-{n:04}",
            "Northwind Traders International",
            "shipped",
            "Rotterdam-Europoort",
            "Global Express Freight",
            "2026-12-01T09:30:00Z",
            "2026-12-03T16:45:00Z",
            12345.67,
            "left at the loading dock",
        ]
        for n in range(3)
    ],
}


def show_wide_result(page: Page) -> None:
    """The last tool card of the page gets a nine-column result, as an outcome event gives it."""
    page.evaluate(
        """(rows) => {
          const card = [...document.querySelectorAll("details.tool")].pop();
          window.assistantRender.showData(card, rows);
        }""",
        WIDE,
    )
    expect(page.locator(".data-table th")).to_have_count(9)


def no_sideways_scroll(page: Page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    expect(page.get_by_role("button", name="Send")).to_be_in_viewport(ratio=1)


def ask(user: Any, chat: Conversation, preview: dict[str, Any], summary: str) -> PendingAction:
    order = Order.objects.create(reference=f"ORD-{Order.objects.count() + 1}")
    return PendingAction.open(
        user=user,
        operation="cancel_order",
        entities={"order_id": order.pk},
        conversation=chat,
        summary=summary,
        preview=preview,
        ttl_seconds=600,
    )


def test_a_wide_result_scrolls_in_its_own_box_and_send_stays_on_a_phone(
    open_chat: Callable[..., Page], clerk: Any
) -> None:
    Order.objects.create(reference="ORD-1")
    page = open_chat(clerk, viewport=PHONE, is_mobile=True, has_touch=True)
    send(page, "list orders")
    expect(page.locator(".bubble.assistant .text")).to_have_text("ORD-1")

    show_wide_result(page)

    no_sideways_scroll(page, PHONE["width"])
    scroller = page.locator(".data-table .data-scroll").last
    assert scroller.evaluate("box => box.scrollWidth > box.clientWidth")  # it scrolls, not the page
    assert scroller.evaluate("box => getComputedStyle(box).overflowX") == "auto"


def test_an_approval_card_marks_a_change_only_where_the_value_changes(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    chat = Conversation.objects.create(user=clerk, title="Orders")
    changes = {
        "kind": "changes",
        "rows": [
            {"field": "quantity", "before": 3, "after": 3},
            {"field": "status", "before": "open", "after": "cancelled"},
        ],
    }
    ask(clerk, chat, changes, "Cancel the order")
    page = open_chat(clerk)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")

    rows = page.locator(".approval table tbody tr")
    expect(rows).to_have_text(["quantity3unchanged", "statusopencancelled"])
    struck = page.locator(".approval td").evaluate_all(
        "cells => cells.filter(cell => getComputedStyle(cell).textDecorationLine === 'line-through')"
        ".map(cell => cell.textContent)"
    )
    assert struck == ["open"]


def test_approval_cards_leave_the_conversation_in_view(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    chat = Conversation.objects.create(user=clerk, title="Orders")
    many = {"kind": "list", "items": [f"order ORD-{n} and its lines" for n in range(40)]}
    for n in range(3):
        ask(clerk, chat, many, f"Cancel batch {n}")
    page = open_chat(clerk, viewport=PHONE, is_mobile=True, has_touch=True)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")
    expect(page.locator(".approval")).to_have_count(3)

    approvals = page.locator("#approvals").bounding_box()
    messages = page.locator("#messages").bounding_box()
    assert approvals is not None
    assert messages is not None
    assert approvals["height"] <= PHONE["height"] * 0.4
    assert messages["height"] >= PHONE["height"] * 0.3
    no_sideways_scroll(page, PHONE["width"])


def test_capabilities_are_listed_once_by_their_names(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)

    send(page, "what can you do?")

    reply = page.locator(".bubble.assistant .text")
    expect(reply).to_contain_text("Ping: Answer pong")
    expect(page.locator(".data-table")).to_be_hidden()  # (its rows are the reply's list)
    said = page.locator("#messages").inner_text()
    assert said.count("Ping: Answer pong") == 1
    assert "show_capabilities" not in said


def test_tool_cards_and_jobs_show_names_not_functions_or_ids(
    open_chat: Callable[..., Page], diagnostician: Any
) -> None:
    page = open_chat(diagnostician)

    send(page, "ping")
    card = page.locator("details.tool")
    expect(card.locator("summary")).to_contain_text("Ping")
    expect(card).to_have_attribute("data-operation", "ping")
    send(page, "start job")

    job = page.locator(".job")
    expect(job.locator(".job-head")).to_contain_text("Start job")
    assert "start_job" not in job.inner_text()
    expect(page.locator("details.tool").last.locator("summary")).to_contain_text("Start job")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_at_three_widths(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any, scheme: str
) -> None:
    chat = Conversation.objects.create(user=clerk, title="Orders")
    ask(
        clerk,
        chat,
        {"kind": "changes", "rows": [{"field": "status", "before": "open", "after": "cancelled"}]},
        "Cancel order ORD-1",
    )
    page = open_chat(clerk, color_scheme=scheme, reduced_motion="reduce")  # (no sidebar sliding)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")
    send(page, "list orders")
    expect(page.locator(".bubble.assistant .text").last).to_have_text("ORD-1")
    show_wide_result(page)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == {"light": "rgb(245, 247, 250)", "dark": "rgb(18, 24, 32)"}[scheme]

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 844})
        no_sideways_scroll(page, width)
        expect(page.locator(".approval")).to_be_visible()
        page.screenshot(path=str(ARTIFACTS.parent / f"chat-{width}-{scheme}.png"))
