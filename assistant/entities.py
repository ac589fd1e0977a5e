"""Deprecated alias of ``assistant.core.entities``, kept for one release."""

from ._moved import moved
from .core.entities import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.core.entities", hint="import from there or from assistant")
