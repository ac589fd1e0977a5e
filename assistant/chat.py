"""One conversation turn, shared by every transport: store, plan, dispatch, reply, store."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from .conf import assistant_settings
from .dispatch import Outcome, dispatch
from .exceptions import ConversationNotFound, InvalidMessage
from .models import Conversation, Message
from .planner.keywords import plan
from .registry import ToolRegistry, registry

logger = logging.getLogger("assistant.chat")
NOTHING_TO_DO = "I could not find anything to do with that. Ask “what can you do?” to see my tools."
TURN_FAILED = (
    "Sorry, something went wrong while answering; your message is saved. Please try again."
)


@dataclass(kw_only=True, slots=True)
class TurnResult:
    conversation: Conversation
    user_message: Message
    assistant_message: Message
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def pending_actions(self) -> list[Any]:
        return [o.pending_action for o in self.outcomes if o.pending_action is not None]


def check_message(text: Any) -> str:
    """The message as it will be stored, or ``InvalidMessage``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessage("The message is empty.")
    limit = int(assistant_settings.MAX_MESSAGE_LENGTH)
    if len(text) > limit:
        raise InvalidMessage(f"The message is longer than {limit} characters.")
    return text.strip()


def conversation_for(user: Any, conversation_id: Any) -> Conversation:
    """The user's own conversation with this id, or ``ConversationNotFound`` (never someone else's)."""
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        raise ConversationNotFound("No such conversation of yours.") from None
    conversation = Conversation.objects.filter(pk=pk, user_id=user.pk).first()
    if conversation is None:
        raise ConversationNotFound("No such conversation of yours.")
    return conversation


def tool_call_record(outcome: Outcome) -> dict[str, Any]:
    """How a dispatch is remembered in the conversation (entities already redacted)."""
    return {
        "operation": outcome.operation,
        "entities": outcome.entities,
        "decision": outcome.decision,
        "text": outcome.text,
        "code": outcome.code,
        "task_id": outcome.result.task_id if outcome.result else None,
        "audit_id": outcome.audit_id,
        "pending_action": str(outcome.pending_action.pk) if outcome.pending_action else None,
    }


def reply_text(outcomes: list[Outcome]) -> str:
    texts = [outcome.text for outcome in outcomes if outcome.text]
    return "\n\n".join(texts) if texts else NOTHING_TO_DO


def redact_message(message: Message, intents: list[Any], site: ToolRegistry) -> None:
    """Blank out sensitive entity values the user typed, now that the planner has found them."""
    text = message.text
    for intent in intents:
        if intent.operation not in site:
            continue
        tool = site.get(intent.operation)
        for name in tool.sensitive_entities:
            value = intent.entities.get(name)
            if isinstance(value, str) and value:
                text = text.replace(value, assistant_settings.REDACTED)
    if text != message.text:
        message.text = text
        message.save(update_fields=["text"])


def start_turn(user: Any, text: Any, conversation_id: Any = None) -> tuple[Conversation, Message]:
    """Store the user's message (and a new conversation) before anything else can fail."""
    text = check_message(text)
    with transaction.atomic():
        if conversation_id:
            conversation = conversation_for(user, conversation_id)
        else:
            conversation = Conversation.objects.create(user=user, title=text[:80])
        message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, text=text
        )
        conversation.touch()
    return conversation, message


def run_turn(
    user: Any,
    text: Any,
    *,
    conversation_id: Any = None,
    source: str = "rest",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
) -> TurnResult:
    """A whole turn through the keyword planner; the reply is stored whatever happens."""
    conversation, user_message = start_turn(user, text, conversation_id)
    outcomes: list[Outcome] = []
    status = Message.Status.COMPLETE
    try:
        intents = plan(user_message.text, user, site)
        redact_message(user_message, intents, site)
        for intent in intents:
            outcomes.append(
                dispatch(
                    intent.operation,
                    intent.entities,
                    user=user,
                    conversation=conversation,
                    source=source,
                    request_ip=request_ip,
                    site=site,
                )
            )
        reply = reply_text(outcomes)
    except Exception:
        logger.exception("Turn failed in conversation %s", conversation.pk)
        status = Message.Status.FAILED
        reply = TURN_FAILED
    actions = [a for o in outcomes if o.result for a in o.result.actions]
    assistant_message = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=reply,
        status=status,
        tool_calls=[tool_call_record(outcome) for outcome in outcomes],
        actions=actions,
    )
    conversation.touch()
    return TurnResult(
        conversation=conversation,
        user_message=user_message,
        assistant_message=assistant_message,
        outcomes=outcomes,
    )
