"""django-ops-assistant: a chat assistant whose every operation is one ``@assistant_tool`` declaration."""

__version__ = "0.1.0"

from .core.cancellation import CancellationToken
from .core.entities import Length, Range
from .core.lifecycle import ToolLifecycleState, Toolset, register_toolset
from .core.registry import AssistantTool, Prepared, ToolCall, ToolResult, assistant_tool
from .exceptions import AssistantError

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
