"""django-assistant: a chat assistant whose every operation is one ``@assistant_tool`` declaration."""

from .exceptions import AssistantError
from .registry import AssistantTool, ToolCall, ToolResult, assistant_tool

__all__ = ["AssistantError", "AssistantTool", "ToolCall", "ToolResult", "assistant_tool"]
