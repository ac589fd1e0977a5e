"""Signals for the host project: each sent once, where its event happens, with its arguments."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.dispatch import Signal
from django.utils import timezone

import assistant
from assistant import action_decided, tool_called, turn_finished
from assistant.dispatch.confirmation import cancel_action, confirm_action
from assistant.dispatch.door import dispatch
from assistant.liveness import reap_interrupted_turns, reply_id
from assistant.models import AuditEntry, Message, PendingAction, ServerProcess
from assistant.turns.messages import start_turn
from assistant.turns.runs import run_turn
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db


class Heard:
    """What one receiver was sent: (sender, the named arguments) per send."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def __call__(self, sender: Any, signal: Signal, **named: Any) -> None:
        self.calls.append((sender, named))


@pytest.fixture
def hear() -> Iterator[Any]:
    connected: list[tuple[Signal, Any]] = []

    def listen(signal: Signal, receiver: Any = None) -> Any:
        receiver = receiver or Heard()
        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))
        return receiver

    yield listen
    for signal, receiver in connected:
        signal.disconnect(receiver)


def request_approval(user: Any, order: Order) -> PendingAction:
    outcome = dispatch("approve_order", {"order_id": order.pk}, user=user)
    assert outcome.decision == "confirmation_requested"
    return outcome.pending_action


def test_the_signals_are_public() -> None:
    assert {"tool_called", "action_decided", "turn_finished"} <= set(assistant.__all__)


def test_tool_called_gets_every_audit_row_with_its_outcome(hear, reader, plain_user, order):
    heard = hear(tool_called)

    executed = dispatch("list_orders", {}, user=reader)
    denied = dispatch("list_orders", {}, user=plain_user)

    assert [sender for sender, _ in heard.calls] == [AuditEntry, AuditEntry]
    assert [named["entry"].decision for _, named in heard.calls] == ["executed", "denied"]
    assert [named["entry"].pk for _, named in heard.calls] == [
        executed.audit_id,
        denied.audit_id,
    ]
    assert [named["outcome"] for _, named in heard.calls] == [executed, denied]
    assert heard.calls[0][1]["entry"].user == reader


def test_action_decided_when_confirmed(hear, clerk, order):
    action = request_approval(clerk, order)
    heard = hear(action_decided)

    confirm_action(action.pk, user=clerk)

    ((sender, named),) = heard.calls
    assert sender is PendingAction
    assert (named["action"].pk, named["status"], named["user"]) == (action.pk, "confirmed", clerk)
    assert named["action"].status == "confirmed"


def test_action_decided_when_cancelled(hear, clerk, order):
    action = request_approval(clerk, order)
    heard = hear(action_decided)

    cancel_action(action.pk, user=clerk)

    assert [(n["action"].pk, n["status"], n["user"]) for _, n in heard.calls] == [
        (action.pk, "cancelled", clerk)
    ]


def test_action_decided_once_when_an_action_expires(hear, clerk, order):
    action = request_approval(clerk, order)
    PendingAction.objects.filter(pk=action.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    heard = hear(action_decided)

    confirm_action(action.pk, user=clerk)
    confirm_action(action.pk, user=clerk)  # already expired: no second news

    assert [(n["action"].pk, n["status"], n["user"]) for _, n in heard.calls] == [
        (action.pk, "expired", None)
    ]


def test_action_decided_when_asking_again_expires_the_overdue(hear, clerk, order):
    overdue = request_approval(clerk, order)
    PendingAction.objects.filter(pk=overdue.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    heard = hear(action_decided)

    PendingAction.objects.filter(pk=overdue.pk).expire_due()

    assert [(n["action"].pk, n["status"]) for _, n in heard.calls] == [(overdue.pk, "expired")]


def test_turn_finished_gets_the_stored_reply(hear, reader, order):
    heard = hear(turn_finished)

    turn = run_turn(reader, "list orders")

    ((sender, named),) = heard.calls
    assert sender is Message
    assert named["message"] == turn.assistant_message
    assert named["message"].text == "ORD-1"
    assert (named["conversation"], named["status"], named["user"]) == (
        turn.conversation,
        "complete",
        reader,
    )


def test_turn_finished_when_a_dead_process_turn_is_closed_as_interrupted(hear, plain_user):
    dead = ServerProcess.objects.create(
        name="dead", host="web-1", pid=4242, beat_at=timezone.now() - timedelta(minutes=10)
    )
    _, asked = start_turn(plain_user, "ping")
    Message.objects.filter(pk=asked.pk).update(process=dead.name)
    heard = hear(turn_finished)

    reap_interrupted_turns()
    reap_interrupted_turns()  # once

    ((sender, named),) = heard.calls
    assert sender is Message
    assert str(named["message"].pk) == reply_id(asked.pk)
    assert (named["conversation"], named["status"], named["user"]) == (
        asked.conversation,
        "interrupted",
        plain_user,
    )


def boom(sender: Any, **named: Any) -> None:
    raise RuntimeError("the host project's receiver failed")


def test_a_receiver_that_raises_breaks_neither_the_turn_nor_the_call(hear, reader, order, caplog):
    for signal in (tool_called, turn_finished):
        hear(signal, boom)

    with caplog.at_level(logging.ERROR, logger="assistant.signals"):
        turn = run_turn(reader, "list orders")

    assert [
        (m.role, m.text, m.status) for m in turn.conversation.messages.order_by("created_at")
    ] == [
        ("user", "list orders", "complete"),
        ("assistant", "ORD-1", "complete"),
    ]
    assert AuditEntry.objects.get().decision == "executed"
    failures = [r for r in caplog.records if r.name == "assistant.signals"]
    assert len(failures) == 2
    assert all("the host project's receiver failed" in str(r.exc_info[1]) for r in failures)


def test_a_receiver_that_raises_does_not_undo_a_decision(hear, clerk, order):
    action = request_approval(clerk, order)
    hear(action_decided, boom)

    outcome = confirm_action(action.pk, user=clerk)

    assert outcome.decision == "confirmed"
    assert Order.objects.get(pk=order.pk).approvals == 1
