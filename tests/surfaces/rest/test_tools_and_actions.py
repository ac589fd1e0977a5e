"""The REST API for end users: the catalog, turns, dispatch outcomes, confirmations."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from assistant.models import AuditEntry, Conversation, Message, PendingAction
from tests.clients import API, PUBLIC_TOOLS, client_for, dispatch_call, operations
from tests.testapp.models import Order

ALL_TOOLS = sorted(
    [
        *PUBLIC_TOOLS,
        "approve_order",
        "cancel_order",
        "export_orders",
        "list_orders",
        "merge_orders",
        "show_report",
        "store_secret",
        "rotate_secret",
        # toolsets and timeouts (diagnostics / database permissions; broken_tool and
        # outage_status are left out: their toolsets fail to start)
        "describe_table",
        "list_tables",
        "overrun",
        "overrun_sync",
        "probe_state",
        "record_call",
        "run_readonly_query",
        "sluggish_tool",
        "start_job",
        "run_llm_validation",
    ]
)


@pytest.fixture
def order() -> Order:
    return Order.objects.create(reference="A-1")


@pytest.fixture
def other_clerk(make_user: Callable[..., Any]) -> Any:
    """Holds exactly the clerk's permissions, but owns none of the clerk's actions."""
    return make_user(
        "clerk2", "testapp.view_order", "testapp.change_order", "testapp.approve_order"
    )


@pytest.fixture
def pending(clerk: Any, order: Order) -> PendingAction:
    """A pending approve_order of the clerk's, requested over REST."""
    response = dispatch_call(client_for(clerk), "approve_order", order_id=order.pk)
    assert response.status_code == 202
    return PendingAction.objects.get(pk=response.json()["pending_action"]["id"])


# --- the catalog ---------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("plain_user", PUBLIC_TOOLS),
        (
            "reader",
            sorted([*PUBLIC_TOOLS, "list_orders", "show_report", "export_orders"]),
        ),
        (
            "clerk",
            sorted(
                [*PUBLIC_TOOLS, "list_orders", "approve_order", "cancel_order", "export_orders"]
            ),
        ),
        ("superuser", ALL_TOOLS),
    ],
)
def test_tools_lists_exactly_what_the_user_may_call(
    request: pytest.FixtureRequest, who: str, expected: list[str]
) -> None:
    response = client_for(request.getfixturevalue(who)).get(f"{API}/tools/")

    assert response.status_code == 200
    assert operations(response.json()["tools"]) == expected


@pytest.mark.django_db
def test_inventory_style_describes_each_tool(clerk: Any) -> None:
    tools = client_for(clerk).get(f"{API}/tools/").json()["tools"]
    approve = next(tool for tool in tools if tool["operation"] == "approve_order")

    assert approve == {
        "operation": "approve_order",
        "domain": "orders",
        "description": "Approve an order",
        "risk_level": "guarded",
        "requires_confirmation": True,
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "integer"},
                "note": {"type": "string", "default": ""},
            },
            "required": ["order_id"],
            "additionalProperties": False,
        },
    }


@pytest.mark.django_db
def test_openai_style_is_the_same_catalog_in_openai_tool_format(reader: Any) -> None:
    client = client_for(reader)
    inventory = client.get(f"{API}/tools/").json()["tools"]

    response = client.get(f"{API}/tools/", {"style": "openai"})

    assert response.status_code == 200
    tools = response.json()["tools"]
    assert {tool["type"] for tool in tools} == {"function"}
    assert [tool["function"]["name"] for tool in tools] == [t["operation"] for t in inventory]
    by_name = {tool["function"]["name"]: tool["function"] for tool in tools}
    for entry in inventory:
        assert by_name[entry["operation"]] == {
            "name": entry["operation"],
            "description": entry["description"],
            "parameters": entry["parameters"],
        }


@pytest.mark.django_db
def test_anthropic_style_is_the_same_catalog_in_anthropic_tool_format(reader: Any) -> None:
    client = client_for(reader)
    inventory = client.get(f"{API}/tools/").json()["tools"]

    response = client.get(f"{API}/tools/", {"style": "anthropic"})

    assert response.status_code == 200
    assert response.json()["tools"] == [
        {
            "name": entry["operation"],
            "description": entry["description"],
            "input_schema": entry["parameters"],
        }
        for entry in inventory
    ]


@pytest.mark.django_db
def test_an_unknown_catalog_style_is_a_400(reader: Any) -> None:
    response = client_for(reader).get(f"{API}/tools/", {"style": "yaml"})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["errors"]) == {"style"}


# --- one turn ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_message_runs_one_turn_and_stores_both_sides(plain_user: Any) -> None:
    response = client_for(plain_user).post(f"{API}/messages/", {"message": "ping"}, format="json")

    assert response.status_code == 201
    body = response.json()
    conversation = Conversation.objects.get(pk=body["conversation"])
    assert conversation.user == plain_user
    assert body["user_message"]["role"] == "user"
    assert body["user_message"]["text"] == "ping"
    assert body["assistant_message"]["role"] == "assistant"
    assert body["assistant_message"]["text"] == "pong for plain"
    assert body["assistant_message"]["status"] == "complete"
    assert [(o["operation"], o["decision"]) for o in body["outcomes"]] == [("ping", "executed")]
    assert body["pending_actions"] == []
    stored = list(conversation.messages.values_list("id", "role", "text"))
    assert stored == [
        (uuid.UUID(body["user_message"]["id"]), "user", "ping"),
        (uuid.UUID(body["assistant_message"]["id"]), "assistant", "pong for plain"),
    ]
    assert AuditEntry.objects.get().conversation == conversation


@pytest.mark.django_db
def test_a_message_can_continue_one_of_your_conversations(plain_user: Any) -> None:
    client = client_for(plain_user)
    first = client.post(f"{API}/messages/", {"message": "ping"}, format="json").json()

    response = client.post(
        f"{API}/messages/",
        {"message": "ping again", "conversation": first["conversation"]},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["conversation"] == first["conversation"]
    assert Conversation.objects.count() == 1
    assert Message.objects.filter(conversation_id=first["conversation"]).count() == 4


@pytest.mark.django_db
def test_a_message_cannot_continue_someone_elses_conversation(plain_user: Any, reader: Any) -> None:
    theirs = client_for(reader).post(f"{API}/messages/", {"message": "ping"}, format="json")

    response = client_for(plain_user).post(
        f"{API}/messages/",
        {"message": "ping", "conversation": theirs.json()["conversation"]},
        format="json",
    )

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert Message.objects.count() == 2


@pytest.mark.django_db
def test_a_message_needing_confirmation_returns_the_pending_action(
    clerk: Any, order: Order
) -> None:
    response = client_for(clerk).post(
        f"{API}/messages/", {"message": f"approve order {order.pk}"}, format="json"
    )

    assert response.status_code == 201
    body = response.json()
    assert [(o["operation"], o["decision"]) for o in body["outcomes"]] == [
        ("approve_order", "confirmation_requested")
    ]
    [action] = body["pending_actions"]
    assert action["status"] == "pending"
    assert action["entities"]["order_id"] == order.pk
    stored = PendingAction.objects.get(pk=action["id"])
    assert str(stored.conversation_id) == body["conversation"]
    order.refresh_from_db()
    assert order.approvals == 0


@pytest.mark.django_db
def test_an_unmatched_message_answers_with_the_users_capabilities(plain_user: Any) -> None:
    response = client_for(plain_user).post(
        f"{API}/messages/", {"message": "good morning"}, format="json"
    )

    assert response.status_code == 201
    [outcome] = response.json()["outcomes"]
    assert (outcome["operation"], outcome["decision"]) == ("show_capabilities", "executed")
    assert sorted(tool["operation"] for tool in outcome["data"]) == PUBLIC_TOOLS


@pytest.mark.django_db
@pytest.mark.parametrize("payload", [{"message": ""}, {"message": "   "}, {}])
def test_an_empty_message_is_a_400_and_nothing_is_stored(
    plain_user: Any, payload: dict[str, Any]
) -> None:
    response = client_for(plain_user).post(f"{API}/messages/", payload, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["errors"]) == {"message"}
    assert Conversation.objects.count() == 0
    assert Message.objects.count() == 0


# --- dispatch outcomes ---------------------------------------------------------------------


@pytest.mark.django_db
def test_dispatch_executed_is_200_with_its_result_and_audit(plain_user: Any) -> None:
    response = dispatch_call(client_for(plain_user), "ping")

    assert response.status_code == 200
    body = response.json()
    assert body["operation"] == "ping"
    assert body["decision"] == "executed"
    assert body["code"] is None
    assert body["text"] == "pong for plain"
    entry = AuditEntry.objects.get()
    assert entry.pk == body["audit_id"]
    assert (entry.user, entry.decision, entry.source) == (plain_user, "executed", "rest")
    assert entry.request_ip == "127.0.0.1"


@pytest.mark.django_db
def test_dispatch_returns_the_tools_data_and_validated_entities(reader: Any) -> None:
    Order.objects.create(reference="B-2", status="shipped")
    Order.objects.create(reference="B-1", status="open")

    response = dispatch_call(client_for(reader), "list_orders", status="open")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "executed"
    assert body["text"] == "B-1"
    assert body["data"] == ["B-1"]
    assert body["entities"] == {"status": "open"}


@pytest.mark.django_db
def test_dispatch_async_handler_runs(plain_user: Any) -> None:
    response = dispatch_call(client_for(plain_user), "apong", times=3)

    assert response.status_code == 200
    assert response.json()["text"] == "pong pong pong"


@pytest.mark.django_db
def test_dispatch_failed_is_200_with_decision_failed_and_no_internals(plain_user: Any) -> None:
    response = dispatch_call(client_for(plain_user), "explode")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "failed"
    assert body["code"] == "tool_failed"
    assert b"boom" not in response.content
    assert b"Traceback" not in response.content
    entry = AuditEntry.objects.get()
    assert entry.decision == "failed"
    assert entry.error == "RuntimeError: boom: internal detail 42"


@pytest.mark.django_db
def test_dispatch_needing_confirmation_is_202_with_the_pending_action(
    clerk: Any, order: Order
) -> None:
    response = dispatch_call(client_for(clerk), "approve_order", order_id=order.pk)

    assert response.status_code == 202
    body = response.json()
    assert body["decision"] == "confirmation_requested"
    action = body["pending_action"]
    assert action["operation"] == "approve_order"
    assert action["status"] == "pending"
    assert action["entities"]["order_id"] == order.pk
    assert action["decided_at"] is None
    assert body["text"] == action["summary"]
    stored = PendingAction.objects.get(pk=action["id"])
    assert stored.user == clerk
    order.refresh_from_db()
    assert order.approvals == 0
    assert AuditEntry.objects.get().decision == "confirmation_requested"


@pytest.mark.django_db
def test_pending_action_expires_after_the_configured_ttl(clerk: Any, order: Order) -> None:
    with override_settings(ASSISTANT={**settings.ASSISTANT, "CONFIRMATION_TTL": 90}):
        response = dispatch_call(client_for(clerk), "approve_order", order_id=order.pk)

    assert response.status_code == 202
    action = PendingAction.objects.get(pk=response.json()["pending_action"]["id"])
    assert action.expires_at - action.created_at == dt.timedelta(seconds=90)


@pytest.mark.django_db
def test_dispatch_redacts_sensitive_entities_in_response_and_audit(
    make_user: Callable[..., Any],
) -> None:
    keeper = make_user("keeper", "assistant.vault_write")

    response = dispatch_call(client_for(keeper), "store_secret", label="db", secret="hunter2")

    assert response.status_code == 200
    body = response.json()
    assert body["text"] == "stored db (7 characters)"
    assert body["entities"] == {"label": "db", "secret": "[redacted]"}
    assert b"hunter2" not in response.content
    assert AuditEntry.objects.get().entities == {"label": "db", "secret": "[redacted]"}


@pytest.mark.django_db
def test_dispatch_unknown_operation_is_404(plain_user: Any) -> None:
    response = dispatch_call(client_for(plain_user), "launch_rockets")

    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "unknown_operation"
    assert body["decision"] == "unknown"
    assert AuditEntry.objects.get().decision == "unknown"


@pytest.mark.django_db
def test_dispatch_invalid_entities_is_400_naming_each_problem(plain_user: Any) -> None:
    response = dispatch_call(
        client_for(plain_user), "echo_types", count="many", kind="z", colour="red"
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_entities"
    assert body["decision"] == "invalid"
    assert set(body["errors"]) == {"count", "kind", "colour"}
    assert AuditEntry.objects.get().decision == "invalid"


@pytest.mark.django_db
def test_dispatch_missing_required_entity_is_400(plain_user: Any) -> None:
    response = dispatch_call(client_for(plain_user), "echo_types")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_entities"
    assert set(body["errors"]) == {"count"}


@pytest.mark.django_db
def test_dispatch_of_a_tool_of_a_domain_you_have_no_part_in_is_404_as_a_missing_one(
    plain_user: Any,
) -> None:
    response = dispatch_call(client_for(plain_user), "list_orders")

    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "unknown_operation"
    assert body["decision"] == "unknown"
    entry = AuditEntry.objects.get()
    assert (entry.operation, entry.decision) == ("list_orders", "denied")


@pytest.mark.django_db
def test_a_handler_refusing_is_403_permission_denied(plain_user: Any) -> None:
    response = dispatch_call(client_for(plain_user), "forbid")

    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "permission_denied"
    assert body["detail"] == "Not on Sundays."
    assert AuditEntry.objects.get().decision == "denied"


@pytest.mark.django_db
def test_dispatch_on_a_missing_object_is_invalid_and_opens_nothing(clerk: Any) -> None:
    response = dispatch_call(client_for(clerk), "approve_order", order_id=999_999)

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_entities"
    assert set(body["errors"]) == {"order_id"}
    assert PendingAction.objects.count() == 0


@pytest.mark.django_db
def test_dispatch_into_someone_elses_conversation_is_404(plain_user: Any, reader: Any) -> None:
    theirs = Conversation.objects.create(user=reader)

    response = client_for(plain_user).post(
        f"{API}/dispatch/", {"operation": "ping", "conversation": str(theirs.pk)}, format="json"
    )

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_dispatch_without_an_operation_is_400(plain_user: Any) -> None:
    response = client_for(plain_user).post(f"{API}/dispatch/", {"entities": {}}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["errors"]) == {"operation"}


# --- confirming and cancelling -------------------------------------------------------------


@pytest.mark.django_db
def test_confirm_runs_the_action_once_and_is_200(
    clerk: Any, order: Order, pending: PendingAction
) -> None:
    response = client_for(clerk).post(f"{API}/actions/{pending.pk}/confirm/")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "confirmed"
    assert body["text"] == "Approved A-1"
    assert body["actions"] == [{"type": "approved", "id": order.pk}]
    order.refresh_from_db()
    assert (order.approvals, order.status) == (1, "approved")
    pending.refresh_from_db()
    assert (pending.status, pending.decided_by) == ("confirmed", clerk)
    assert list(AuditEntry.objects.order_by("id").values_list("decision", flat=True)) == [
        "confirmation_requested",
        "confirmed",
    ]


@pytest.mark.django_db
def test_confirming_twice_is_409_and_runs_nothing_more(
    clerk: Any, order: Order, pending: PendingAction
) -> None:
    client = client_for(clerk)
    assert client.post(f"{API}/actions/{pending.pk}/confirm/").status_code == 200

    response = client.post(f"{API}/actions/{pending.pk}/confirm/")

    assert response.status_code == 409
    assert response.json()["code"] == "already_decided"
    order.refresh_from_db()
    assert order.approvals == 1


@pytest.mark.django_db
@pytest.mark.parametrize("verb", ["confirm", "cancel"])
def test_someone_elses_action_is_404(
    other_clerk: Any, order: Order, pending: PendingAction, verb: str
) -> None:
    response = client_for(other_clerk).post(f"{API}/actions/{pending.pk}/{verb}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    pending.refresh_from_db()
    assert pending.status == "pending"
    order.refresh_from_db()
    assert order.approvals == 0


@pytest.mark.django_db
@pytest.mark.parametrize("verb", ["confirm", "cancel"])
def test_an_action_that_does_not_exist_is_404(clerk: Any, verb: str) -> None:
    response = client_for(clerk).post(f"{API}/actions/{uuid.uuid4()}/{verb}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_confirming_an_expired_action_is_410_and_runs_nothing(
    clerk: Any, order: Order, pending: PendingAction
) -> None:
    PendingAction.objects.filter(pk=pending.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )

    response = client_for(clerk).post(f"{API}/actions/{pending.pk}/confirm/")

    assert response.status_code == 410
    assert response.json()["code"] == "expired"
    pending.refresh_from_db()
    assert pending.status == "expired"
    order.refresh_from_db()
    assert order.approvals == 0
    assert AuditEntry.objects.order_by("-id").first().decision == "expired"


@pytest.mark.django_db
def test_an_action_confirmed_after_a_zero_ttl_is_expired(clerk: Any, order: Order) -> None:
    client = client_for(clerk)
    with override_settings(ASSISTANT={**settings.ASSISTANT, "CONFIRMATION_TTL": 0}):
        action_id = dispatch_call(client, "approve_order", order_id=order.pk).json()[
            "pending_action"
        ]["id"]

    response = client.post(f"{API}/actions/{action_id}/confirm/")

    assert response.status_code == 410
    assert response.json()["code"] == "expired"


@pytest.mark.django_db
def test_cancel_refuses_the_action_for_good(
    clerk: Any, order: Order, pending: PendingAction
) -> None:
    client = client_for(clerk)

    response = client.post(f"{API}/actions/{pending.pk}/cancel/")

    assert response.status_code == 200
    assert response.json()["decision"] == "cancelled"
    pending.refresh_from_db()
    assert pending.status == "cancelled"
    assert AuditEntry.objects.order_by("-id").first().decision == "cancelled"
    confirm = client.post(f"{API}/actions/{pending.pk}/confirm/")
    assert confirm.status_code == 409
    assert confirm.json()["code"] == "already_decided"
    order.refresh_from_db()
    assert order.approvals == 0


@pytest.mark.django_db
def test_action_list_filters_to_your_own_waiting_actions(
    clerk: Any, other_clerk: Any, order: Order
) -> None:
    client = client_for(clerk)

    def request_approval(who: APIClient) -> str:
        return dispatch_call(who, "approve_order", order_id=order.pk).json()["pending_action"]["id"]

    waiting = request_approval(client)
    expired = request_approval(client)
    confirmed = request_approval(client)
    request_approval(client_for(other_clerk))
    PendingAction.objects.filter(pk=expired).update(
        expires_at=timezone.now() - dt.timedelta(minutes=1)
    )
    assert client.post(f"{API}/actions/{confirmed}/confirm/").status_code == 200

    only_waiting = client.get(f"{API}/actions/", {"status": "pending"})
    all_mine = client.get(f"{API}/actions/")

    assert only_waiting.status_code == 200
    assert [action["id"] for action in only_waiting.json()["results"]] == [waiting]
    assert all_mine.status_code == 200
    assert sorted(action["id"] for action in all_mine.json()["results"]) == sorted(
        [waiting, expired, confirmed]
    )


@pytest.mark.django_db
def test_action_list_with_an_unknown_status_is_400(clerk: Any) -> None:
    response = client_for(clerk).get(f"{API}/actions/", {"status": "maybe"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
