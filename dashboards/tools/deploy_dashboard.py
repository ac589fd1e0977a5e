"""``deploy_dashboard``: copy a dashboard into another environment, as a job with progress."""

from __future__ import annotations

from typing import Annotated

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.exceptions import InvalidEntities

from ..jobs import deploy_dashboard as deploy_job
from ..references import (
    AmbiguousReference,
    DashboardReference,
    EnvironmentName,
    require,
    resolve_dashboard,
    resolve_environment,
)


@assistant_tool(
    operation="deploy_dashboard",
    domain="dashboards",
    description=(
        "Deploy (copy) a dashboard, named by id, slug or title, to a target environment in the "
        "background; needs change permission on the target"
    ),
    risk_level="dangerous",
    requires_confirmation=True,
    permission_checks=[("dashboards", "DEPLOY")],
    keywords=["deploy dashboard", "deploy", "promote dashboard", "promote"],
)
def deploy_dashboard(
    call: ToolCall,
    dashboard: Annotated[DashboardReference, "the dashboard's id, slug or part of its title"],
    target: Annotated[
        EnvironmentName, "the environment to deploy to (slug or name: dev, staging, prod)"
    ],
    source: Annotated[
        EnvironmentName | None, "the environment the dashboard is in, if the name is ambiguous"
    ] = None,
) -> ToolResult:
    to = resolve_environment(target, "target")
    origin = resolve_environment(source, "source") if source else None
    require(call.user, "change", to)
    try:
        found = resolve_dashboard(call.user, dashboard, environment=origin)
    except AmbiguousReference as ambiguous:
        return ambiguous.reply()
    if found.environment_id == to.pk:
        raise InvalidEntities({"target": f"#{found.pk} {found.title} is already in {to.name}"})
    job = call.jobs.enqueue(deploy_job, found.pk, to.pk)
    return ToolResult(
        text=(
            f"Deploying #{found.pk} {found.title} v{found.version} from "
            f"{found.environment.name} to {to.name} (task {job.pk})."
        ),
        task_id=str(job.pk),
        data={"dashboard": found.pk, "target": to.slug, "job": str(job.pk)},
    )
