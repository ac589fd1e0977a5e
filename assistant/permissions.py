"""Deprecated alias of ``assistant.access.permissions``, kept for one release."""

from ._moved import moved
from .access.permissions import *  # noqa: F403  (the names type checkers see at the old path)

moved(__name__, "assistant.access.permissions")
