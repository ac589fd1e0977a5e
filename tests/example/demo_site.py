"""The demo app's tools in a registry of their own: the test settings do not install the demo."""

from __future__ import annotations

import importlib
import sys

import assistant.core.lifecycle as lifecycle_module
import assistant.core.registry as registry_module
from assistant.core.registry import ToolRegistry


def demo_registry() -> ToolRegistry:
    """Import ``demo.assistant_tools`` with its declarations going into a fresh registry."""
    site = ToolRegistry("demo")
    original = registry_module.registry
    # the default registry, as the decorator and @register_toolset find it
    registry_module.registry = lifecycle_module.registry = site
    try:
        sys.modules.pop("demo.assistant_tools", None)
        importlib.import_module("demo.assistant_tools")
    finally:
        registry_module.registry = lifecycle_module.registry = original
    return site


DEMO = demo_registry()
