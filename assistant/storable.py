"""Deprecated alias of ``assistant.core.storable``, kept for one release."""

from ._moved import moved
from .core.storable import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.core.storable")
