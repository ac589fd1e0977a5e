"""Deprecated alias of ``assistant.access.approvals``, kept for one release."""

import sys
import warnings

from .access import approvals as _moved
from .access.approvals import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.approvals moved to assistant.access.approvals; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
