"""The offline planner: the registry's keywords pick the tool, the message's words fill its entities."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.utils.translation import gettext_lazy

from ...access.caches import access_for
from ...access.permissions import known_domains
from ...access.predicate import denials
from ...access.tokens import Ceiling
from ...core.declaration import AssistantTool
from ...core.entities import Entity
from ...core.registry import ToolRegistry, registry
from ...dispatch.catalog import visible_tools

if TYPE_CHECKING:
    from ...dispatch.calls import Outcome
    from ..turn import Turn


@dataclass(frozen=True, kw_only=True, slots=True)
class Intent:
    """An operation a planner proposes; it means nothing until ``dispatch`` agrees."""

    operation: str
    entities: dict[str, Any] = field(default_factory=dict)
    source: str = "keywords"
    refusal: bool = False  # a tool the user may not use, sent for dispatch's refusal


FALLBACK_OPERATION = "show_capabilities"
NOTHING_TO_DO = gettext_lazy(
    "I could not find anything to do with that. Ask “what can you do?” to see my tools."
)
PAIR_RE = re.compile(r"""(?P<key>[A-Za-z_][\w-]*)\s*=\s*(?P<value>"[^"]*"|'[^']*'|\S+)""")
QUOTED_RE = re.compile(r""""([^"]*)"|'([^']*)'""")
NUMBER_RE = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?![\w.])")
BOOL_RE = re.compile(r"\b(true|false|yes|no)\b", re.IGNORECASE)


def _phrases(tool: AssistantTool) -> tuple[str, ...]:
    """What names a tool in a message: its keywords, its operation, the operation spelled out."""
    return (*tool.keywords, tool.operation.lower(), tool.operation.replace("_", " ").lower())


def match_tool(text: str, tools: list[AssistantTool]) -> AssistantTool | None:
    """The tool whose longest phrase appears in the message as whole words."""
    lowered = " ".join(text.lower().split())
    best: tuple[int, AssistantTool] | None = None
    for tool in tools:
        for phrase in _phrases(tool):
            if len(phrase) > (best[0] if best else 0) and re.search(
                rf"(?<!\w){re.escape(phrase)}(?!\w)", lowered
            ):
                best = (len(phrase), tool)
    return best[1] if best else None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _parse(entity: Entity, text: str) -> Any:
    try:
        return entity.parse_text(text)
    except ValueError:
        return text  # dispatch reports the bad value as invalid_entities


UUID_RE = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
# Words that join values ("deploy 12 *to* prod") or only make the sentence polite.
CONNECTORS = frozenset(
    [
        "to",
        "from",
        "in",
        "into",
        "on",
        "onto",
        "of",
        "for",
        "with",
        "and",
        "the",
        "a",
        "an",
        "at",
        "by",
        "as",
        "please",
        "can",
        "could",
        "would",
        "you",
        "me",
        "my",
        "our",
        "us",
        "is",
        "are",
        "be",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "which",
        "what",
        "what's",
        "whats",
        "show",
        "tell",
        "give",
        "let's",
        "lets",
        "i",
        "i'd",
        "i'm",
    ]
)
WORD_RE = re.compile(r"[\w][\w.:/@+-]*")


def _is_uuid(entity: Entity) -> bool:
    return entity.schema.get("format") == "uuid"


def extract_entities(text: str, tool: AssistantTool) -> dict[str, Any]:
    """Fill the tool's entities from a message, most explicit first.

    ``key=value`` pairs, then quoted strings (in declaration order), UUIDs, bare numbers
    (integer entities, else the next free text entity), booleans, and finally the plain words
    left once the tool's own phrase and connecting words are set aside ("deploy 12 to prod").
    """
    found: dict[str, Any] = {}
    for match in PAIR_RE.finditer(text):
        key = match["key"]
        entity = tool.entity_map.get(key)
        raw = _unquote(match["value"])
        found[key] = _parse(entity, raw) if entity else raw
    rest = PAIR_RE.sub(" ", text)
    free = [entity for entity in tool.entities if entity.name not in found]

    def fill(kinds: tuple[str, ...], value: str) -> bool:
        for entity in free:
            if entity.kind in kinds and entity.name not in found:
                try:
                    found[entity.name] = entity.parse_text(value)
                except ValueError:
                    continue
                return True
        return False

    def fill_text(value: str) -> bool:
        for entity in free:
            if entity.name in found or _is_uuid(entity) or entity.kind not in ("string", "enum"):
                continue
            try:
                found[entity.name] = entity.parse_text(value)
            except ValueError:
                continue
            return True
        return False

    def fill_uuid(value: str) -> bool:
        for entity in free:
            if _is_uuid(entity) and entity.name not in found:
                found[entity.name] = _parse(entity, value)
                return True
        return False

    for match in QUOTED_RE.finditer(rest):
        quoted = match[1] if match[1] is not None else match[2]
        if not (UUID_RE.fullmatch(quoted.strip()) and fill_uuid(quoted.strip())):
            fill_text(quoted)
    rest = QUOTED_RE.sub(" ", rest)
    for match in UUID_RE.finditer(rest):
        fill_uuid(match.group())
    rest = UUID_RE.sub(" ", rest)
    for match in NUMBER_RE.finditer(rest):
        number = match.group()
        if "." in number:
            fill(("number",), number) or fill_text(number)
        elif not fill(("integer",), number) and not fill(("number",), number):
            fill_text(number)
    rest = NUMBER_RE.sub(" ", rest)
    for match in BOOL_RE.finditer(rest):
        fill(("boolean",), match.group())
    rest = BOOL_RE.sub(" ", rest)
    for value in _plain_values(rest, tool):
        fill_text(value)
    return found


def _plain_values(text: str, tool: AssistantTool) -> list[str]:
    """The words a message has left once the tool's phrase and connecting words are gone."""
    lowered = " ".join(text.split())
    for phrase in sorted(_phrases(tool), key=len, reverse=True):
        match = re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", lowered, re.IGNORECASE)
        if match:
            lowered = lowered[: match.start()] + " " + lowered[match.end() :]
            break
    return [
        word
        for word in WORD_RE.findall(lowered)
        if word.lower() not in CONNECTORS and word.lower() not in tool.operation.split("_")
    ]


def refused_tools(user: Any, site: ToolRegistry = registry) -> list[AssistantTool]:
    """The tools this user may not use but may be told so (``permissions.discloses``)."""
    access = access_for(user)
    if not access.active:
        return []
    known = known_domains(access, site)
    return [tool for tool in site if tool.domain in known and denials(access, tool)]


def plan(
    text: str,
    user: Any,
    site: ToolRegistry = registry,
    session: Any = None,
    ceiling: Ceiling | None = None,
) -> list[Intent]:
    """Map a message to one intent among the tools this user may use; unmatched → capabilities.

    A message naming a tool the user may not use, but may know of, goes to dispatch as it is
    (no entities: dispatch refuses it before reading them) so its refusal says what it needs;
    so does one naming a tool of the user's that the token's ``ceiling`` leaves out.
    """
    tools = visible_tools(user, session=session, site=site)
    refused = refused_tools(user, site)
    if ceiling is not None:
        refused += [tool for tool in tools if not ceiling.allows(tool)]
        tools = [tool for tool in tools if ceiling.allows(tool)]
    tool = match_tool(text, tools + refused)
    if tool is not None and tool in refused:
        return [Intent(operation=tool.operation, source="keywords", refusal=True)]
    if tool is None:
        if FALLBACK_OPERATION in site:
            return [Intent(operation=FALLBACK_OPERATION, source="keywords")]
        return []
    return [
        Intent(operation=tool.operation, entities=extract_entities(text, tool), source="keywords")
    ]


def _plan(turn: Turn) -> list[Intent]:
    assert turn.user_message is not None
    return plan(turn.user_message.text, turn.user, turn.site, turn.session, turn.ceiling)


def _texts(outcomes: list[Outcome]) -> list[str]:
    return [outcome.text for outcome in outcomes if outcome.text] or [str(NOTHING_TO_DO)]


def reply_text(outcomes: list[Outcome]) -> str:
    """What ``KeywordPlanner.run`` says once its calls are made: the outcomes' texts."""
    return "\n\n".join(_texts(outcomes))


class KeywordPlanner:
    """Offline and deterministic: one intent from the registry's keywords, then the results."""

    @staticmethod
    def plan_text(
        text: str, user: Any, session: Any = None, ceiling: Ceiling | None = None
    ) -> list[Intent]:
        """Plan a message from a sync step the turn makes anyway (its first), before the turn
        exists: the turn's ``planned``, which ``plan`` takes from there."""
        return plan(text, user, registry, session, ceiling)

    async def plan(self, turn: Turn) -> list[Intent]:
        """The turn's intents, their secrets identified before anything echoes the message."""
        intents, turn.planned = turn.planned, None
        if intents is None:
            intents = await sync_to_async(_plan)(turn)
        else:
            await asyncio.sleep(0)  # a stop asked for already lands here, before any call
        for intent in intents:
            turn.identify(intent.operation, intent.entities)
        return intents

    async def run(self, turn: Turn, intents: list[Intent] | None = None) -> None:
        turn.answered_by = turn.answered_by or "keywords"
        if intents is None:
            intents = await self.plan(turn)
        for index, intent in enumerate(intents):
            last = index == len(intents) - 1  # the reply is known then: stored in its hop
            await turn.call(
                intent.operation,
                intent.entities,
                refusal=intent.refusal,
                reply=reply_text if last else None,
            )
        texts = _texts(turn.outcomes)
        for index, text in enumerate(texts):
            lines = text.splitlines(keepends=True)
            for line in lines:
                await turn.say(line)
            if index < len(texts) - 1:
                await turn.say("\n\n")


__all__ = ["Intent", "KeywordPlanner", "extract_entities", "match_tool", "plan"]
