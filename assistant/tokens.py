"""Deprecated alias of ``assistant.access.tokens``, kept for one release."""

from ._moved import moved
from .access.tokens import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.access.tokens")
