"""``show_capabilities``: the user's own catalog, grouped by domain (ADR-0008 step 1)."""

from __future__ import annotations

from itertools import groupby

from django.utils.translation import gettext

from ..access.approvals import policy_for
from ..core.lifecycle import ToolSession
from ..core.registry import ToolCall, ToolResult, assistant_tool
from ..dispatch.catalog import visible_tools


@assistant_tool(
    operation="show_capabilities",
    domain="assistant",
    description="List what the assistant can do for you, grouped by domain",
    risk_level="safe",
    public=True,
    keywords=["help", "capabilities", "what can you do", "tools"],
)
def show_capabilities(call: ToolCall) -> ToolResult:
    session = call.session if isinstance(call.session, ToolSession) else None
    tools = sorted(
        visible_tools(call.user, session=session, ceiling=call.ceiling),
        key=lambda tool: (tool.domain, tool.title),
    )
    lines = [gettext("Here is what I can do for you:")]
    data = []
    for domain, group in groupby(tools, key=lambda tool: tool.domain):
        lines.append(f"\n{domain.replace('_', ' ').capitalize()}\n")
        for tool in group:
            flag = gettext(" (asks for confirmation)") if policy_for(tool).asks else ""
            lines.append(f"- {tool.title}: {tool.description}{flag}")
            data.append(
                {
                    "operation": tool.operation,
                    "title": tool.title,
                    "domain": tool.domain,
                    "description": tool.description,
                    "risk_level": tool.risk_level.value,
                    "requires_confirmation": tool.requires_confirmation,
                }
            )
    return ToolResult(text="\n".join(lines), data=data)
