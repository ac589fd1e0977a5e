"""The chat page in Debian's chromium, driven by Playwright, against the live ASGI server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.models import AuditEntry, Message
from tests.browsing import PHONE, approve, record_frames, screenshots, send, tool_card
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


screenshot = screenshots("")


def conversation_in_url(page: Page) -> str:
    page.wait_for_url("**/assistant/?c=*")
    return page.url.split("?c=", 1)[1]


def assistant_bubbles(page: Page) -> Any:
    return page.locator("#messages .bubble.assistant")


def test_a_reply_streams_in_with_its_tool_card(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    received, messages = record_frames(page)
    page.reload()
    expect(page.locator("#status")).to_have_text("connected")

    send(page, "ping")

    expect(page.locator(".bubble.user .text")).to_have_text("ping")
    reply = assistant_bubbles(page)
    expect(reply.locator(".text")).to_have_text("pong for plain")
    expect(reply).not_to_contain_class("streaming")
    card = tool_card(page, "ping")
    expect(card.locator(".badge")).to_have_text("executed")
    expect(page.get_by_role("button", name="Send")).to_be_visible()
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    conversation = conversation_in_url(page)
    expect(page.locator("#conversations a[aria-current=true]")).to_have_text("ping")
    expect(page.locator("#title")).to_have_text("ping")
    screenshot(page, "1-ping")

    stored = Message.objects.get(conversation_id=conversation, role="assistant")
    assert (stored.text, stored.status) == ("pong for plain", "complete")
    finished = [frame["type"] for frame in received].index("RUN_FINISHED")
    streamed = [
        frame["delta"]
        for frame in received[:finished]
        if frame["type"] == "TEXT_MESSAGE_CONTENT" and frame["messageId"] == str(stored.pk)
    ]
    assert "".join(streamed) == "pong for plain"
    assert any(isinstance(message, list) for message in messages)  # the run came in bursts


def test_a_dangerous_action_waits_for_approval_then_runs(
    open_chat: Callable[..., Page], clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-42")
    page = open_chat(clerk)

    send(page, f"cancel order order_id={order.pk}")

    approval = page.locator(".approval")
    expect(approval).to_contain_text(f"Cancel an order for good (order_id: {order.pk})")
    expect(tool_card(page, "cancel_order").locator(".badge")).to_have_text("confirmation requested")
    screenshot(page, "2-approval")
    assert Order.objects.get(pk=order.pk).status == "open"

    approve(page, approval)  # (dangerous: the button is held, not clicked)

    expect(assistant_bubbles(page).last.locator(".text")).to_have_text(
        f"Cancelled order {order.pk}"
    )
    expect(tool_card(page, "cancel_order").last.locator(".badge")).to_have_text("confirmed")
    expect(page.get_by_role("button", name="Send")).to_be_visible()
    screenshot(page, "2-approved")
    expect(approval).to_have_count(0)
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    decisions = AuditEntry.objects.filter(operation="cancel_order").order_by("id")
    assert list(decisions.values_list("decision", flat=True)) == [
        "confirmation_requested",
        "confirmed",
    ]


def test_stop_ends_a_long_turn_within_seconds(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    stop = page.get_by_role("button", name="Stop")

    send(page, "slow seconds=30")

    expect(stop).to_be_visible()
    expect(page.get_by_role("button", name="Send")).to_be_hidden()
    expect(tool_card(page, "slow").locator(".badge")).to_have_text("running")
    conversation = conversation_in_url(page)
    stop.click()

    expect(stop).to_be_hidden(timeout=2_000)
    expect(page.get_by_role("button", name="Send")).to_be_visible(timeout=2_000)
    reply = assistant_bubbles(page)
    expect(reply.locator(".state")).to_have_text("stopped")
    expect(reply.locator(".text")).to_have_text("")
    screenshot(page, "3-stopped")
    expect(tool_card(page, "slow").locator(".badge")).to_have_text("cancelled")
    stored = Message.objects.get(conversation_id=conversation, role="assistant")
    assert stored.status == "cancelled"
    assert AuditEntry.objects.get(operation="slow").decision == "cancelled"


def test_a_reload_mid_turn_shows_the_history_and_the_reply_finishing(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    send(page, "ping")
    expect(assistant_bubbles(page).locator(".text")).to_have_text("pong for plain")
    conversation = conversation_in_url(page)

    send(page, "slow seconds=2")
    expect(tool_card(page, "slow").locator(".badge")).to_have_text("running")
    page.reload()

    assert page.url.endswith(f"?c={conversation}")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.locator(".bubble.user .text")).to_have_text(["ping", "slow seconds=2"])
    expect(assistant_bubbles(page).first.locator(".text")).to_have_text("pong for plain")
    screenshot(page, "4-reloaded-mid-turn")
    expect(assistant_bubbles(page).last.locator(".text")).to_have_text("slept 2s")
    expect(tool_card(page, "slow").locator(".badge")).to_have_text("executed")
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(assistant_bubbles(page)).to_have_count(2)
    screenshot(page, "4-finished-after-reload")
    assert list(
        Message.objects.filter(conversation_id=conversation).values_list("role", "status")
    ) == [
        ("user", "complete"),
        ("assistant", "complete"),
        ("user", "complete"),
        ("assistant", "complete"),
    ]


def test_the_chat_is_usable_on_a_phone(open_chat: Callable[..., Page], plain_user: Any) -> None:
    page = open_chat(
        plain_user, viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    send(page, "ping")
    expect(assistant_bubbles(page).locator(".text")).to_have_text("pong for plain")

    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    for part in ("#title", ".bubble.user", ".bubble.assistant", "#input", "#send"):
        expect(page.locator(part)).to_be_in_viewport(ratio=1)
    expect(page.get_by_role("navigation", name="Conversations")).not_to_be_in_viewport()
    screenshot(page, "5-phone")

    page.get_by_role("button", name="Conversations").click()

    conversations = page.get_by_role("navigation", name="Conversations")
    expect(conversations).to_be_in_viewport(ratio=1)
    expect(conversations.get_by_role("link")).to_have_text(["ping"])
    screenshot(page, "5-phone-conversations")

    page.get_by_role("button", name="+ New").click()

    expect(conversations).not_to_be_in_viewport()
    expect(page.locator("#title")).to_have_text("New conversation")
    expect(page.get_by_text("Ask me something")).to_be_in_viewport()
