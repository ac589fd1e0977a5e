"""django-assistant: a chat assistant whose every operation is one ``@assistant_tool`` declaration."""

from .entities import Length, Range
from .exceptions import AssistantError
from .lifecycle import CancellationToken, ToolLifecycleState, Toolset, register_toolset
from .registry import AssistantTool, ToolCall, ToolResult, assistant_tool

__all__ = [
    "AssistantError",
    "AssistantTool",
    "CancellationToken",
    "Length",
    "Range",
    "ToolCall",
    "ToolLifecycleState",
    "ToolResult",
    "Toolset",
    "assistant_tool",
    "register_toolset",
]
