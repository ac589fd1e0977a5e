"""Old import paths kept for one release: each warns once, then answers with the new module."""

import sys
import warnings
from importlib import import_module
from types import ModuleType


def moved(
    old: str, new: str, *, hint: str = "import from there", replace: bool = True
) -> ModuleType:
    """Warn the importer of ``old`` that it moved to ``new``; by default ``old`` becomes ``new``."""
    warnings.warn(
        f"{old} moved to {new}; {hint}. The old path goes in the next release.",
        DeprecationWarning,
        stacklevel=3,  # past this function and the alias's body: the module that imported it
    )
    module = import_module(new)
    if replace:  # the same module object under both names: one state, one set of names
        sys.modules[old] = module
    return module
