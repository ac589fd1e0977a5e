"""What a user is offered: the tools dispatch would let them call, in the LLM's tool formats.

The same predicates as dispatch's steps (``permissions.denials`` for ``authorize``, the failed
toolsets for ``make_ready``) and the same tool session a call from here would run in, so the
catalog never offers what dispatch would refuse, on any surface.
"""

from __future__ import annotations

from typing import Any, Literal

from .dispatch import failed_toolsets
from .lifecycle import ToolSession
from .permissions import access_for, denials
from .registry import AssistantTool, ToolRegistry, registry


def visible_tools(
    user: Any, *, session: ToolSession | None = None, site: ToolRegistry = registry
) -> list[AssistantTool]:
    """The tools this user may call (in this tool session, or the process's), in order."""
    failed = failed_toolsets(session)
    access = access_for(user)
    return [
        tool
        for tool in site
        if not (failed and tool.toolset in failed) and not denials(access, tool)
    ]


def get_catalog(
    user: Any,
    *,
    style: Literal["openai", "anthropic"] = "openai",
    session: ToolSession | None = None,
    site: ToolRegistry = registry,
) -> list[dict[str, Any]]:
    """The LLM-ready tool list for this user (OpenAI or Anthropic tool format)."""
    tools = visible_tools(user, session=session, site=site)
    if style == "anthropic":
        return [tool.anthropic_spec() for tool in tools]
    return [tool.openai_spec() for tool in tools]
