"""Deprecated alias of ``assistant.access.tokens``, kept for one release."""

import sys
import warnings

from .access import tokens as _moved
from .access.tokens import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.tokens moved to assistant.access.tokens; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
