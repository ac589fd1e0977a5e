"""Tool calls a model wrote as text: a reply that is one JSON object naming a tool, read as a call.

Small local models (and some servers) answer a tool-using request with the call written out,
fenced as ```json, bare, or inside ``<tool_call>`` tags, in the shapes such models write:
``{"name": ..., "arguments": {...}}``, ``{"tool": ..., "parameters" | "args": {...}}`` or
``{"function": {"name": ..., "arguments": ...}}``. Only a reply that is nothing but such calls
counts, and only a tool the user was offered: any other reply stays words, so a hidden tool named
in text is answered exactly as a tool that does not exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

# How a reply that may be a written call starts: it is held back until the reply ends.
OPENINGS = ("{", "```", "<tool_call>")
NAME_KEYS = ("name", "tool", "tool_name", "function")
ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
FENCED = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)
TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True, kw_only=True, slots=True)
class TextCall:
    """One call read from a reply's text: the tool's name and its arguments as JSON."""

    name: str
    arguments: str


def calls_in_text(text: str, offered: Collection[str]) -> list[TextCall]:
    """The calls a reply consists of, if it is nothing but calls of offered tools; else none."""
    bodies = _bodies(text.strip())
    calls = [_call(body) for body in bodies]
    if not calls or any(call is None or call.name not in offered for call in calls):
        return []
    return [call for call in calls if call is not None]


def _bodies(text: str) -> list[str]:
    """The JSON texts a reply holds: each ``<tool_call>`` block, a fenced block, or itself."""
    if text.startswith("<tool_call>"):
        blocks = TAGGED.findall(text)
        return blocks if TAGGED.sub("", text).strip() == "" else []
    fenced = FENCED.match(text)
    return [fenced.group(1).strip() if fenced else text]


def _call(body: str) -> TextCall | None:
    value = _json(body)
    if value is None and body.startswith("{{") and body.endswith("}}"):
        value = _json(body[1:-1])  # braces doubled, as a template escapes them (Qwen2.5-Coder)
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):  # OpenAI's own shape, written out
        value = value["function"]
    name = next((value[key] for key in NAME_KEYS if isinstance(value.get(key), str)), None)
    arguments: Any = next((value[key] for key in ARGUMENT_KEYS if key in value), {})
    if not name:
        return None
    if isinstance(arguments, str):  # arguments as a JSON string, as the wire format has them
        return TextCall(name=name, arguments=arguments)
    return TextCall(name=name, arguments=json.dumps(arguments))


def _json(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


class HeldText:
    """A reply's words, passed on as they come unless they open like a written call: those wait
    for the reply's end (``release``), so a call is never shown to the user as words."""

    def __init__(self, say: Callable[[str], Awaitable[None]], *, limit: int) -> None:
        self.say = say
        self.limit = limit  # characters held at most; past them it is words, said
        self.held = ""
        self.holding = True  # until the reply shows it is words

    async def hear(self, delta: str) -> None:
        if not self.holding:
            await self.say(delta)
            return
        self.held += delta
        start = self.held.lstrip()
        if not start:
            return
        may_be_call = any(start.startswith(o) or o.startswith(start) for o in OPENINGS)
        if not may_be_call or len(self.held) > self.limit:
            await self.release()

    async def release(self) -> None:
        """Say what was held (the reply was words after all)."""
        self.holding = False
        held, self.held = self.held, ""
        if held:
            await self.say(held)

    def calls(self, offered: Collection[str]) -> list[TextCall]:
        """At the reply's end: the calls the held text is, if it is calls (then never said)."""
        return calls_in_text(self.held, offered) if self.holding else []


def as_intents(calls: list[TextCall], prefix: str) -> list[dict[str, Any]]:
    """Written calls as the planner's intents, as native calls are (ids of their own)."""
    return [
        {
            "id": f"{prefix}_text_{position}",
            "name": call.name,
            "arguments": call.arguments,
            "too_large": None,  # (held text is bounded; dispatch refuses arguments too large)
            "extra": {},
            "arrival": "text",
        }
        for position, call in enumerate(calls)
    ]


def as_message(intent: dict[str, Any]) -> dict[str, Any]:
    """A written call as the assistant message's native call, sent back on the next step."""
    function = {"name": intent["name"], "arguments": intent["arguments"]}
    return {"id": intent["id"], "type": "function", "function": function}
