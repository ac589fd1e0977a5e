"""Deprecated alias of ``assistant.turns.planners``, kept for one release."""

from typing import Any

from .._moved import moved
from ..turns.planners import *  # noqa: F403  (the names type checkers see at the old path)

# the package stays itself, so that its submodules (aliases too) are found here
_new = moved(__name__, "assistant.turns.planners", replace=False)


def __getattr__(name: str) -> Any:
    """Whatever the new package holds, private names included."""
    return getattr(_new, name)
