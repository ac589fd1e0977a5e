"""django-ops-assistant: a chat assistant whose every operation is one ``@assistant_tool`` declaration.

The names in ``__all__`` are the public API (stable, deprecated for a release before they move);
every module is internal and may move. The door, ``dispatch``/``adispatch``, is imported from
``assistant.dispatch``: that name is the package here.
"""

from typing import TYPE_CHECKING, Any

from .core.cancellation import CancellationToken
from .core.declaration import AssistantTool
from .core.entities import Length, Range
from .core.lifecycle import ToolLifecycleState, Toolset, register_toolset
from .core.registry import Prepared, ToolCall, ToolRegistry, ToolResult, assistant_tool, registry
from .exceptions import (
    AssistantError,
    Cancelled,
    InvalidEntities,
    PermissionDenied,
    ToolDefinitionError,
    UnknownOperation,
)
from .signals import action_decided, tool_called, turn_finished

if TYPE_CHECKING:
    from .dispatch.calls import CallContext, Outcome
    from .dispatch.catalog import get_catalog, visible_tools

__version__ = "0.1.0"

__all__ = [
    "AssistantError",
    "AssistantTool",
    "CallContext",
    "CancellationToken",
    "Cancelled",
    "InvalidEntities",
    "Length",
    "Outcome",
    "PermissionDenied",
    "Prepared",
    "Range",
    "ToolCall",
    "ToolDefinitionError",
    "ToolLifecycleState",
    "ToolRegistry",
    "ToolResult",
    "Toolset",
    "UnknownOperation",
    "action_decided",
    "assistant_tool",
    "get_catalog",
    "register_toolset",
    "registry",
    "tool_called",
    "turn_finished",
    "visible_tools",
]

# Names whose modules import the ORM models: loaded on first use, so that ``import assistant``
# (from settings, before the app registry is ready) never imports a model.
_LAZY = {
    "CallContext": "assistant.dispatch.calls",
    "Outcome": "assistant.dispatch.calls",
    "get_catalog": "assistant.dispatch.catalog",
    "visible_tools": "assistant.dispatch.catalog",
}


def __getattr__(name: str) -> Any:
    """A lazily exported name, imported from its module on first use."""
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'assistant' has no attribute {name!r}")
