"""What a user is offered (the tools dispatch would let them call, in the LLM's tool formats),
and what staff see of every tool (its inventory row).

The same predicates as dispatch's steps (``permissions.denials`` for ``authorize``,
``dispatch.failed_toolsets`` for ``make_ready``) in the same tool session a call from here would
run in, so the catalog never offers what dispatch would refuse, on any surface and with or
without a server loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from ..access.approvals import policy_for
from ..access.caches import access_for
from ..access.permissions import explain
from ..access.requirements import required_permissions
from ..core.declaration import AssistantTool
from ..core.lifecycle import ToolSession, process_session
from ..core.registry import TokenCeiling, ToolRegistry, registry
from .execution import failed_toolsets


def visible_tools(
    user: Any,
    *,
    session: ToolSession | None = None,
    site: ToolRegistry = registry,
    ceiling: TokenCeiling | None = None,
) -> list[AssistantTool]:
    """The tools this user may call (in this tool session, or where a call from here would run;
    under a token's ceiling), in order."""
    allowed = [
        tool for tool in access_for(user).allowed(site) if ceiling is None or ceiling.allows(tool)
    ]
    failed = failed_toolsets({tool.toolset for tool in allowed}, session)
    return [tool for tool in allowed if tool.toolset not in failed]


def hidden_reasons(
    user: Any, tools: Iterable[AssistantTool], *, session: ToolSession | None = None
) -> dict[str, tuple[str, ...]]:
    """Each tool's reasons for being hidden from ``user`` (none: visible), as ``visible_tools`` judges."""
    explained = explain(user, tools)
    failed = failed_toolsets({tool.toolset for tool, why in explained if not why}, session)
    return {
        tool.operation: why
        or (
            (f"its toolset {tool.toolset.name} failed to start ({failed[tool.toolset]})",)
            if tool.toolset is not None and tool.toolset in failed
            else ()
        )
        for tool, why in explained
    }


def get_catalog(
    user: Any,
    *,
    style: Literal["openai", "anthropic"] = "openai",
    session: ToolSession | None = None,
    site: ToolRegistry = registry,
    ceiling: TokenCeiling | None = None,
) -> list[dict[str, Any]]:
    """The LLM-ready tool list for this user (OpenAI or Anthropic tool format)."""
    tools = visible_tools(user, session=session, site=site, ceiling=ceiling)
    if style == "anthropic":
        return [tool.anthropic_spec() for tool in tools]
    return [tool.openai_spec() for tool in tools]


def inventory_row(tool: AssistantTool) -> dict[str, Any]:
    """One tool as the inventory (command and admin page) shows it: what it is, who may use it."""
    return {
        "operation": tool.operation,
        "domain": tool.domain,
        "risk_level": tool.risk_level.value,
        "requires_confirmation": tool.requires_confirmation,
        "approval_policy": policy_for(tool).policy,  # as configured now (APPROVAL_POLICIES)
        "public": tool.public,
        "permissions": list(required_permissions(tool)),
        "permission_mode": tool.permission_mode,
        "object_check": list(tool.object_check) if tool.object_check else None,
        "timeout": tool.timeout,
        "toolset": tool.toolset.name if tool.toolset else None,
        "lifecycle": _lifecycle(tool),
        "module": tool.module,
    }


def _lifecycle(tool: AssistantTool) -> str:
    """How the tool's resources live: per chat session, per process, per call, or no lifecycle."""
    if tool.toolset is None:
        return "none"
    if tool.toolset.scope == "process":
        session = process_session()
        state = session.state(tool.toolset) if session is not None else None
        return f"process ({state or 'not started'})"
    if tool.toolset.scope == "call":
        return "per call (starts for each call, holds nothing between calls)"
    return "per session (starts with each chat connection)"
