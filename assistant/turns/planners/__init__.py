"""Planners turn a user's message into intents: operations with entities, still to be dispatched."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from django.utils.translation import gettext

from ...conf import assistant_settings
from ...exceptions import LLMUnavailable
from .keywords import Intent, KeywordPlanner

if TYPE_CHECKING:
    from ..turn import Turn

__all__ = ["Intent", "KeywordPlanner", "Planner", "get_planner"]

logger = logging.getLogger("assistant.planner")


class Planner(Protocol):
    """Drives one turn: speaks with ``turn.say`` and acts only through ``turn.call``."""

    async def run(self, turn: Turn) -> None: ...


class MissingPlanner:
    """Stands in for a planner whose package is not installed: every turn fails, saying why."""

    def __init__(self, error: ImportError) -> None:
        self.error = error

    async def run(self, turn: Turn) -> None:
        logger.warning("The LLM planner cannot run: %s", self.error)
        raise LLMUnavailable(
            gettext(
                "The language model planner is not installed on the server "
                "(%(package)s is missing)."
            )
            % {"package": self.error.name or "openai"}
        )


def get_planner(name: str | None = None) -> Planner:
    """The planner ``name`` or ``ASSISTANT["PLANNER"]`` names: "keywords" (default) or "llm"."""
    if (name or assistant_settings.PLANNER) == "llm":
        try:
            from .llm import LLMPlanner  # (the optional ``openai`` package: only when chosen)
        except ImportError as exc:
            return MissingPlanner(exc)
        return LLMPlanner()
    return KeywordPlanner()
