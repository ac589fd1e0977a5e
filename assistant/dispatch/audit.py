"""The audit writer: one entry per call, the single place the trail is written."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction

from .. import signals, telemetry
from ..core.storable import storable, storable_text
from ..models import AuditEntry, Conversation
from .calls import Call, CallContext, Outcome


def write_audit(context: CallContext, outcome: Outcome, *, domain: str | None = None) -> int:
    """Append one audit entry: the single place the trail is written (staff actions too)."""
    try:
        entry = _audit_row(context, outcome, domain, context.conversation)
    except IntegrityError:
        # The conversation was deleted while its call ran: the entry stays, unlinked, as the
        # deletion's SET_NULL left its earlier entries.
        if not _conversation_gone(context.conversation):
            raise
        entry = _audit_row(context, outcome, domain, None)
    signals.send(signals.tool_called, AuditEntry, entry=entry, outcome=outcome)
    return entry.pk


def _audit_row(
    context: CallContext, outcome: Outcome, domain: str | None, conversation: Conversation | None
) -> AuditEntry:
    user = context.user if context.user is not None and context.user.is_authenticated else None
    tool = outcome.tool or outcome.audit_tool
    entities = outcome.entities if outcome.audit_entities is None else outcome.audit_entities
    return AuditEntry.objects.create(
        user=user,
        username=user.get_username() if user is not None else "",
        operation=storable_text(outcome.operation[:64])
        if isinstance(outcome.operation, str)
        else "",
        domain=domain if domain is not None else (tool.domain if tool else ""),
        risk_level=tool.risk_level.value if tool else "",
        decision=outcome.audit_decision or outcome.decision,
        entities=storable(entities),
        duration_ms=outcome.duration_ms,
        error=storable_text(outcome.error_summary),
        reason=storable_text(outcome.reason),
        source=context.source,
        client=storable_text(context.client[:200]),
        arrival=context.arrival,
        request_ip=context.request_ip,
        conversation=conversation,
        pending_action=outcome.pending_action,
    )


def _conversation_gone(conversation: Conversation | None) -> bool:
    """Whether a write failed because the call's conversation was deleted meanwhile (outside a
    transaction: inside one, the error stands)."""
    return (
        conversation is not None
        and not transaction.get_connection().in_atomic_block
        and not Conversation.objects.filter(pk=conversation.pk).exists()
    )


def audited(call: Call, outcome: Outcome) -> Outcome:
    """The outcome, once its audit entry is written."""
    outcome.audit_id = write_audit(call.context, outcome)
    telemetry.tool_called(call.span, call, outcome)
    return outcome


async def aaudited(call: Call, outcome: Outcome) -> Outcome:
    outcome.audit_id = await sync_to_async(write_audit)(call.context, outcome)
    telemetry.tool_called(call.span, call, outcome)
    return outcome
