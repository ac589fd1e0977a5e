"""Deprecated alias of ``assistant.turns.turn``, kept for one release."""

from ._moved import moved
from .turns.turn import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.turns.turn")
