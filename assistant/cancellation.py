"""Deprecated alias of ``assistant.core.cancellation``, kept for one release."""

from ._moved import moved
from .core.cancellation import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.core.cancellation", hint="import from there or from assistant")
