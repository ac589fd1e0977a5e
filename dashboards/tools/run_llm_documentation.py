"""``run_llm_documentation``: Markdown documentation for a dashboard, written in the background."""

from __future__ import annotations

from typing import Annotated

from assistant import ToolCall, ToolResult, assistant_tool

from ..jobs import write_documentation
from ..references import (
    AmbiguousReference,
    DashboardReference,
    EnvironmentName,
    resolve_dashboard,
    resolve_environment,
)


@assistant_tool(
    operation="run_llm_documentation",
    domain="dashboards",
    description=(
        "Write Markdown documentation for a dashboard with the configured LLM (a clearly "
        "labelled template summary when none is configured), stored with the dashboard"
    ),
    risk_level="guarded",
    permission_checks=[("dashboards", "DOCUMENT")],
    keywords=["document dashboard", "write documentation", "documentation", "document"],
    background=True,
)
def run_llm_documentation(
    call: ToolCall,
    dashboard: Annotated[DashboardReference, "the dashboard's id, slug or part of its title"],
    environment: Annotated[
        EnvironmentName | None, "the environment it is in, if the name is ambiguous"
    ] = None,
) -> ToolResult:
    env = resolve_environment(environment) if environment else None
    try:
        found = resolve_dashboard(call.user, dashboard, environment=env)
    except AmbiguousReference as ambiguous:
        return ambiguous.reply()
    job = call.jobs.enqueue(write_documentation, found.pk)
    return ToolResult(
        text=f"Writing the documentation of #{found.pk} {found.title}.",
        task_id=str(job.pk),
        data={"dashboard": found.pk, "job": str(job.pk)},
    )
