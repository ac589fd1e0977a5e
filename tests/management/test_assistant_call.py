"""The command-line door: manage.py assistant_call goes through dispatch like REST and the chat."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from assistant.models import AuditEntry, PendingAction
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db


def call(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("assistant_call", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_a_tool_runs_as_the_named_user_and_is_audited_as_cli(reader: Any) -> None:
    Order.objects.create(reference="A-1", status="open")

    result = call("list_orders", "status=open", "--user", "reader")

    (outcome,) = result["outcomes"]
    assert (outcome["decision"], outcome["text"]) == ("executed", "A-1")
    entry = AuditEntry.objects.get(pk=outcome["audit_id"])
    assert (entry.source, entry.username, entry.entities) == ("cli", "reader", {"status": "open"})


def test_a_denied_call_is_audited_and_the_command_fails(plain_user: Any) -> None:
    with pytest.raises(CommandError, match="unknown_operation"):  # (no part in orders: hidden)
        call("list_orders", "--user", "plain")

    assert AuditEntry.objects.get().decision == "denied"


def test_bad_entities_are_refused_and_change_nothing(clerk: Any) -> None:
    with pytest.raises(CommandError, match="invalid_entities"):
        call("approve_order", "order_id=seven", "--user", "clerk")

    assert PendingAction.objects.count() == 0
    assert AuditEntry.objects.get().decision == "invalid"


def test_a_risky_call_waits_and_the_confirmation_runs_it_once(clerk: Any) -> None:
    order = Order.objects.create(reference="B-1")

    asked = call("approve_order", f"order_id={order.pk}", "--user", "clerk")["outcomes"][0]
    assert asked["decision"] == "confirmation_requested"
    order.refresh_from_db()
    assert order.approvals == 0

    done = call("--confirm", asked["pending_action"], "--user", "clerk")["outcomes"][0]
    order.refresh_from_db()
    assert (done["decision"], order.approvals) == ("confirmed", 1)
    with pytest.raises(CommandError, match="already_decided"):
        call("--confirm", asked["pending_action"], "--user", "clerk")


def test_a_message_is_a_whole_turn(plain_user: Any) -> None:
    result = call("--message", "ping", "--user", "plain")

    assert [o["operation"] for o in result["outcomes"]] == ["ping"]
    assert result["reply"] == "pong for plain"


def test_an_unknown_user_or_a_missing_operation_is_an_error(plain_user: Any) -> None:
    with pytest.raises(CommandError, match="No user named"):
        call("ping", "--user", "nobody")
    with pytest.raises(CommandError, match="Name an operation"):
        call("--user", "plain")
    with pytest.raises(CommandError, match="not key=value"):
        call("ping", "loose-word", "--user", "plain")
