"""The audit trail: append-only, outliving users and conversations, never holding a secret."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.core.registry import ToolRegistry
from assistant.dispatch.confirmation import confirm_action
from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, Conversation, Message, PendingAction
from assistant.surfaces.drf.serializers import OutcomeSerializer, PendingActionSerializer
from assistant.turns.runs import run_turn

pytestmark = pytest.mark.django_db

SECRET = "hunter2"


@pytest.fixture
def entry(plain_user):
    outcome = dispatch("ping", user=plain_user)
    return AuditEntry.objects.get(pk=outcome.audit_id)


def test_an_entry_cannot_be_saved_again(entry):
    entry.decision = "denied"

    with pytest.raises(TypeError):
        entry.save()

    assert AuditEntry.objects.get(pk=entry.pk).decision == "executed"


def test_an_entry_cannot_be_deleted(entry):
    with pytest.raises(TypeError):
        entry.delete()

    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_bulk_update_is_refused(entry):
    with pytest.raises(TypeError):
        AuditEntry.objects.filter(pk=entry.pk).update(decision="denied")
    with pytest.raises(TypeError):
        AuditEntry.objects.update(error="rewritten")

    assert AuditEntry.objects.get(pk=entry.pk).decision == "executed"
    assert AuditEntry.objects.get(pk=entry.pk).error == ""


def test_bulk_delete_is_refused(entry):
    with pytest.raises(TypeError):
        AuditEntry.objects.filter(pk=entry.pk).delete()
    with pytest.raises(TypeError):
        AuditEntry.objects.all().delete()

    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_bulk_update_of_loaded_entries_is_refused(entry):
    entry.decision = "denied"

    # bulk_update runs in a transaction of its own; the savepoint keeps the test's usable.
    with pytest.raises(TypeError), transaction.atomic():
        AuditEntry.objects.bulk_update([entry], ["decision"])

    assert AuditEntry.objects.get(pk=entry.pk).decision == "executed"


def test_prune_deletes_only_entries_older_than_the_cutoff():
    now = timezone.now()
    cutoff = now - timedelta(days=90)
    ages = {"ancient": 400, "old": 91, "at-cutoff": 90, "recent": 1}
    for operation, days in ages.items():
        AuditEntry.objects.create(
            operation=operation, decision="executed", created_at=now - timedelta(days=days)
        )

    removed = AuditEntry.objects.prune(cutoff)

    assert removed == 2
    assert set(AuditEntry.objects.values_list("operation", flat=True)) == {"at-cutoff", "recent"}


def test_deleting_a_user_keeps_their_audit_entries(clerk):
    conversation = Conversation.objects.create(user=clerk, title="orders")
    outcome = dispatch("list_orders", user=clerk, conversation=conversation)

    clerk.delete()

    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.user is None
    assert entry.username == "clerk"
    assert entry.conversation is None
    assert entry.operation == "list_orders"


def test_deleting_a_conversation_keeps_its_audit_entries(plain_user):
    conversation = Conversation.objects.create(user=plain_user, title="t")
    outcome = dispatch("ping", user=plain_user, conversation=conversation)

    conversation.delete()

    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.conversation is None
    assert entry.user == plain_user


def stored_rows_mentioning(needle):
    """Every stored row whose JSON contains ``needle``."""
    rows = {
        "audit": list(AuditEntry.objects.values()),
        "pending action": list(PendingAction.objects.values()),
        "assistant message": list(Message.objects.filter(role="assistant").values()),
        "user message calls": list(Message.objects.filter(role="user").values("tool_calls")),
    }
    return {
        kind: row
        for kind, values in rows.items()
        for row in values
        if needle in json.dumps(row, cls=DjangoJSONEncoder)
    }


def test_a_sensitive_entity_never_reaches_the_audit_or_the_history(keeper):
    turn = run_turn(keeper, f'store secret label=x secret="{SECRET}"')

    (outcome,) = turn.outcomes
    assert outcome.decision == "executed"
    assert outcome.text == "stored x (7 characters)"
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.entities == {"label": "x", "secret": "[redacted]"}
    assert turn.assistant_message.tool_calls[0]["entities"] == entry.entities
    assert stored_rows_mentioning(SECRET) == {}


def test_redaction_uses_the_configured_placeholder(keeper, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "REDACTED": "***"}

    outcome = dispatch("store_secret", {"label": "x", "secret": SECRET}, user=keeper)

    assert AuditEntry.objects.get(pk=outcome.audit_id).entities == {"label": "x", "secret": "***"}


def test_a_denied_call_does_not_record_the_secret_either(plain_user):
    outcome = dispatch("store_secret", {"label": "x", "secret": SECRET}, user=plain_user)

    assert outcome.decision == "unknown"  # (no part in the vault: answered as a missing tool)
    assert AuditEntry.objects.get().decision == "denied"
    assert stored_rows_mentioning(SECRET) == {}


@pytest.fixture
def stash():
    """A fresh registry with a confirmation-gated tool taking a sensitive entity."""
    site = ToolRegistry("stash")
    received: list[str] = []

    @assistant_tool(
        operation="stash_secret",
        domain="vault",
        description="Stash a secret once confirmed",
        risk_level="guarded",
        requires_confirmation=True,
        public=True,
        sensitive_entities=["secret"],
        keywords=["stash secret"],
        site=site,
    )
    def stash_secret(call: ToolCall, label: str, secret: str) -> ToolResult:
        received.append(secret)
        return ToolResult(text=f"stashed {label}")

    site.received = received
    return site


def test_a_pending_action_keeps_the_secret_only_where_it_must(keeper, stash):
    turn = run_turn(keeper, f'stash secret label=x secret="{SECRET}"', site=stash)

    (action,) = turn.pending_actions
    assert SECRET not in action.summary
    assert "[redacted]" in action.summary
    assert SECRET not in json.dumps(PendingActionSerializer(action).data, cls=DjangoJSONEncoder)
    assert SECRET not in json.dumps(OutcomeSerializer(turn.outcomes[0]).data, cls=DjangoJSONEncoder)
    assert stored_rows_mentioning(SECRET) == {}
    # The real value is kept sealed, because the tool still has to run with it.
    stored = PendingAction.objects.get(pk=action.pk)
    assert stored.entities == {"label": "x", "secret": "[redacted]"}
    assert stored.sealed
    assert SECRET not in stored.sealed

    outcome = confirm_action(action.pk, user=keeper, site=stash)

    assert outcome.decision == "confirmed"
    assert stash.received == [SECRET]
    assert AuditEntry.objects.get(pk=outcome.audit_id).entities == {
        "label": "x",
        "secret": "[redacted]",
    }
    assert stored_rows_mentioning(SECRET) == {}


def test_the_confirmation_summary_uses_the_configured_placeholder(keeper, stash, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "REDACTED": "***"}

    outcome = dispatch("stash_secret", {"label": "x", "secret": SECRET}, user=keeper, site=stash)

    assert AuditEntry.objects.get(pk=outcome.audit_id).entities["secret"] == "***"
    assert (
        outcome.pending_action.summary
        == "Stash a secret once confirmed (label: “x”, secret: “***”)"
    )
