"""Deprecated alias of ``assistant.dispatch.catalog``, kept for one release."""

import sys
import warnings

from .dispatch import catalog as _moved
from .dispatch.catalog import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.catalog moved to assistant.dispatch.catalog; import from there (or from assistant). "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved  # the same module object: one state, one set of names
