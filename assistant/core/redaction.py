"""The one redaction: entities as they may be stored and shown, and text with secrets blanked.

Entities: sensitive and unrecognised values become ``ASSISTANT["REDACTED"]`` (the audit, the
chat, the API, a decided pending action). Text: the user's message, a conversation's title,
streamed and stored replies, error summaries lose what a sensitive entity held.
"""

from __future__ import annotations

from typing import Any

from ..conf import assistant_settings
from .declaration import AssistantTool
from .registry import ToolRegistry, registry
from .storable import storable


def redacted_entities(tool: AssistantTool | None, raw: Any) -> dict[str, Any]:
    """The entities as they may be stored: sensitive and unrecognised values redacted."""
    if not raw:
        return {}
    placeholder = assistant_settings.REDACTED
    if not isinstance(raw, dict):
        return {"entities": placeholder}
    visible = {
        str(name): (value if may_show(tool, name) else placeholder) for name, value in raw.items()
    }
    stored: dict[str, Any] = storable(visible)
    return stored


def hidden_entities(tool: AssistantTool | None, raw: Any) -> dict[str, Any]:
    """The entities ``redacted_entities`` blanks, as they are (what a waiting action seals)."""
    if not isinstance(raw, dict):
        return {}
    return {str(name): value for name, value in raw.items() if not may_show(tool, name)}


def may_show(tool: AssistantTool | None, name: Any) -> bool:
    """Whether an entity's value may be stored and shown as it is: known and not sensitive."""
    return tool is not None and name in tool.entity_map and name not in tool.sensitive_entities


def redacted(operation: Any, entities: Any, site: ToolRegistry = registry) -> dict[str, Any]:
    """A call's entities as they may be shown, looked up by operation (the audit's view)."""
    return redacted_entities(site.find(operation), entities)


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


def redact_data(value: Any, secrets: set[str]) -> Any:
    """Stored data (JSON-shaped) with every secret blanked in its strings, keys included."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, list):
        return [redact_data(item, secrets) for item in value]
    if isinstance(value, dict):
        return {redact_text(str(k), secrets): redact_data(v, secrets) for k, v in value.items()}
    return value


def unfinished_secret(text: str, secrets: set[str]) -> int:
    """How many characters at the end of ``text`` may begin a secret (a stream holds them back)."""
    longest = 0
    for secret in secrets:
        for size in range(min(len(secret) - 1, len(text)), longest, -1):
            if secret.startswith(text[-size:]):
                longest = size
                break
    return longest
