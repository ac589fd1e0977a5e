"""Planners turn a user's message into intents: operations with entities, still to be dispatched."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Intent:
    """An operation a planner proposes; it means nothing until ``dispatch`` agrees."""

    operation: str
    entities: dict[str, Any] = field(default_factory=dict)
    source: str = "keywords"
