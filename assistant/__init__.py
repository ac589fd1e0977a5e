"""django-ops-assistant: a chat assistant whose every operation is one ``@assistant_tool`` declaration."""

__version__ = "0.1.0"

from .cancellation import CancellationToken
from .entities import Length, Range
from .exceptions import AssistantError
from .lifecycle import ToolLifecycleState, Toolset, register_toolset
from .registry import AssistantTool, Prepared, ToolCall, ToolResult, assistant_tool

__all__ = [
    "AssistantError",
    "AssistantTool",
    "CancellationToken",
    "Length",
    "Prepared",
    "Range",
    "ToolCall",
    "ToolLifecycleState",
    "ToolResult",
    "Toolset",
    "assistant_tool",
    "register_toolset",
]
