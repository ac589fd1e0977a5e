"""The user's message, stored before anything else happens; a turn sent again answered as stored."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils.translation import gettext

from .. import liveness
from ..conf import assistant_settings
from ..core.redaction import redact_text
from ..core.registry import ToolResult
from ..core.storable import storable_text
from ..dispatch.calls import Outcome
from ..exceptions import (
    AssistantError,
    ConversationNotFound,
    InvalidIdempotencyKey,
    InvalidMessage,
    TurnInProgress,
)
from ..models import AuditEntry, Conversation, Message, PendingAction
from .conversations import conversation_for
from .records import nested_savepoint, short_title


@dataclass(kw_only=True, slots=True)
class TurnResult:
    conversation: Conversation
    user_message: Message | None
    assistant_message: Message
    outcomes: list[Outcome] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    run_id: str = ""
    error: AssistantError | None = None  # what the run failed with, if it did

    @property
    def pending_actions(self) -> list[Any]:
        return [
            o.pending_action
            for o in self.outcomes
            if o.decision == AuditEntry.Decision.CONFIRMATION_REQUESTED
            and o.pending_action is not None
        ]


def check_message(text: Any) -> str:
    """The message as it will be stored, or ``InvalidMessage``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessage(gettext("The message is empty."))
    limit = assistant_settings.MAX_MESSAGE_LENGTH
    if len(text) > limit:
        raise InvalidMessage(
            gettext("The message is longer than %(limit)s characters.") % {"limit": limit}
        )
    if storable_text(text) != text:
        raise InvalidMessage(
            gettext("The message contains a NUL character or an unpaired surrogate.")
        )
    return text.strip()


def stored_key(user: Any, idempotency_key: Any) -> str | None:
    """How a client's ``Idempotency-Key`` is kept on a message (one namespace per user)."""
    if idempotency_key is None:
        return None
    key = str(idempotency_key)
    if not 1 <= len(key) <= 200 or not all(" " <= char <= "~" for char in key):
        raise InvalidIdempotencyKey()
    return f"{user.pk}:{key}"


def start_turn(
    user: Any,
    text: str,
    conversation: Conversation | Any = None,
    idempotency_key: Any = None,
    *,
    secrets: set[str] | None = None,
) -> tuple[Conversation, Message]:
    """Store the user's message (and a new conversation) before anything else can fail.

    ``text`` is what ``check_message`` returned. ``conversation`` is one the caller already
    checked belongs to ``user``, an id to check, or None for a new conversation. A new
    conversation gets its title once the planner had the chance to find secrets in the
    message (``Turn.show_user_message``); with ``secrets`` (a planner that planned already
    found these), the message is stored redacted and a new conversation with its title.
    """
    key = stored_key(user, idempotency_key)
    if secrets is not None:
        text = redact_text(text, secrets)
    # A new conversation and its first message are stored together; a message alone needs no
    # transaction of its own (no BEGIN and COMMIT round trips).
    new = conversation._state.adding if isinstance(conversation, Conversation) else not conversation
    title = short_title(text) if new and secrets is not None else ""
    process = liveness.tracking()  # (the turn's process, in the message's own INSERT)
    try:
        with transaction.atomic() if new else nested_savepoint():
            if isinstance(conversation, Conversation):
                if conversation._state.adding:  # a new thread's (``thread_conversation``)
                    conversation.title = conversation.title or title
                    conversation.save(force_insert=True)
            elif conversation:
                conversation = conversation_for(user, conversation)
            else:
                conversation = Conversation.objects.create(user=user, title=title)
            message = Message.objects.create(
                conversation=conversation,
                role=Message.Role.USER,
                text=text,
                idempotency_key=key,
                process=process,
            )
    except IntegrityError:
        if key is not None and Message.objects.filter(idempotency_key=key).exists():
            raise TurnInProgress() from None  # the same request, sent twice at once
        if not isinstance(conversation, Conversation):
            raise
        stored = Conversation.objects.filter(pk=conversation.pk, user_id=user.pk).first()
        if stored is None:
            raise ConversationNotFound() from None  # deleted meanwhile (from another tab)
        if not conversation._state.adding:
            raise
        # A new thread's first two runs at once: the other stored the thread first.
        return start_turn(user, text, stored, idempotency_key)
    liveness.running(message)
    return conversation, message


def earlier_turn(user: Any, idempotency_key: Any) -> TurnResult | None:
    """The turn a request with this key already ran (as stored), or None if there was none."""
    key = stored_key(user, idempotency_key)
    if key is None:
        return None
    found = Message.objects.filter(idempotency_key=key).select_related("conversation")
    messages = {message.role: message for message in found}
    if not messages:
        return None
    reply = messages.get(Message.Role.ASSISTANT)
    if reply is None:
        raise TurnInProgress()
    waiting = [uuid.UUID(r["pending_action"]) for r in reply.tool_calls if r.get("pending_action")]
    actions = PendingAction.objects.owned_by(user).in_bulk(waiting)
    audited = [r["audit_id"] for r in reply.tool_calls if r.get("audit_id")]
    durations = dict(AuditEntry.objects.filter(pk__in=audited).values_list("pk", "duration_ms"))
    return TurnResult(
        conversation=reply.conversation,
        user_message=messages.get(Message.Role.USER),
        assistant_message=reply,
        outcomes=[_stored_outcome(r, actions, durations) for r in reply.tool_calls],
    )


def _stored_outcome(
    record: dict[str, Any], actions: dict[Any, PendingAction], durations: dict[int, float]
) -> Outcome:
    """An outcome as the conversation remembers it (``tool_call_record``)."""
    code, text = record.get("code"), record.get("text") or ""
    pending = record.get("pending_action")
    return Outcome(
        operation=record["operation"],
        decision=record["decision"],
        entities=record.get("entities") or {},
        result=None
        if code
        else ToolResult(text=text, task_id=record.get("task_id"), data=record.get("data")),
        error=AssistantError(text, code=code) if code else None,
        pending_action=actions.get(uuid.UUID(pending)) if pending else None,
        audit_id=record.get("audit_id"),
        duration_ms=durations.get(record.get("audit_id") or 0, 0.0),
    )
