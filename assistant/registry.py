"""Deprecated alias of ``assistant.core.registry``, kept for one release."""

from typing import Any

from ._moved import moved
from .core.registry import *  # noqa: F403  (the names type checkers see at the old path)

_new = moved(
    __name__, "assistant.core.registry", hint="import from there or from assistant", replace=False
)


def __getattr__(name: str) -> Any:
    """The old module's names, then the registry object's (importing this rebinds ``assistant.registry``)."""
    try:
        return getattr(_new, name)
    except AttributeError:
        return getattr(_new.registry, name)
