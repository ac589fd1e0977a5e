"""Deprecated alias of ``assistant.dispatch.catalog``, kept for one release."""

from ._moved import moved
from .dispatch.catalog import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.dispatch.catalog", hint="import from there or from assistant")
