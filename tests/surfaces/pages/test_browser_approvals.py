"""Approval cards and the approvals inbox in Debian's chromium, against the live ASGI server."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.models import AuditEntry, Conversation, Message, PendingAction
from tests.approving import CHANGES
from tests.browsing import PHONE, RECORD_VIOLATIONS, go, record_frames, screenshots
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


screenshot = screenshots("approvals-")


def ask(user: Any, order: Order, chat: Conversation | None, **fields: Any) -> PendingAction:
    fields.setdefault("ttl_seconds", 600)
    fields.setdefault("operation", "cancel_order")
    return PendingAction.open(
        user=user, entities={"order_id": order.pk}, conversation=chat, **fields
    )


def hold(page: Page, button: Any, ms: int) -> None:
    button.hover()
    page.mouse.down()
    page.wait_for_timeout(ms)
    page.mouse.up()


def sent_frames(page: Page) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    page.on(
        "websocket",
        lambda socket: socket.on("framesent", lambda data: frames.append(json.loads(data))),
    )
    return frames


def test_a_card_shows_what_will_happen_and_a_dangerous_one_is_approved_by_holding(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-42")
    chat = Conversation.objects.create(user=clerk, title="Orders")
    action = ask(clerk, order, chat, summary="Cancel order ORD-42", preview=CHANGES)
    page = open_chat(clerk)
    page.add_init_script(RECORD_VIOLATIONS)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")

    card = page.locator(".approval")
    expect(card.locator(".approval-summary")).to_have_text("Cancel order ORD-42")
    expect(card.locator(".risk")).to_have_text("dangerous")
    expect(card.locator(".requester")).to_have_text("requested by clerk")
    expect(card.locator(".expiry")).to_have_text("expires in 10 minutes")
    expect(card.locator("table tr")).to_have_text(["FieldBeforeAfter", "statusopencancelled"])
    approve = card.get_by_role("button", name="Hold to approve")
    screenshot(page, "1-card")

    approve.click()  # a click is not enough
    page.wait_for_timeout(1300)
    hold(page, approve, 300)  # nor a short press
    page.wait_for_timeout(1000)
    expect(card).to_have_count(1)
    assert PendingAction.objects.get(pk=action.pk).status == "pending"

    hold(page, approve, 1300)

    expect(card).to_have_count(0)
    expect(page.locator(".bubble.assistant .text").last).to_have_text(f"Cancelled order {order.pk}")
    screenshot(page, "1-approved")
    assert page.evaluate("window.__violations") == []
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    assert PendingAction.objects.get(pk=action.pk).status == "confirmed"

    page.get_by_role("button", name="+ New").click()

    expect(page.locator("#approvals-elsewhere")).to_have_text("")  # nothing waits anywhere now


def test_holding_space_approves_too(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-43")
    chat = Conversation.objects.create(user=clerk, title="Orders")
    ask(clerk, order, chat)
    page = open_chat(clerk)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")
    approve = page.get_by_role("button", name="Hold to approve")

    approve.focus()
    page.keyboard.down("Space")
    page.wait_for_timeout(1300)
    page.keyboard.up("Space")

    expect(page.locator(".approval")).to_have_count(0)
    expect(page.locator(".bubble.assistant .text").last).to_have_text(f"Cancelled order {order.pk}")


def test_cards_stay_in_their_conversation_and_elsewhere_a_count_links_to_the_inbox(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-1")
    first = Conversation.objects.create(user=clerk, title="First")
    second = Conversation.objects.create(user=clerk, title="Second")
    ask(clerk, order, first, summary="Cancel in the first")
    ask(clerk, order, second, summary="Cancel in the second")
    ask(clerk, order, second, summary="Cancel again in the second")
    page = open_chat(clerk)
    received, _ = record_frames(page)
    go(page, f"{asgi_live_server}/assistant/?c={first.pk}")

    expect(page.locator(".approval .approval-summary")).to_have_text(["Cancel in the first"])
    indicator = page.get_by_role("status").filter(has_text="waiting")
    expect(indicator).to_have_text("2 approvals waiting")
    screenshot(page, "2-first-conversation")
    summaries = [
        action["summary"]
        for frame in received
        if frame.get("name") == "assistant.pending_actions"
        for action in frame["value"]["actions"]
    ]
    assert summaries == ["Cancel in the first"]  # the others' cards never reach the page

    page.locator("#conversations a", has_text="Second").click()

    expect(page.locator(".approval .approval-summary")).to_have_text(
        ["Cancel in the second", "Cancel again in the second"]
    )
    expect(indicator).to_have_text("1 approval waiting")

    page.get_by_role("button", name="+ New").click()

    expect(page.locator(".approval")).to_have_count(0)
    expect(indicator).to_have_text("3 approvals waiting")
    indicator.get_by_role("link").click()
    page.wait_for_url("**/assistant/approvals/")
    expect(page.locator(".inbox-item .approval-summary")).to_have_count(3)


def test_the_inbox_lists_waiting_actions_and_answers_them_in_their_conversation(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-5")
    other = Order.objects.create(reference="ORD-6")
    chat = Conversation.objects.create(user=clerk, title="Month end")
    approved = ask(clerk, order, chat, summary="Cancel order ORD-5", preview=CHANGES)
    rejected = ask(
        clerk,
        other,
        chat,
        operation="approve_order",
        summary="Approve order ORD-6",
        preview={"kind": "list", "items": ["ORD-6"]},
    )
    page = open_chat(clerk)
    page.add_init_script(RECORD_VIOLATIONS)
    page.goto(f"{asgi_live_server}/assistant/approvals/")

    items = page.locator(".inbox-item")
    expect(items).to_have_count(2)
    first = items.filter(has_text="Cancel order ORD-5")
    expect(first.locator(".where a")).to_have_text("Month end")
    expect(first.locator(".where")).to_contain_text("asked 0\xa0minutes ago")
    expect(items.filter(has_text="Approve order ORD-6").locator(".preview li")).to_have_text(
        ["ORD-6"]
    )
    screenshot(page, "3-inbox")

    hold(page, first.get_by_role("button", name="Hold to approve"), 1300)
    items.filter(has_text="Approve order ORD-6").get_by_role("button", name="Reject").click()

    expect(first.locator(".approval-result")).to_have_text(f"confirmed: Cancelled order {order.pk}")
    expect(items.filter(has_text="ORD-6").locator(".approval-result")).to_contain_text("cancelled")
    screenshot(page, "3-inbox-answered")
    assert page.evaluate("window.__violations") == []  # (under the chat page's policy)
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    assert PendingAction.objects.get(pk=approved.pk).status == "confirmed"
    assert PendingAction.objects.get(pk=rejected.pk).status == "cancelled"
    # the decisions were made in the conversation that asked, where its user sees them
    replies = Message.objects.filter(conversation=chat, role="assistant")
    assert f"Cancelled order {order.pk}" in [reply.text for reply in replies]
    assert set(AuditEntry.objects.filter(conversation=chat).values_list("decision", flat=True)) == {
        "confirmed",
        "cancelled",
    }

    first.locator(".where a").click()
    expect(page.locator(".bubble.assistant .text").first).to_have_text(
        f"Cancelled order {order.pk}"
    )


def test_approve_waits_for_the_typed_phrase_and_a_reason_and_sends_both(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-7")
    chat = Conversation.objects.create(user=clerk, title="Orders")
    action = ask(
        clerk,
        order,
        chat,
        summary="Cancel order ORD-7",
        confirm_phrase="ORD-7",
        policy=PendingAction.Policy.CONFIRM_WITH_REASON,
    )
    page = open_chat(clerk)
    frames = sent_frames(page)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")
    card = page.locator(".approval")
    approve = card.get_by_role("button", name="Approve")
    phrase = card.get_by_label("Type ORD-7 to approve")
    reason = card.get_by_label("Reason (required)")

    expect(approve).to_be_disabled()
    phrase.fill("ORD-")
    reason.fill("customer asked")
    expect(approve).to_be_disabled()
    phrase.fill("ord-7")
    expect(approve).to_be_disabled()
    phrase.fill("ORD-7")
    reason.fill("   ")
    expect(approve).to_be_disabled()
    reason.fill("\u200b \u2063\u00ad")  # nothing visible: the server would refuse it
    expect(approve).to_be_disabled()
    reason.fill("customer asked")
    expect(approve).to_be_enabled()
    screenshot(page, "4-typed")

    approve.click()

    expect(card).to_have_count(0)
    confirms = [frame for frame in frames if frame["type"] == "confirm"]
    assert confirms == [
        {
            "type": "confirm",
            "action": str(action.pk),
            "phrase": "ORD-7",
            "reason": "customer asked",
        }
    ]


def test_an_expired_card_disappears_by_itself(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-8")
    chat = Conversation.objects.create(user=clerk, title="Orders")
    ask(clerk, order, chat, ttl_seconds=4, operation="approve_order", summary="Approve ORD-8")
    page = open_chat(clerk)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")
    card = page.locator(".approval")

    expect(card.locator(".expiry")).to_have_text(re.compile(r"expires in [1-4] seconds?"))
    expect(card.get_by_role("button", name="Approve")).to_be_enabled()
    screenshot(page, "5-expiring")

    expect(card).to_have_count(0, timeout=8_000)
    screenshot(page, "5-expired")


def test_cards_and_the_inbox_fit_a_phone(
    open_chat: Callable[..., Page], asgi_live_server: str, clerk: Any
) -> None:
    order = Order.objects.create(reference="ORD-9")
    chat = Conversation.objects.create(user=clerk, title="Orders")
    ask(clerk, order, chat, summary="Cancel order ORD-9", preview=CHANGES)
    ask(clerk, order, None, summary="Cancel it from nowhere")
    page = open_chat(clerk, viewport=PHONE, is_mobile=True, has_touch=True)
    go(page, f"{asgi_live_server}/assistant/?c={chat.pk}")

    card = page.locator(".approval")
    expect(card.locator(".approval-summary")).to_have_text("Cancel order ORD-9")
    expect(page.get_by_role("link", name="1 approval waiting")).to_be_visible()
    for part in (".approval-summary", ".risk", ".expiry", "button.hold"):
        expect(card.locator(part)).to_be_in_viewport(ratio=1)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "6-phone-card")

    page.get_by_role("link", name="1 approval waiting").click()

    expect(page.locator(".inbox-item")).to_have_count(2)
    expect(page.locator(".inbox-item .where").last).to_contain_text("no conversation")
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "6-phone-inbox")
