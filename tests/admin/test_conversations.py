"""The conversation and approval admins: messages with their tool calls, waiting actions."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from assistant.exceptions import ActionExpired
from assistant.models import AuditEntry, Conversation, PendingAction
from assistant.turns.runs import run_turn
from tests.admin.pages import (
    APPROVALS,
    AUDIT,
    CONVERSATIONS,
    History,
    Row,
    inline_rows,
    operations,
    result_rows,
)
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db


# -- conversations -------------------------------------------------------------------------------


@pytest.fixture
def chat(plain_user: Any) -> Conversation:
    """Two turns of a real chat: ping (executed), then explode (failed)."""
    first = run_turn(plain_user, "ping")
    run_turn(plain_user, "explode", conversation_id=first.conversation.pk)
    return first.conversation


def test_a_conversation_shows_its_messages_in_order_with_their_tool_calls(
    admin_client: Client, chat: Conversation
) -> None:
    response = admin_client.get(f"{CONVERSATIONS}{chat.pk}/change/")

    assert response.status_code == 200
    shown = [
        (row["role"], row["status"], row["text"], row["tool_calls_summary"])
        for row in inline_rows(response, "messages")
    ]
    assert shown == [
        ("User", "Complete", "ping", "-"),
        ("Assistant", "Complete", "pong for plain", "ping executed"),
        ("User", "Complete", "explode", "-"),
        (
            "Assistant",
            "Complete",
            "explode failed unexpectedly; the error has been logged.",
            "explode failed",
        ),
    ]
    assert 'name="messages-0-text"' not in response.content.decode()


def test_a_conversation_links_to_its_audit_entries(
    admin_client: Client, chat: Conversation, history: History
) -> None:
    page = admin_client.get(f"{CONVERSATIONS}{chat.pk}/change/").content.decode()
    link = f"{AUDIT}?q={chat.pk}"

    assert f'href="{link}"' in page
    assert operations(admin_client.get(link)) == ["explode", "ping"]
    assert {entry.conversation_id for entry in AuditEntry.objects.filter(operation="ping")} == {
        chat.pk,
        history.conversation.pk,
    }


def test_the_conversation_list_shows_user_title_and_message_count(
    admin_client: Client, chat: Conversation
) -> None:
    rows = result_rows(admin_client.get(CONVERSATIONS))

    assert [(row.text("title"), row.text("user"), row.text("message_count")) for row in rows] == [
        (chat.title, "plain", "4")
    ]
    assert rows[0].link == f"{CONVERSATIONS}{chat.pk}/change/"


# -- approvals ------------------------------------------------------------------------------------


@pytest.fixture
def approvals(clerk: Any) -> dict[str, PendingAction]:
    order = Order.objects.create(reference="ORD-7")

    def opened(ttl: float) -> PendingAction:
        return PendingAction.open(
            user=clerk,
            operation="approve_order",
            entities={"order_id": order.pk},
            ttl_seconds=ttl,
        )

    waiting = opened(600)
    lapsed = opened(-1)  # still pending, past its expiry
    marked = opened(-1)
    with pytest.raises(ActionExpired):
        PendingAction.decide(marked.pk, clerk, "confirmed")
    confirmed = PendingAction.decide(opened(600).pk, clerk, "confirmed")
    cancelled = PendingAction.decide(opened(600).pk, clerk, "cancelled")
    return {
        "waiting": waiting,
        "lapsed": lapsed,
        "marked": marked,
        "confirmed": confirmed,
        "cancelled": cancelled,
    }


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("waiting", {"waiting"}),
        ("expired", {"lapsed", "marked"}),
        ("decided", {"confirmed", "cancelled"}),
        ("", {"waiting", "lapsed", "marked", "confirmed", "cancelled"}),
    ],
)
def test_the_approvals_view_separates_waiting_expired_and_decided(
    admin_client: Client, approvals: dict[str, PendingAction], state: str, expected: set[str]
) -> None:
    response = admin_client.get(APPROVALS, {"state": state} if state else {})

    names = {f"{APPROVALS}{action.pk}/change/": name for name, action in approvals.items()}
    assert response.status_code == 200
    assert {names[row.link] for row in result_rows(response)} == expected


def test_the_approvals_view_shows_who_decided_and_a_coloured_status(
    admin_client: Client, approvals: dict[str, PendingAction]
) -> None:
    rows = {row.link: row for row in result_rows(admin_client.get(APPROVALS))}

    def row(name: str) -> Row:
        return rows[f"{APPROVALS}{approvals[name].pk}/change/"]

    assert row("confirmed").text("decided_by") == "clerk"
    assert row("confirmed").text("decided_at") != "-"
    assert row("confirmed").text("coloured_status") == "confirmed"
    assert row("cancelled").text("coloured_status") == "cancelled"
    assert row("waiting").text("coloured_status") == "pending"
    assert row("waiting").text("decided_by") == "-"
    assert row("lapsed").text("coloured_status") == "expired"
    assert row("marked").text("coloured_status") == "expired"
