"""What a turn stores besides its reply: its calls' records (their data left out when too big
to send), and the user's message redacted and titled by what the planner found."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from ..core.redaction import redact_text, sensitive_values
from ..core.registry import ToolRegistry, registry
from ..dispatch.calls import Outcome
from ..models import Conversation, Message

# A tool's data rides in its outcome event and the stored call; past this (as JSON) it is left
# out of both (daphne sends no frame over 1 MiB); REST callers still get it whole.
DATA_MAX_BYTES = 256 * 1024


def tool_call_record(outcome: Outcome, tool_call_id: str | None = None) -> dict[str, Any]:
    """How a dispatch is remembered in the conversation (entities already redacted)."""
    return {
        "tool_call_id": tool_call_id,
        "operation": outcome.operation,
        "entities": outcome.entities,
        "decision": outcome.decision,
        "text": outcome.text,
        "code": outcome.code,
        "task_id": outcome.result.task_id if outcome.result else None,
        "data": outcome.result.data if outcome.result else None,  # the full rows, for the UI
        "audit_id": outcome.audit_id,
        "pending_action": str(outcome.pending_action.pk) if outcome.pending_action else None,
    }


TITLE_WORDS = 6
TITLE_LENGTH = 60
# A sentence ends at . ! ? or ; followed by a space (not "v1.2"), or at a line break.
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n")
TITLE_TRIM = " \t.,;:!?\u2026-\u2013\u2014"  # and the ellipsis, en and em dashes


def short_title(text: str) -> str:
    """A conversation's title from a message: its first sentence (more if that is one or two
    words, "Hi!"), at most six words and 60 characters, cut between words."""
    words: list[str] = []
    for sentence in SENTENCE_END.split(text.strip()):
        words += sentence.split()
        if len(words) >= 3:
            break
    title = " ".join(words[:TITLE_WORDS])
    if len(title) > TITLE_LENGTH:
        cut = title.rfind(" ", 0, TITLE_LENGTH + 1)
        title = title[: cut if cut > 0 else TITLE_LENGTH]
    return title.rstrip(TITLE_TRIM) or title


def shown_data(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its data left out (``data_omitted``) when it is too big to send."""
    data = record["data"]
    if data is not None and len(json.dumps(data, cls=DjangoJSONEncoder)) > DATA_MAX_BYTES:
        return {**record, "data": None, "data_omitted": True}
    return record


def nested_savepoint() -> contextlib.AbstractContextManager[Any]:
    """A savepoint inside a caller's transaction (a failure leaves it usable); else nothing."""
    if transaction.get_connection().in_atomic_block:
        return transaction.atomic()
    return contextlib.nullcontext()


def secrets_of(intents: Any, site: ToolRegistry = registry) -> set[str]:
    """What the sensitive entities of planned intents hold (as ``Turn.identify`` learns it)."""
    secrets: set[str] = set()
    for intent in intents:
        secrets |= sensitive_values(site.find(intent.operation), intent.entities)
    return secrets


def settled(message: Message, conversation: Conversation, secrets: set[str]) -> tuple[str, str]:
    """The user's message redacted, and the conversation's title by it (a new one's first)."""
    before = message.text
    text = redact_text(before, secrets)
    if not conversation.title or conversation.title == short_title(before):
        title = short_title(text)  # of the redacted text: a secret cut short must go whole
    else:
        title = redact_text(conversation.title, secrets)
    return text, title


def settle_user_message(
    message: Message, conversation: Conversation, text: str, title: str
) -> None:
    """Store what ``settled`` made of the user's message and the title, where they changed."""
    if text != message.text:
        message.text = text
        message.save(update_fields=["text"])
    if title != conversation.title:
        conversation.title = title
        Conversation.objects.filter(pk=conversation.pk).update(title=title)
