"""Deprecated alias of ``assistant.turns.planners.llm``, kept for one release."""

from .._moved import moved
from ..turns.planners.llm import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.turns.planners.llm")
