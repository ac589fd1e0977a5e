"""The staff REST API: every user's conversations and the audit trail, for audit viewers only."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, Conversation, Message
from tests.clients import API, client_for

STAFF_GETS = [
    "/admin/conversations/",
    f"/admin/conversations/{uuid.UUID(int=1)}/history/",
    "/admin/audit/",
]
STAFF_DELETE = f"/admin/conversations/{uuid.UUID(int=1)}/"
STAFF_ENDPOINTS = [*(("get", path) for path in STAFF_GETS), ("delete", STAFF_DELETE)]


@pytest.fixture
def auditor(make_user: Callable[..., Any]) -> Any:
    """Staff holding the audit permission: the intended reader of these endpoints."""
    return make_user("auditor", "assistant.view_auditentry", is_staff=True)


@pytest.fixture
def auditors(auditor: Any) -> APIClient:
    return client_for(auditor)


@pytest.fixture
def erasers(make_user: Callable[..., Any]) -> APIClient:
    """Staff who may delete any conversation (``assistant.delete_conversation``)."""
    return client_for(make_user("eraser", "assistant.delete_conversation", is_staff=True))


def conversation_of(user: Any, *texts: str) -> Conversation:
    conversation = Conversation.objects.create(user=user, title=texts[0] if texts else "")
    for index, text in enumerate(texts):
        role = Message.Role.USER if index % 2 == 0 else Message.Role.ASSISTANT
        Message.objects.create(conversation=conversation, role=role, text=text)
    return conversation


# --- who may use the staff endpoints -------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), STAFF_ENDPOINTS)
@pytest.mark.parametrize(
    ("username", "perms", "flags"),
    [
        ("user", (), {}),
        ("user_with_permission", ("assistant.view_auditentry",), {}),
        ("staff_without_permission", (), {"is_staff": True}),
    ],
)
def test_staff_endpoints_refuse_anyone_but_audit_viewers(
    make_user: Callable[..., Any],
    method: str,
    path: str,
    username: str,
    perms: tuple[str, ...],
    flags: dict[str, Any],
) -> None:
    conversation_of(make_user("someone"), "hello")
    user = make_user(username, *perms, **flags)

    response = getattr(client_for(user), method)(f"{API}{path}")

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), STAFF_ENDPOINTS)
def test_staff_endpoints_answer_anonymous_users_with_401(method: str, path: str) -> None:
    response = getattr(APIClient(), method)(f"{API}{path}")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/admin/conversations/", "/admin/audit/"])
@pytest.mark.parametrize("who", ["superuser", "auditor"])
def test_staff_endpoints_serve_superusers_and_staff_with_the_permission(
    request: pytest.FixtureRequest, who: str, path: str
) -> None:
    response = client_for(request.getfixturevalue(who)).get(f"{API}{path}")

    assert response.status_code == 200


@pytest.mark.django_db
def test_a_refused_staff_request_deletes_nothing(make_user: Callable[..., Any]) -> None:
    conversation = conversation_of(make_user("someone"), "hello")
    staff = make_user("staff", is_staff=True)

    response = client_for(staff).delete(f"{API}/admin/conversations/{conversation.pk}/")

    assert response.status_code == 403
    assert Conversation.objects.filter(pk=conversation.pk).exists()


# --- every user's conversations ------------------------------------------------------------


@pytest.mark.django_db
def test_staff_see_every_users_conversations(
    auditors: APIClient, plain_user: Any, reader: Any
) -> None:
    mine = conversation_of(plain_user, "ping", "pong")
    theirs = conversation_of(reader, "orders")

    response = auditors.get(f"{API}/admin/conversations/")

    assert response.status_code == 200
    rows = {row["id"]: row for row in response.json()["results"]}
    assert set(rows) == {str(mine.pk), str(theirs.pk)}
    assert (rows[str(mine.pk)]["username"], rows[str(mine.pk)]["message_count"]) == ("plain", 2)
    assert (rows[str(theirs.pk)]["user"], rows[str(theirs.pk)]["message_count"]) == (reader.pk, 1)


@pytest.mark.django_db
@pytest.mark.parametrize("by", ["id", "username"])
def test_staff_conversations_filter_by_user(
    auditors: APIClient, plain_user: Any, reader: Any, by: str
) -> None:
    conversation_of(plain_user, "ping")
    wanted = [conversation_of(reader, "orders"), conversation_of(reader, "report")]
    value = str(reader.pk) if by == "id" else reader.username

    response = auditors.get(f"{API}/admin/conversations/", {"user": value})

    assert response.status_code == 200
    assert sorted(row["id"] for row in response.json()["results"]) == sorted(
        str(c.pk) for c in wanted
    )


@pytest.mark.django_db
def test_staff_conversations_are_most_recent_first(
    auditors: APIClient, plain_user: Any, reader: Any
) -> None:
    touched_last = conversation_of(plain_user, "ping")
    created_last = conversation_of(reader, "orders")
    touched_last.touch()

    response = auditors.get(f"{API}/admin/conversations/")

    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [
        str(touched_last.pk),
        str(created_last.pk),
    ]


@pytest.mark.django_db
def test_staff_with_the_delete_permission_delete_any_conversation_and_its_messages(
    erasers: APIClient, plain_user: Any
) -> None:
    conversation = conversation_of(plain_user, "ping", "pong")
    dispatch("ping", user=plain_user, conversation=conversation)

    response = erasers.delete(f"{API}/admin/conversations/{conversation.pk}/")

    assert response.status_code == 204
    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert Message.objects.count() == 0
    ping, deletion = AuditEntry.objects.order_by("id")
    assert (ping.operation, ping.conversation_id) == ("ping", None)
    assert (deletion.operation, deletion.user_id, deletion.entities) == (
        "delete_conversation",
        type(plain_user).objects.get(username="eraser").pk,
        {"conversation": str(conversation.pk), "user": plain_user.pk},
    )


@pytest.mark.django_db
def test_reading_the_audit_is_not_leave_to_delete_another_users_conversation(
    auditors: APIClient, plain_user: Any
) -> None:
    conversation = conversation_of(plain_user, "ping", "pong")

    response = auditors.delete(f"{API}/admin/conversations/{conversation.pk}/")

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert Message.objects.filter(conversation=conversation).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("holder", ["the delete permission without staff", "staff without it"])
def test_deleting_another_users_conversation_needs_staff_and_the_delete_permission(
    make_user: Callable[..., Any], plain_user: Any, holder: str
) -> None:
    conversation = conversation_of(plain_user, "ping")
    if holder == "staff without it":
        user = make_user("staff", "assistant.view_auditentry", is_staff=True)
    else:
        user = make_user("deleter", "assistant.delete_conversation")

    response = client_for(user).delete(f"{API}/admin/conversations/{conversation.pk}/")

    assert response.status_code == 403
    assert Conversation.objects.filter(pk=conversation.pk).exists()


@pytest.mark.django_db
def test_a_superuser_may_delete_any_conversation(superuser: Any, plain_user: Any) -> None:
    conversation = conversation_of(plain_user, "ping")

    response = client_for(superuser).delete(f"{API}/admin/conversations/{conversation.pk}/")

    assert response.status_code == 204
    assert not Conversation.objects.filter(pk=conversation.pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["delete", "get"])
def test_staff_conversation_that_does_not_exist_is_404(
    auditors: APIClient, erasers: APIClient, method: str
) -> None:
    suffix = "" if method == "delete" else "history/"
    client = erasers if method == "delete" else auditors

    response = getattr(client, method)(f"{API}/admin/conversations/{uuid.uuid4()}/{suffix}")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_staff_read_any_conversations_history_in_order(
    auditors: APIClient, plain_user: Any
) -> None:
    conversation = conversation_of(plain_user, "ping", "pong for plain", "help", "Here is")

    response = auditors.get(f"{API}/admin/conversations/{conversation.pk}/history/")

    assert response.status_code == 200
    body = response.json()
    assert body["conversation"]["id"] == str(conversation.pk)
    assert body["conversation"]["username"] == "plain"
    assert body["conversation"]["message_count"] == 4
    assert [(m["role"], m["text"]) for m in body["messages"]] == [
        ("user", "ping"),
        ("assistant", "pong for plain"),
        ("user", "help"),
        ("assistant", "Here is"),
    ]


# --- the audit trail -----------------------------------------------------------------------


def entry(user: Any, operation: str, decision: str, at: str) -> AuditEntry:
    """An audit row at a known moment (what dispatch would have written then)."""
    return AuditEntry.objects.create(
        user=user,
        username=user.get_username(),
        operation=operation,
        decision=decision,
        created_at=dt.datetime.fromisoformat(at),
    )


@pytest.fixture
def trail(plain_user: Any, reader: Any) -> dict[str, AuditEntry]:
    return {
        "may1": entry(reader, "list_orders", "executed", "2024-05-01T09:00:00+00:00"),
        "may2_morning": entry(plain_user, "list_orders", "denied", "2024-05-02T08:00:00+00:00"),
        "may2_evening": entry(plain_user, "ping", "executed", "2024-05-02T20:00:00+00:00"),
        "may3": entry(reader, "show_report", "invalid", "2024-05-03T12:00:00+00:00"),
        "may4": entry(reader, "list_orders", "executed", "2024-05-04T23:59:00+00:00"),
    }


def ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def newest_first(*entries: AuditEntry) -> list[int]:
    return sorted((e.pk for e in entries), reverse=True)


@pytest.mark.django_db
def test_audit_lists_every_entry_newest_first(
    auditors: APIClient, trail: dict[str, AuditEntry]
) -> None:
    assert ids(auditors.get(f"{API}/admin/audit/")) == newest_first(*trail.values())


@pytest.mark.django_db
def test_audit_entries_show_what_was_decided(auditors: APIClient, superuser: Any) -> None:
    dispatch("store_secret", {"label": "db", "secret": "hunter2"}, user=superuser, source="cli")

    response = auditors.get(f"{API}/admin/audit/")

    assert response.status_code == 200
    [row] = response.json()["results"]
    assert row["username"] == "root"
    assert row["user"] == superuser.pk
    assert (row["operation"], row["domain"], row["risk_level"]) == (
        "store_secret",
        "vault",
        "guarded",
    )
    assert (row["decision"], row["source"]) == ("executed", "cli")
    assert row["entities"] == {"label": "db", "secret": "[redacted]"}
    assert b"hunter2" not in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("by", ["id", "username"])
def test_audit_filters_by_user(
    auditors: APIClient, trail: dict[str, AuditEntry], plain_user: Any, by: str
) -> None:
    value = str(plain_user.pk) if by == "id" else "plain"

    response = auditors.get(f"{API}/admin/audit/", {"user": value})

    assert ids(response) == newest_first(trail["may2_morning"], trail["may2_evening"])


@pytest.mark.django_db
def test_audit_filters_by_operation(auditors: APIClient, trail: dict[str, AuditEntry]) -> None:
    response = auditors.get(f"{API}/admin/audit/", {"operation": "list_orders"})

    assert ids(response) == newest_first(trail["may1"], trail["may2_morning"], trail["may4"])


@pytest.mark.django_db
def test_audit_filters_by_decision(auditors: APIClient, trail: dict[str, AuditEntry]) -> None:
    response = auditors.get(f"{API}/admin/audit/", {"decision": "executed"})

    assert ids(response) == newest_first(trail["may1"], trail["may2_evening"], trail["may4"])


@pytest.mark.django_db
def test_audit_filters_combine(auditors: APIClient, trail: dict[str, AuditEntry]) -> None:
    response = auditors.get(
        f"{API}/admin/audit/", {"user": "reader", "operation": "list_orders", "since": "2024-05-02"}
    )

    assert ids(response) == [trail["may4"].pk]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"since": "2024-05-02"}, ["may2_morning", "may2_evening", "may3", "may4"]),
        ({"until": "2024-05-02"}, ["may1", "may2_morning", "may2_evening"]),
        ({"since": "2024-05-02", "until": "2024-05-03"}, ["may2_morning", "may2_evening", "may3"]),
        ({"since": "2024-05-02T12:00:00+00:00"}, ["may2_evening", "may3", "may4"]),
        ({"until": "2024-05-02T12:00:00+00:00"}, ["may1", "may2_morning"]),
        (
            {"since": "2024-05-02T08:00:00+00:00", "until": "2024-05-03T12:00:00+00:00"},
            ["may2_morning", "may2_evening", "may3"],
        ),
        (
            {"since": "2024-05-02T10:00:00+02:00", "until": "2024-05-02"},
            ["may2_morning", "may2_evening"],
        ),
    ],
)
def test_audit_filters_by_date_range(
    auditors: APIClient,
    trail: dict[str, AuditEntry],
    query: dict[str, str],
    expected: list[str],
) -> None:
    response = auditors.get(f"{API}/admin/audit/", query)

    assert ids(response) == newest_first(*(trail[name] for name in expected))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        {"decision": "approved"},
        {"since": "yesterday"},
        {"until": "2024-13-01"},
    ],
)
def test_audit_bad_filters_are_400(auditors: APIClient, query: dict[str, str]) -> None:
    response = auditors.get(f"{API}/admin/audit/", query)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


@pytest.mark.django_db
def test_audit_cursor_pagination_walks_every_entry_once(
    auditors: APIClient, trail: dict[str, AuditEntry]
) -> None:
    response = auditors.get(f"{API}/admin/audit/", {"page_size": 2})
    assert response.status_code == 200
    assert response.json()["previous"] is None
    pages: list[list[int]] = []
    while True:
        body = response.json()
        pages.append([row["id"] for row in body["results"]])
        if body["next"] is None:
            break
        assert "cursor=" in body["next"]
        response = auditors.get(body["next"])
        assert response.status_code == 200

    assert [len(page) for page in pages] == [2, 2, 1]
    assert [pk for page in pages for pk in page] == newest_first(*trail.values())


@pytest.mark.django_db
def test_audit_pagination_is_stable_while_new_entries_arrive(
    auditors: APIClient, trail: dict[str, AuditEntry], plain_user: Any
) -> None:
    first = auditors.get(f"{API}/admin/audit/", {"page_size": 2}).json()
    dispatch("ping", user=plain_user)

    second = auditors.get(first["next"]).json()

    assert [row["id"] for row in second["results"]] == newest_first(*trail.values())[2:4]
