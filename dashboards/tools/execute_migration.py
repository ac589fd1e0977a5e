"""``execute_migration``: move dashboards between environments, remapping their database."""

from __future__ import annotations

from typing import Annotated

from assistant import Length, Prepared, ToolCall, ToolResult, assistant_tool
from assistant.exceptions import InvalidEntities

from ..jobs import describe_plan, migrate_dashboards, migration_plan
from ..models import Dashboard, Environment
from ..references import (
    AmbiguousReference,
    DashboardReference,
    EnvironmentName,
    require,
    resolve_dashboard,
    resolve_environment,
    visible_dashboards,
)


def chosen_dashboards(
    call: ToolCall, source: str, target: str, dashboards: list[str] | None
) -> tuple[Environment, Environment, list[Dashboard]]:
    """The two environments and the dashboards to move, checked as the migration needs them."""
    origin = resolve_environment(source, "source")
    to = resolve_environment(target, "target")
    if origin.pk == to.pk:
        raise InvalidEntities({"target": "must differ from the source environment"})
    require(call.user, "change", origin)
    require(call.user, "change", to)
    if not dashboards:
        return (
            origin,
            to,
            list(visible_dashboards(call.user).filter(environment=origin).order_by("slug")),
        )
    chosen: list[Dashboard] = []
    for reference in dashboards:
        found = resolve_dashboard(call.user, reference, environment=origin, entity="dashboards")
        if found not in chosen:
            chosen.append(found)
    return origin, to, chosen


def nothing_to_migrate(origin: Environment, dry_run: bool) -> ToolResult:
    return ToolResult(
        text=f"No dashboards you may view in {origin.name}: nothing to migrate.",
        data={"dry_run": dry_run, "plan": []},
    )


def prepare(
    call: ToolCall,
    source: str,
    target: str,
    dashboards: list[str] | None = None,
    dry_run: bool = False,
) -> Prepared | ToolResult:
    """Before anyone is asked: which dashboards move, and what each replaces or remaps."""
    try:
        origin, to, chosen = chosen_dashboards(call, source, target, dashboards)
    except AmbiguousReference as ambiguous:
        return ambiguous.reply()
    if not chosen:
        return nothing_to_migrate(origin, dry_run)
    plan = migration_plan(chosen, to)
    what = "List what moving" if dry_run else "Move"
    return Prepared(
        summary=(
            f"{what} {len(plan)} dashboards from {origin.name} to {to.name}"
            + (" (a dry run: nothing changes)" if dry_run else "")
        ),
        entities={
            "source": origin.slug,
            "target": to.slug,
            "dashboards": [str(step["id"]) for step in plan],
            "dry_run": dry_run,
        },
        preview={
            "kind": "rows",
            "columns": ["dashboard", "action", "database"],
            "rows": [
                [
                    f"#{step['id']} {step['title']}",
                    step["action"],
                    " → ".join(map(str, step["database"])),
                ]
                for step in plan
            ],
        },
        confirm_phrase="" if dry_run else to.name,
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
    prepare=prepare,
    background=True,
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
    # prepare resolved the references (ids, slugs); checked again, as things may have moved
    origin, to, chosen = chosen_dashboards(call, source, target, dashboards)
    if not chosen:
        return nothing_to_migrate(origin, dry_run)
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
        text=f"Migrating {len(plan)} dashboards from {origin.name} to {to.name}.",
        task_id=str(job.pk),
        data={"dry_run": False, "plan": plan, "job": str(job.pk)},
    )
