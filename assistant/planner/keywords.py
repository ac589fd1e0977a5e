"""Deprecated alias of ``assistant.turns.planners.keywords``, kept for one release."""

import sys
import warnings

from ..turns.planners import keywords as _moved
from ..turns.planners.keywords import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.planner.keywords moved to assistant.turns.planners.keywords; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
