"""A two-person approval in Debian's chromium: the requester asks in one browser, a second person
with the approver permission answers from their inbox in another, and the action runs once."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from assistant.models import AuditEntry, PendingAction
from tests.browsing import approve, screenshots, send, signed_in_context
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


screenshot = screenshots("two-person-")


def chat_page(browser: Browser, server: str, user: Any) -> Page:
    page = signed_in_context(browser, server, user).new_page()
    page.goto(f"{server}/assistant/")
    expect(page.locator("#status")).to_have_text("connected")
    return page


@pytest.fixture
def two_person(settings: Any) -> None:
    """approve_order waits for a second person holding testapp.approve_order (the live server
    runs in this process, so it reads the changed settings too)."""
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "APPROVAL_POLICIES": {
            "approve_order": {"policy": "two_person", "permission": "testapp.approve_order"}
        },
    }


def test_a_second_person_approves_from_their_inbox_in_another_browser(
    two_person: None, browser: Browser, asgi_live_server: str, clerk: Any, make_user: Any
) -> None:
    lead = make_user("lead", "testapp.approve_order")
    order = Order.objects.create(reference="ORD-1")
    requester = chat_page(browser, asgi_live_server, clerk)
    approver = chat_page(browser, asgi_live_server, lead)
    try:
        send(requester, f"approve order order_id={order.pk}")

        asked = requester.locator(".approval")
        expect(asked.locator(".approval-summary")).to_be_visible()
        expect(asked.locator(".approval-note")).to_have_text(
            "Waiting for a second person to approve."
        )
        expect(asked.get_by_role("button", name="Approve")).to_be_hidden()
        expect(asked.get_by_role("button", name="Reject")).to_be_visible()  # may still withdraw
        screenshot(requester, "1-requester-waits")
        action = PendingAction.objects.get()
        assert (action.policy, action.status) == ("two_person", "pending")

        approver.reload()  # the count is told on connect
        indicator = approver.get_by_role("status").filter(has_text="waiting")
        expect(indicator).to_have_text("1 approval waiting")
        screenshot(approver, "2-approver-told")
        indicator.get_by_role("link").click()
        approver.wait_for_url("**/assistant/approvals/")
        card = approver.locator(".inbox-item .approval")
        expect(card).to_have_count(1)
        expect(card.locator(".requester")).to_have_text("requested by clerk")
        expect(approver.locator(".inbox-item .where")).to_contain_text("clerk's conversation")
        screenshot(approver, "3-approver-inbox")

        approve(approver, card)

        expect(card.locator(".approval-result")).to_have_text("confirmed: Approved ORD-1")
        screenshot(approver, "4-approved")
        assert Order.objects.get(pk=order.pk).approvals == 1
        decided = PendingAction.objects.select_related("decided_by").get()
        assert (decided.status, decided.decided_by) == ("confirmed", lead)
        assert list(
            AuditEntry.objects.filter(operation="approve_order")
            .order_by("pk")
            .values_list("decision", "username", "reason")
        ) == [
            ("confirmation_requested", "clerk", ""),
            ("confirmed", "clerk", "approved by lead"),
        ]

        requester.reload()  # (the open page keeps its card until then: nothing tells it)
        expect(requester.locator("#status")).to_have_text("connected")
        expect(requester.locator(".bubble.user .text")).to_have_text(
            f"approve order order_id={order.pk}"
        )  # the conversation that asked, without its card
        expect(requester.locator(".approval")).to_have_count(0)
        screenshot(requester, "5-requester-after")
    finally:
        for page in (requester, approver):
            page.context.close()
