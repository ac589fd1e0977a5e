"""What an approval card is told (PendingAction.shown), who sees which, and the approvals inbox."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from assistant.models import Conversation, PendingAction
from tests.approving import CHANGES
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db

INBOX = reverse("assistant:approvals")


@pytest.fixture
def order() -> Order:
    return Order.objects.create(reference="ORD-7")


@pytest.fixture
def ask(order: Order) -> Callable[..., PendingAction]:
    """A waiting action of ``user``'s (cancel_order, dangerous, unless told otherwise)."""

    def ask_(user: Any, operation: str = "cancel_order", **fields: Any) -> PendingAction:
        fields.setdefault("ttl_seconds", 600)
        return PendingAction.open(
            user=user, operation=operation, entities={"order_id": order.pk}, **fields
        )

    return ask_


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# -- shown(): the one shape every surface gets -------------------------------------------------


def test_a_card_is_told_the_summary_preview_risk_requester_policy_and_times(clerk, ask, order):
    chat = Conversation.objects.create(user=clerk, title="orders")
    action = ask(
        clerk,
        conversation=chat,
        summary="Cancel order ORD-7",
        preview=CHANGES,
        policy=PendingAction.Policy.CONFIRM_WITH_REASON,
        confirm_phrase="ORD-7",
    )

    assert PendingAction.objects.get(pk=action.pk).shown() == {
        "id": str(action.pk),
        "operation": "cancel_order",
        "summary": "Cancel order ORD-7",
        "entities": {"order_id": order.pk},
        "preview": CHANGES,
        "risk": "dangerous",
        "policy": "confirm_with_reason",
        "confirm": "type",
        "confirm_phrase": "ORD-7",
        "requested_by": "clerk",
        "conversation": str(chat.pk),
        "created_at": action.created_at.isoformat(),
        "expires_at": action.expires_at.isoformat(),
    }


@pytest.mark.parametrize(
    ("operation", "phrase", "mode"),
    [
        pytest.param("cancel_order", "", "hold", id="dangerous without a phrase: hold"),
        pytest.param("cancel_order", "ORD-7", "type", id="a phrase: type it"),
        pytest.param("approve_order", "", "click", id="guarded: click"),
        pytest.param("gone_tool", "", "click", id="a tool no longer registered"),
    ],
)
def test_how_an_approver_says_yes_follows_the_phrase_and_the_risk(
    clerk, ask, operation, phrase, mode
):
    shown = ask(clerk, operation, confirm_phrase=phrase).shown()

    assert (shown["confirm"], shown["confirm_phrase"]) == (mode, phrase)
    assert shown["risk"] == {"cancel_order": "dangerous", "approve_order": "guarded"}.get(
        operation, ""
    )


def test_the_rest_api_lists_the_same_card_facts(clerk, ask):
    action = ask(clerk, summary="Cancel order ORD-7", preview=CHANGES, confirm_phrase="ORD-7")

    response = signed_in(clerk).get(reverse("assistant:actions"), {"status": "pending"})

    assert response.status_code == 200
    (listed,) = response.json()["results"]
    shown = action.shown()
    cards = ("summary", "entities", "preview", "risk", "policy", "confirm", "confirm_phrase")
    assert {name: listed[name] for name in (*cards, "requested_by")} == {
        name: shown[name] for name in (*cards, "requested_by")
    }


# -- whose approvals a user sees ---------------------------------------------------------------


def test_a_users_answerable_actions_are_their_own_and_two_person_ones_they_may_approve(
    clerk, reader, make_user, ask
):
    own = ask(clerk)
    ask(clerk, ttl_seconds=-1)  # expired
    decided = ask(clerk)
    PendingAction.decide(decided.pk, clerk, PendingAction.Status.CANCELLED)
    theirs = ask(reader)
    second = ask(
        reader,
        policy=PendingAction.Policy.TWO_PERSON,
        approver_permission="testapp.approve_order",
    )
    beyond = ask(
        reader,
        policy=PendingAction.Policy.TWO_PERSON,
        approver_permission="testapp.delete_order",
    )

    assert set(PendingAction.objects.answerable_by(clerk)) == {own, second}
    assert set(PendingAction.objects.answerable_by(reader)) == {theirs, second, beyond}
    assert theirs not in PendingAction.objects.answerable_by(make_user("nobody"))
    assert not PendingAction.objects.answerable_by(make_user("gone", is_active=False)).exists()


# -- the inbox ---------------------------------------------------------------------------------


def test_the_inbox_needs_a_signed_in_user():
    response = Client().get(INBOX)

    assert response.status_code == 302
    assert response.headers["Location"] == f"{settings.LOGIN_URL}?next={INBOX}"


def cards_on(response: Any) -> list[dict[str, Any]]:
    data = response.content.decode().split('<script id="approvals-data" type="application/json">')
    return json.loads(data[1].split("</script>", 1)[0])


def test_the_inbox_lists_only_the_users_waiting_actions_with_their_conversation(clerk, reader, ask):
    chat = Conversation.objects.create(user=clerk, title="Month-end orders")
    mine = ask(clerk, conversation=chat, summary="Cancel order ORD-7")
    ask(reader, summary="Their cancellation")
    ask(clerk, ttl_seconds=-1, summary="Too late")

    response = signed_in(clerk).get(INBOX)

    assert response.status_code == 200
    assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert [card["id"] for card in cards_on(response)] == [str(mine.pk)]
    assert cards_on(response)[0] == PendingAction.objects.get(pk=mine.pk).shown()
    page = response.content.decode()
    assert f'href="{reverse("assistant:chat")}?c={chat.pk}">Month-end orders</a>' in page
    assert "Their cancellation" not in page
    assert "Too late" not in page
    assert "not waiting for you" not in page


def test_the_inbox_says_when_nothing_waits(clerk):
    response = signed_in(clerk).get(INBOX)

    assert response.status_code == 200
    assert cards_on(response) == []
    assert "Nothing is waiting for your approval." in response.content.decode()


@pytest.mark.parametrize(
    "wanted",
    ["not-an-id", "00000000-0000-0000-0000-000000000000", "THEIRS", "%00", "1" * 500],
)
def test_an_action_asked_for_that_is_not_waiting_for_the_user_is_a_notice_not_an_error(
    clerk, reader, ask, wanted
):
    mine = ask(clerk)
    theirs = ask(reader)
    wanted = str(theirs.pk) if wanted == "THEIRS" else wanted

    response = signed_in(clerk).get(INBOX, {"action": wanted})

    assert response.status_code == 200
    assert "That approval is not waiting for you" in response.content.decode()
    assert [card["id"] for card in cards_on(response)] == [str(mine.pk)]


def test_an_action_asked_for_is_picked_out(clerk, ask):
    mine = ask(clerk)

    response = signed_in(clerk).get(INBOX, {"action": str(mine.pk)})

    page = response.content.decode()
    assert f'class="inbox-item focused" id="action-{mine.pk}"' in page
    assert "not waiting for you" not in page


def test_the_admin_links_a_waiting_action_by_its_summary_to_the_inbox(admin_client, clerk, ask):
    chat = Conversation.objects.create(user=clerk, title="orders")
    waiting = ask(clerk, conversation=chat, summary="Cancel order ORD-7")
    done = ask(clerk, summary="Cancel it again")
    PendingAction.decide(done.pk, clerk, PendingAction.Status.CANCELLED)

    page = admin_client.get(reverse("admin:assistant_pendingaction_changelist")).content.decode()

    assert f'<a href="{INBOX}?action={waiting.pk}">Cancel order ORD-7</a>' in page
    assert "Cancel it again" in page
    assert f"{INBOX}?action={done.pk}" not in page
    conversation = reverse("admin:assistant_conversation_change", args=[chat.pk])
    assert f'<a href="{conversation}">orders</a>' in page
