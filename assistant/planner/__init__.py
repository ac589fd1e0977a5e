"""Planners turn a user's message into intents: operations with entities, still to be dispatched."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..chat import Turn


@dataclass(frozen=True, kw_only=True, slots=True)
class Intent:
    """An operation a planner proposes; it means nothing until ``dispatch`` agrees."""

    operation: str
    entities: dict[str, Any] = field(default_factory=dict)
    source: str = "keywords"


class Planner(Protocol):
    """Drives one turn: speaks with ``turn.say`` and acts only through ``turn.call``."""

    async def run(self, turn: Turn) -> None: ...


def get_planner(name: str | None = None) -> Planner:
    """The planner ``name`` or ``ASSISTANT["PLANNER"]`` names: "keywords" (default) or "llm"."""
    from ..conf import assistant_settings

    if (name or assistant_settings.PLANNER) == "llm":
        from .llm import LLMPlanner

        return LLMPlanner()
    from .keywords import KeywordPlanner

    return KeywordPlanner()
