"""Deprecated alias of ``assistant.core.lifecycle``, kept for one release."""

from ._moved import moved
from .core.lifecycle import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.core.lifecycle", hint="import from there or from assistant")
