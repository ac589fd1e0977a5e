"""Deprecated alias of ``assistant.core.storable``, kept for one release."""

import sys
import warnings

from .core import storable as _moved
from .core.storable import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.storable moved to assistant.core.storable; import from there. "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
