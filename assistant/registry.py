"""Deprecated alias of ``assistant.core.registry``, kept for one release."""

import warnings
from typing import Any

from .core import registry as _moved
from .core.registry import *  # noqa: F403  (the names type checkers see at the old path)

warnings.warn(
    "assistant.registry moved to assistant.core.registry; import from there (or from assistant). "
    "The old path goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """The old module's names, then the registry object's (importing this rebinds ``assistant.registry``)."""
    try:
        return getattr(_moved, name)
    except AttributeError:
        return getattr(_moved.registry, name)
