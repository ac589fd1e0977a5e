"""Deprecated alias of ``assistant.turns.turn``, kept for one release."""

import sys
import warnings

from .turns import turn as _moved
from .turns.turn import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.turn moved to assistant.turns.turn; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
