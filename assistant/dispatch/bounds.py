"""What one call and one turn may not exceed, and what is kept of a call refused for its size."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext

from ..conf import assistant_settings
from ..core.declaration import AssistantTool
from ..core.redaction import redacted_entities
from ..core.storable import storable
from ..exceptions import TurnDeadline

PREVIEW_CHARS = 200  # of a refused call's arguments, kept next to their digest
PREVIEW_ITEMS = 20  # entities (and list items) a preview looks at


def encoded_arguments(raw: Any) -> bytes:
    """A call's arguments as the bytes they take: a string as it came, anything else as JSON."""
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    try:
        text = json.dumps(raw, default=str, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # keys JSON refuses, cycles, deep nesting
        text = json.dumps(storable(raw), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def too_large(raw: Any) -> bytes | None:
    """The arguments' bytes when they are more than one call may bring, else None."""
    if not raw:
        return None
    limit: int = assistant_settings.MAX_TOOL_ARGUMENT_BYTES
    if isinstance(raw, str) and len(raw) * 4 <= limit:
        return None  # (no character takes more than four bytes)
    encoded = encoded_arguments(raw)
    return encoded if len(encoded) > limit else None


def kept_instead(tool: AssistantTool | None, raw: Any, encoded: bytes) -> dict[str, Any]:
    """What is kept of arguments too large to keep: their size, sha256 digest and a short preview."""
    return summary(len(encoded), hashlib.sha256(encoded).hexdigest(), preview(tool, raw))


def summary(size: int, digest: str, shown: str) -> dict[str, Any]:
    """The stored stand-in for a refused call's arguments (never the arguments themselves)."""
    return {"omitted": "arguments_too_large", "bytes": size, "sha256": digest, "preview": shown}


def preview(tool: AssistantTool | None, raw: Any) -> str:
    """The start of a call's arguments as they may be shown (sensitive and unknown ones redacted)."""
    if isinstance(raw, str):
        # Text not parsed yet (a model's, as it came) shows only for a tool with no sensitive
        # parameter: a secret in it could not be told apart.
        if tool is not None and tool.sensitive_entities:
            return str(assistant_settings.REDACTED)
        return raw[:PREVIEW_CHARS]
    if isinstance(raw, dict):
        start = {
            str(name)[:PREVIEW_CHARS]: _start(value)
            for name, value in itertools.islice(raw.items(), PREVIEW_ITEMS)
        }
        shown = redacted_entities(tool, start)
    else:
        shown = redacted_entities(tool, raw)
    return json.dumps(shown, ensure_ascii=False, default=str)[:PREVIEW_CHARS]


def _start(value: Any, depth: int = 0) -> Any:
    """The beginning of a value, enough for a preview (never a copy of all of it)."""
    if isinstance(value, str):
        return value[:PREVIEW_CHARS]
    if depth >= 2:
        return "…"
    if isinstance(value, dict):
        return {
            str(name)[:PREVIEW_CHARS]: _start(item, depth + 1)
            for name, item in itertools.islice(value.items(), PREVIEW_ITEMS)
        }
    if isinstance(value, list | tuple):
        return [_start(item, depth + 1) for item in value[:PREVIEW_ITEMS]]
    return value


async def within_deadline(work: asyncio.Future[Any], stop: Callable[[], None]) -> None:
    """Await a turn's work; past ``TURN_DEADLINE`` it is stopped as a Stop stops it (``stop``:
    the model stream closed, a running call's token fired) and ``TurnDeadline`` raised."""
    seconds: float = assistant_settings.TURN_DEADLINE
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        stop()
        work.cancel()

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        await work
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not expired or (current is not None and current.cancelling()):
            raise  # a Stop, or this turn's own cancellation (a shutdown)
        raise TurnDeadline(
            gettext("Cut short: the turn took longer than %(seconds)s s.")
            % {"seconds": f"{seconds:g}"}
        ) from None
    finally:
        timer.cancel()
