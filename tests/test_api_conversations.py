"""The REST API for end users: their conversations, listed, read and deleted."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from assistant.models import AuditEntry, Conversation, Message
from tests.clients import API, client_for


def start_conversation(client: APIClient, *messages: str) -> str:
    conversation = None
    for text in messages:
        body = client.post(
            f"{API}/messages/", {"message": text, "conversation": conversation}, format="json"
        ).json()
        conversation = body["conversation"]
    assert conversation is not None
    return conversation


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
