"""``deploy_dashboard``: copy a dashboard into another environment, as a job with progress."""

from __future__ import annotations

from typing import Annotated

from assistant import Prepared, ToolCall, ToolResult, assistant_tool
from assistant.exceptions import InvalidEntities

from ..jobs import deploy_dashboard as deploy_job
from ..jobs import remapped_database
from ..models import Dashboard, Environment
from ..references import (
    AmbiguousReference,
    DashboardReference,
    EnvironmentName,
    require,
    resolve_dashboard,
    resolve_environment,
)


def resolved(
    call: ToolCall, dashboard: str, target: str, source: str | None
) -> tuple[Dashboard, Environment]:
    """The dashboard and the target environment, checked as the deployment needs them."""
    to = resolve_environment(target, "target")
    origin = resolve_environment(source, "source") if source else None
    require(call.user, "change", to)
    found = resolve_dashboard(call.user, dashboard, environment=origin)
    if found.environment_id == to.pk:
        raise InvalidEntities({"target": f"#{found.pk} {found.title} is already in {to.name}"})
    return found, to


def prepare(
    call: ToolCall, dashboard: str, target: str, source: str | None = None
) -> Prepared | ToolResult:
    """Before anyone is asked: which dashboard, may it go there, and what it replaces."""
    try:
        found, to = resolved(call, dashboard, target, source)
    except AmbiguousReference as ambiguous:
        return ambiguous.reply()
    existing = Dashboard.objects.filter(environment=to, slug=found.slug).first()
    was = f"replacing v{existing.version}" if existing is not None else "new there"
    database = remapped_database(found, to)
    return Prepared(
        summary=(
            f"Deploy {found.title} v{found.version} from {found.environment.name} to "
            f"{to.name}, {was}"
        ),
        entities={"dashboard": str(found.pk), "target": to.slug, "source": found.environment.slug},
        preview={
            "kind": "changes",
            "rows": [
                {
                    "field": "version",
                    "before": existing.version if existing is not None else None,
                    "after": found.version,
                },
                {
                    "field": "database",
                    "before": existing.database if existing is not None else None,
                    "after": database,
                },
                {
                    "field": "charts",
                    "before": len(existing.charts) if existing is not None else None,
                    "after": len(found.charts),
                },
            ],
        },
        confirm_phrase=found.title,
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
    prepare=prepare,
    background=True,
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
    # prepare resolved the references (an id, slugs); checked again, as things may have moved
    found, to = resolved(call, dashboard, target, source)
    job = call.jobs.enqueue(deploy_job, found.pk, to.pk)
    return ToolResult(
        text=(
            f"Deploying #{found.pk} {found.title} v{found.version} from "
            f"{found.environment.name} to {to.name}."
        ),
        task_id=str(job.pk),
        data={"dashboard": found.pk, "target": to.slug, "job": str(job.pk)},
    )
