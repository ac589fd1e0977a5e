"""Deprecated alias of ``assistant.turns.planners.llm``, kept for one release."""

import sys
import warnings

from ..turns.planners import llm as _moved
from ..turns.planners.llm import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.planner.llm moved to assistant.turns.planners.llm; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
