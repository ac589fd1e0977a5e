"""The REST API for end users: their conversations, listed, read and deleted."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from assistant.models import AuditEntry, Conversation, Message
from tests.clients import API, client_for, start_conversation


@pytest.mark.django_db
def test_conversation_list_shows_only_your_own_most_recent_first(
    plain_user: Any, reader: Any
) -> None:
    mine = client_for(plain_user)
    first = start_conversation(mine, "ping")
    second = start_conversation(mine, "ping", "async ping")
    start_conversation(client_for(reader), "ping")

    response = mine.get(f"{API}/conversations/")

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(row["id"], row["message_count"]) for row in rows] == [(second, 4), (first, 2)]


@pytest.mark.django_db
def test_conversation_detail_has_its_messages_in_order(plain_user: Any) -> None:
    client = client_for(plain_user)
    conversation = start_conversation(client, "ping", "async ping")

    response = client.get(f"{API}/conversations/{conversation}/")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == conversation
    assert [(m["role"], m["text"]) for m in body["messages"]] == [
        ("user", "ping"),
        ("assistant", "pong for plain"),
        ("user", "async ping"),
        ("assistant", "pong"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "delete"])
def test_someone_elses_conversation_is_404(plain_user: Any, reader: Any, method: str) -> None:
    theirs = start_conversation(client_for(reader), "ping")

    response = getattr(client_for(plain_user), method)(f"{API}/conversations/{theirs}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert Conversation.objects.filter(pk=theirs).exists()


@pytest.mark.django_db
def test_a_conversation_that_does_not_exist_is_404(plain_user: Any) -> None:
    response = client_for(plain_user).get(f"{API}/conversations/{uuid.uuid4()}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_deleting_a_conversation_keeps_its_audit_trail(plain_user: Any) -> None:
    client = client_for(plain_user)
    conversation = start_conversation(client, "ping")

    response = client.delete(f"{API}/conversations/{conversation}/")

    assert response.status_code == 204
    assert not Conversation.objects.filter(pk=conversation).exists()
    assert Message.objects.count() == 0
    entry = AuditEntry.objects.get()
    assert (entry.operation, entry.conversation_id) == ("ping", None)


@pytest.mark.django_db
def test_deleting_all_conversations_deletes_only_your_own(plain_user: Any, reader: Any) -> None:
    mine = client_for(plain_user)
    start_conversation(mine, "ping")
    start_conversation(mine, "ping")
    theirs = start_conversation(client_for(reader), "ping")

    response = mine.delete(f"{API}/conversations/")

    assert response.status_code == 200
    assert response.json() == {"deleted": 2}
    assert list(Conversation.objects.values_list("id", flat=True)) == [uuid.UUID(theirs)]
    assert AuditEntry.objects.count() == 3


# -- renaming ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_renaming_a_conversation_keeps_its_place_in_the_list(plain_user: Any) -> None:
    client = client_for(plain_user)
    older = start_conversation(client, "ping")
    newer = start_conversation(client, "async ping")

    response = client.patch(
        f"{API}/conversations/{older}/", {"title": "  Weekly   checks "}, format="json"
    )

    assert response.status_code == 200
    assert (response.json()["id"], response.json()["title"]) == (older, "Weekly checks")
    assert response.json()["message_count"] == 2
    rows = client.get(f"{API}/conversations/").json()["results"]
    assert [(row["id"], row["title"]) for row in rows] == [
        (newer, "async ping"),
        (older, "Weekly checks"),
    ]


@pytest.mark.django_db
def test_a_renamed_conversation_keeps_its_title_on_the_next_message(plain_user: Any) -> None:
    client = client_for(plain_user)
    conversation = start_conversation(client, "ping")
    client.patch(f"{API}/conversations/{conversation}/", {"title": "Mine"}, format="json")

    reply = client.post(
        f"{API}/messages/", {"message": "async ping", "conversation": conversation}, format="json"
    )

    assert reply.status_code == 201
    assert Conversation.objects.get(pk=conversation).title == "Mine"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "invalid"),
        ({"title": ""}, "invalid"),
        ({"title": "   "}, "invalid"),
        ({"title": ["a list"]}, "invalid"),
        ({"title": "x" * 201}, "invalid_title"),
        ('{"title": "an unpaired \\ud800"}', "invalid"),
        ('{"title": "a NUL \\u0000"}', "invalid"),
    ],
)
def test_a_bad_title_is_refused_with_a_code_and_changes_nothing(
    plain_user: Any, body: dict[str, Any] | str, code: str
) -> None:
    client = client_for(plain_user)
    conversation = start_conversation(client, "ping")
    raw = body if isinstance(body, str) else json.dumps(body)

    response = client.patch(
        f"{API}/conversations/{conversation}/", raw, content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == code
    assert Conversation.objects.get(pk=conversation).title == "ping"


@pytest.mark.django_db
def test_a_title_of_exactly_200_characters_is_kept(plain_user: Any) -> None:
    client = client_for(plain_user)
    conversation = start_conversation(client, "ping")

    response = client.patch(
        f"{API}/conversations/{conversation}/", {"title": "x" * 200}, format="json"
    )

    assert response.status_code == 200
    assert Conversation.objects.get(pk=conversation).title == "x" * 200


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["patch", "delete"])
def test_changing_someone_elses_conversation_is_the_404_of_a_missing_one(
    plain_user: Any, reader: Any, method: str
) -> None:
    theirs = start_conversation(client_for(reader), "ping")
    mine = client_for(plain_user)

    refused = getattr(mine, method)(
        f"{API}/conversations/{theirs}/", {"title": "taken"}, format="json"
    )
    missing = getattr(mine, method)(
        f"{API}/conversations/{uuid.uuid4()}/", {"title": "taken"}, format="json"
    )

    assert refused.status_code == missing.status_code == 404
    assert refused.json() == missing.json()
    assert Conversation.objects.get(pk=theirs).title == "ping"


# -- searching --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_search_finds_your_conversations_by_title_or_message_text(
    plain_user: Any, reader: Any
) -> None:
    client = client_for(plain_user)
    by_reply = start_conversation(client, "ping")  # the reply says "pong for plain"
    by_title = start_conversation(client, "async ping")
    client.patch(f"{API}/conversations/{by_title}/", {"title": "Nightly Checks"}, format="json")
    start_conversation(client, "what can you do?")
    start_conversation(client_for(reader), "ping")  # says "pong for reader": not mine

    def found(search: str) -> list[str]:
        response = client.get(f"{API}/conversations/", {"search": search})
        assert response.status_code == 200
        return [row["id"] for row in response.json()["results"]]

    assert found("PONG FOR PLAIN") == [by_reply]
    assert found("nightly") == [by_title]
    assert found("checks async") == [by_title]  # every word, in the title or a message
    assert found("nightly plain") == []
    assert found("nothing like it") == []
    assert len(found("  ")) == 3


@pytest.mark.django_db
def test_a_search_too_long_is_refused(plain_user: Any) -> None:
    response = client_for(plain_user).get(f"{API}/conversations/", {"search": "x" * 201})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "search" in response.json()["errors"]


# -- deleting, and what it leaves ---------------------------------------------------------


@pytest.mark.django_db
def test_deleting_a_conversation_cancels_its_waiting_actions(clerk: Any) -> None:
    from assistant.models import PendingAction
    from tests.testapp.models import Order

    order = Order.objects.create(reference="ORD-7")
    client = client_for(clerk)
    conversation = start_conversation(client, f"cancel order order_id={order.pk}")
    other = start_conversation(client, f"cancel order order_id={order.pk}")
    action = PendingAction.objects.get(conversation_id=conversation)

    response = client.delete(f"{API}/conversations/{conversation}/")

    assert response.status_code == 204
    action.refresh_from_db()
    assert (action.status, action.conversation_id) == ("cancelled", None)
    assert PendingAction.objects.get(conversation_id=other).status == "pending"
    decisions = AuditEntry.objects.filter(pending_action=action).order_by("id")
    assert list(decisions.values_list("decision", "conversation_id")) == [
        ("confirmation_requested", None),
        ("cancelled", None),
    ]
    confirm = client.post(f"{API}/actions/{action.pk}/confirm/")
    assert confirm.status_code == 409
    assert Order.objects.get(pk=order.pk).status == "open"


@pytest.mark.django_db(transaction=True)  # the foreign key is checked when a transaction ends
def test_an_audit_entry_written_after_its_conversation_went_is_kept_unlinked(
    plain_user: Any,
) -> None:
    from assistant.dispatch.door import dispatch

    conversation = Conversation.objects.create(user=plain_user, title="gone")
    Conversation.objects.filter(pk=conversation.pk).delete()  # another tab deleted it meanwhile

    outcome = dispatch("ping", {}, user=plain_user, conversation=conversation, source="rest")

    assert outcome.decision == "executed"
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert (entry.operation, entry.decision, entry.conversation_id) == ("ping", "executed", None)
