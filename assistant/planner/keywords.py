"""Deprecated alias of ``assistant.turns.planners.keywords``, kept for one release."""

from .._moved import moved
from ..turns.planners.keywords import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.turns.planners.keywords")
