"""``create_branch``: a new branch of the dashboards repository, from a given base."""

from __future__ import annotations

from typing import Annotated

from assistant import Length, ToolCall, ToolResult, assistant_tool

from .. import repository


@assistant_tool(
    operation="create_branch",
    domain="dashboards",
    description="Create a branch in the dashboards-as-code git repository from a base branch",
    risk_level="guarded",
    permission_checks=[("dashboards", "COMMIT")],
    keywords=["create branch", "new branch"],
)
def create_branch(
    call: ToolCall,
    name: Annotated[str, "the new branch's name, e.g. feature-x", Length(min=1, max=200)],
    base: Annotated[str, "the branch it starts from", Length(max=200)] = repository.DEFAULT_BRANCH,
) -> ToolResult:
    commit = repository.create_branch(name, base, call.user)
    name = name.strip()
    return ToolResult(
        text=f"Created branch {name} from {base.strip()} at {commit[:12]}.",
        actions=[{"type": "branch_created", "branch": name, "commit": commit}],
        data={"branch": name, "base": base.strip(), "commit": commit},
    )
