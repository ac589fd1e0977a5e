"""Planners turn a user's message into intents: operations with entities, still to be dispatched."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..turn import Turn


@dataclass(frozen=True, kw_only=True, slots=True)
class Intent:
    """An operation a planner proposes; it means nothing until ``dispatch`` agrees."""

    operation: str
    entities: dict[str, Any] = field(default_factory=dict)
    source: str = "keywords"


logger = logging.getLogger("assistant.planner")


class Planner(Protocol):
    """Drives one turn: speaks with ``turn.say`` and acts only through ``turn.call``."""

    async def run(self, turn: Turn) -> None: ...


class MissingPlanner:
    """Stands in for a planner whose package is not installed: every turn fails, saying why."""

    def __init__(self, error: ImportError) -> None:
        self.error = error

    async def run(self, turn: Turn) -> None:
        from ..exceptions import LLMUnavailable

        logger.warning("The LLM planner cannot run: %s", self.error)
        raise LLMUnavailable(
            "The language model planner is not installed on the server "
            f"({self.error.name or 'openai'} is missing)."
        )


def get_planner(name: str | None = None) -> Planner:
    """The planner ``name`` or ``ASSISTANT["PLANNER"]`` names: "keywords" (default) or "llm"."""
    from ..conf import assistant_settings

    if (name or assistant_settings.PLANNER) == "llm":
        try:
            from .llm import LLMPlanner
        except ImportError as exc:
            return MissingPlanner(exc)
        return LLMPlanner()
    from .keywords import KeywordPlanner

    return KeywordPlanner()
