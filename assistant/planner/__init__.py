"""Deprecated alias of ``assistant.turns.planners``, kept for one release."""

import warnings
from typing import Any

from ..turns import planners as _moved
from ..turns.planners import *  # noqa: F403  (the names type checkers see at the old path)

# The package stays itself (its submodules are aliases too); names are looked up in the new one.
warnings.warn(
    "assistant.planner moved to assistant.turns.planners; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """Whatever the new package holds, private names included."""
    return getattr(_moved, name)
