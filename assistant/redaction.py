"""What a sensitive entity held, and text with it blanked out (the one redaction of words).

Entities have their own redacted view (``dispatch.audit_entities``); this is for text: the
user's message, a conversation's title, streamed and stored replies, error summaries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .conf import assistant_settings

if TYPE_CHECKING:
    from .registry import AssistantTool


def sensitive_values(tool: AssistantTool | None, entities: Any) -> set[str]:
    """What a call's sensitive entities hold, as the text that may appear in a message."""
    if tool is None or not isinstance(entities, dict):
        return set()
    found: set[str] = set()
    for name in tool.sensitive_entities:
        value = entities.get(name)
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, str | int | float) and not isinstance(item, bool) and str(item):
                found.add(str(item))
    return found


def redact_text(text: str, secrets: set[str]) -> str:
    """The text with every secret replaced by ``ASSISTANT["REDACTED"]``."""
    for secret in sorted(secrets, key=len, reverse=True):  # a longer secret may hold a shorter
        text = text.replace(secret, assistant_settings.REDACTED)
    return text


def unfinished_secret(text: str, secrets: set[str]) -> int:
    """How many characters at the end of ``text`` may begin a secret (a stream holds them back)."""
    longest = 0
    for secret in secrets:
        for size in range(min(len(secret) - 1, len(text)), longest, -1):
            if secret.startswith(text[-size:]):
                longest = size
                break
    return longest
