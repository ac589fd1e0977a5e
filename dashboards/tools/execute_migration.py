"""``execute_migration``: move dashboards between environments, remapping their database."""

from __future__ import annotations

from typing import Annotated

from assistant import Length, ToolCall, ToolResult, assistant_tool
from assistant.exceptions import InvalidEntities

from ..jobs import describe_plan, migrate_dashboards, migration_plan
from ..models import Dashboard
from ..references import (
    AmbiguousReference,
    DashboardReference,
    EnvironmentName,
    require,
    resolve_dashboard,
    resolve_environment,
    visible_dashboards,
)


@assistant_tool(
    operation="execute_migration",
    domain="dashboards",
    description=(
        "Move dashboards (all you may view, or the named ones) from one environment to another, "
        "remapping their database connection, in the background; dry_run=true only lists what "
        "would change"
    ),
    risk_level="dangerous",
    requires_confirmation=True,
    permission_checks=[("dashboards", "MIGRATE")],
    keywords=["execute migration", "migrate dashboards", "migration", "migrate"],
)
def execute_migration(
    call: ToolCall,
    source: Annotated[EnvironmentName, "the environment to move dashboards out of"],
    target: Annotated[EnvironmentName, "the environment to move them into"],
    dashboards: Annotated[
        list[DashboardReference] | None,
        "ids, slugs or titles; default: all in source",
        Length(max=500),
    ] = None,
    dry_run: Annotated[bool, "only list what would change"] = False,
) -> ToolResult:
    origin = resolve_environment(source, "source")
    to = resolve_environment(target, "target")
    if origin.pk == to.pk:
        raise InvalidEntities({"target": "must differ from the source environment"})
    require(call.user, "change", origin)
    require(call.user, "change", to)
    chosen: list[Dashboard] = []
    if dashboards:
        try:
            for reference in dashboards:
                found = resolve_dashboard(
                    call.user, reference, environment=origin, entity="dashboards"
                )
                if found not in chosen:
                    chosen.append(found)
        except AmbiguousReference as ambiguous:
            return ambiguous.reply()
    else:
        chosen = list(visible_dashboards(call.user).filter(environment=origin).order_by("slug"))
    if not chosen:
        return ToolResult(
            text=f"No dashboards you may view in {origin.name}: nothing to migrate.",
            data={"dry_run": dry_run, "plan": []},
        )
    plan = migration_plan(chosen, to)
    lines = describe_plan(plan)
    if dry_run:
        return ToolResult(
            text=(
                f"Dry run — migrating {len(plan)} dashboards from {origin.name} to {to.name} "
                "would change:\n" + "\n".join(lines) + "\nNothing was changed."
            ),
            data={"dry_run": True, "plan": plan},
        )
    job = call.jobs.enqueue(migrate_dashboards, [step["id"] for step in plan], to.pk)
    return ToolResult(
        text=(f"Migrating {len(plan)} dashboards from {origin.name} to {to.name} (task {job.pk})."),
        task_id=str(job.pk),
        data={"dry_run": False, "plan": plan, "job": str(job.pk)},
    )
