"""The chat page and the admin pass axe-core (no serious or critical violation), light and dark,
and the chat is usable from the keyboard and on a phone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
from playwright.sync_api import Page, expect

from assistant.models import AuditEntry, Conversation, Message, PendingAction
from tests.axe import assert_accessible
from tests.browsing import PHONE, screenshots, send
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

Scheme = Literal["light", "dark"]
SCHEMES: list[Scheme] = ["light", "dark"]


screenshot = screenshots("a11y-")


def chat(open_chat: Callable[..., Page], user: Any, scheme: Scheme, **options: Any) -> Page:
    # axe is injected as a script tag: the chat page's CSP would refuse it
    return open_chat(user, bypass_csp=True, color_scheme=scheme, **options)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_empty_chat_page_passes_axe(
    open_chat: Callable[..., Page], plain_user: Any, scheme: Scheme
) -> None:
    page = chat(open_chat, plain_user, scheme)

    expect(page.get_by_text("Ask me something")).to_be_visible()
    screenshot(page, f"empty-{scheme}")
    assert_accessible(page)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_conversation_with_tool_cards_and_an_approval_passes_axe(
    open_chat: Callable[..., Page], clerk: Any, scheme: Scheme
) -> None:
    order = Order.objects.create(reference="ORD-7")
    page = chat(open_chat, clerk, scheme)
    send(page, "ping")
    expect(page.locator(".bubble.assistant .text")).to_have_text("pong for clerk")

    send(page, f"cancel order order_id={order.pk}")

    expect(page.locator(".approval")).to_be_visible()
    expect(page.locator("details.tool .badge")).to_have_text(["executed", "confirmation requested"])
    page.locator("details.tool").first.locator("summary").click()  # an open card too
    screenshot(page, f"conversation-{scheme}")
    assert_accessible(page)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_approvals_inbox_with_waiting_cards_passes_axe(
    open_chat: Callable[..., Page],
    asgi_live_server: str,
    clerk: Any,
    make_user: Any,
    scheme: Scheme,
) -> None:
    order = Order.objects.create(reference="ORD-7")
    asked = {"entities": {"order_id": order.pk}, "ttl_seconds": 600}
    PendingAction.open(
        user=clerk,
        conversation=Conversation.objects.create(user=clerk, title="Month end"),
        operation="cancel_order",
        summary="Cancel order ORD-7",
        preview={"kind": "changes", "rows": [{"field": "status", "before": "open", "after": "x"}]},
        **asked,
    )
    PendingAction.open(
        user=clerk,
        operation="cancel_order",
        summary="Cancel ORD-7 with a reason",
        policy=PendingAction.Policy.CONFIRM_WITH_REASON,
        confirm_phrase="ORD-7",
        preview={"kind": "rows", "columns": ["order", "status"], "rows": [["ORD-7", "open"]]},
        **asked,
    )
    PendingAction.open(
        user=make_user("other", "testapp.approve_order"),
        operation="approve_order",
        summary="Approve ORD-7 (someone else asked)",
        policy=PendingAction.Policy.TWO_PERSON,
        approver_permission="testapp.approve_order",
        preview={"kind": "list", "items": ["ORD-7"]},
        **asked,
    )
    PendingAction.open(
        user=clerk,
        operation="approve_order",
        summary="Approve ORD-7 (waiting for someone else)",
        policy=PendingAction.Policy.TWO_PERSON,
        approver_permission="testapp.approve_order",
        preview={"kind": "text", "text": "One approval more"},
        **asked,
    )
    page = chat(open_chat, clerk, scheme)
    page.goto(f"{asgi_live_server}/assistant/approvals/")

    expect(page.locator(".inbox-item .approval")).to_have_count(4)
    expect(page.get_by_text("Waiting for a second person to approve.")).to_be_visible()
    expect(page.get_by_role("link", name="Month end")).to_be_visible()
    screenshot(page, f"inbox-{scheme}")
    assert_accessible(page)


def test_esc_stops_a_running_turn(open_chat: Callable[..., Page], plain_user: Any) -> None:
    page = open_chat(plain_user)
    send(page, "slow seconds=30")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.locator("details.tool .badge")).to_have_text("running")

    page.keyboard.press("Escape")

    expect(page.get_by_role("button", name="Send")).to_be_visible(timeout=2_000)
    expect(page.locator("#messages .bubble.assistant .state")).to_have_text("stopped")
    expect(page.locator("details.tool .badge")).to_have_text("cancelled")
    assert Message.objects.get(role="assistant").status == "cancelled"
    assert AuditEntry.objects.get(operation="slow").decision == "cancelled"


def test_esc_closes_the_open_sidebar_without_stopping_the_turn(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user, viewport=PHONE, is_mobile=True, has_touch=True)
    send(page, "slow seconds=3")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    page.get_by_role("button", name="Conversations").click()
    conversations = page.get_by_role("navigation", name="Conversations")
    expect(conversations).to_be_in_viewport(ratio=1)

    page.keyboard.press("Escape")

    expect(conversations).not_to_be_in_viewport()
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.locator(".bubble.assistant .text")).to_have_text("slept 3s")
    assert Message.objects.get(role="assistant").status == "complete"


def test_a_keyboard_shortcut_starts_a_new_conversation(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    send(page, "ping")
    expect(page.locator(".bubble.assistant .text")).to_have_text("pong for plain")
    page.wait_for_url("**/assistant/?c=*")
    new = page.get_by_role("button", name="+ New")
    expect(new).to_have_attribute("aria-keyshortcuts", "Control+Shift+O Meta+Shift+O")
    expect(new).to_have_attribute("title", "New conversation (Ctrl+Shift+O)")

    page.keyboard.press("Control+Shift+O")

    expect(page.locator("#title")).to_have_text("New conversation")
    expect(page.locator(".bubble")).to_have_count(0)
    expect(page.get_by_text("Ask me something")).to_be_visible()
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    assert "?c=" not in page.url


def test_the_connection_status_is_announced_and_visible_on_a_phone(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user, viewport=PHONE, is_mobile=True, has_touch=True)

    # the connection's status (the approvals count is a status too)
    status = page.get_by_role("status").filter(has_text="connect")
    expect(status).to_have_text("connected")
    expect(status).to_be_in_viewport(ratio=1)
    expect(page.get_by_role("navigation", name="Conversations")).not_to_be_in_viewport()
    screenshot(page, "phone-status")


def test_the_chat_follows_a_dark_colour_scheme(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user, color_scheme="dark")
    send(page, "ping")
    expect(page.locator(".bubble.assistant .text")).to_have_text("pong for plain")

    expect(page.locator("body")).to_have_css("background-color", "rgb(18, 24, 32)")
    expect(page.locator(".bubble.assistant")).to_have_css("background-color", "rgb(28, 37, 48)")
    expect(page.locator(".bubble.assistant")).to_have_css("color", "rgb(228, 231, 235)")
    screenshot(page, "dark")

    page.emulate_media(color_scheme="light")

    expect(page.locator("body")).to_have_css("background-color", "rgb(245, 247, 250)")
    expect(page.locator(".bubble.assistant")).to_have_css("background-color", "rgb(255, 255, 255)")


RECORD_LIVE_REGIONS = """
window.__live = [];
window.__read = [];
new MutationObserver((changes) => changes.forEach((change) => {
  if (change.target.getAttribute("aria-live")) window.__live.push(change.target.id);
})).observe(document.body, {attributes: true, attributeFilter: ["aria-live"], subtree: true});
// what a screen reader hears: text that changed inside a region that is live once it changed
new MutationObserver((changes) => changes.forEach((change) => {
  const node = change.target.nodeType === 1 ? change.target : change.target.parentElement;
  const region = node && node.closest("#messages [aria-live]");
  if (region) window.__read.push(region.querySelector(".text").textContent);
})).observe(document.body, {childList: true, characterData: true, subtree: true});
"""


def test_only_the_reply_being_streamed_is_a_live_region(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    page.evaluate(RECORD_LIVE_REGIONS)

    send(page, "ping")

    expect(page.locator(".bubble.assistant .text")).to_have_text("pong for plain")
    reply = Message.objects.get(role="assistant")
    assert page.evaluate("window.__live") == [f"m-{reply.pk}"]
    # the reply came in one burst: its text was painted while its bubble was still live
    assert "pong for plain" in [text.strip() for text in page.evaluate("window.__read")]
    expect(
        page.locator("#messages [aria-live], #approvals[aria-live], #messages[aria-live]")
    ).to_have_count(0)
    expect(page.locator("[aria-live]")).to_have_count(
        1
    )  # the notice (hidden until it says something)
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
