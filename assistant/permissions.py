"""Deprecated alias of ``assistant.access.permissions``, kept for one release."""

import sys
import warnings

from .access import permissions as _moved
from .access.permissions import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.permissions moved to assistant.access.permissions; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
