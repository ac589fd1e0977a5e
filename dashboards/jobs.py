"""The background work of the dashboard tools, run by a worker (``manage.py db_worker``)."""

from __future__ import annotations

import copy
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from assistant import ToolResult
from assistant.jobs import JobContext

from .archive import archive_content, store_backup
from .documentation import document
from .models import Dashboard, Environment


def pause() -> None:
    """A beat between steps, so people watching the demo see the progress move (0 in tests)."""
    seconds = float(getattr(settings, "DASHBOARDS_JOB_PAUSE", 0.0))
    if seconds > 0:
        time.sleep(seconds)


def remapped_database(dashboard: Dashboard, target: Environment) -> str:
    """The connection a dashboard queries in ``target``: the target's, unless it had its own."""
    if not dashboard.database or dashboard.database == dashboard.environment.database:
        return target.database
    return dashboard.database


def _user(user_id: int | None) -> Any:
    if user_id is None:
        return None
    return get_user_model()._default_manager.filter(pk=user_id).first()


# -- deploy -------------------------------------------------------------------------------------


def deploy_dashboard(job: JobContext, dashboard_id: int, target_id: int) -> ToolResult:
    """Copy one dashboard into the target environment (created, or updated in place)."""
    source = (
        Dashboard.objects.select_related("environment", "owner").filter(pk=dashboard_id).first()
    )
    if source is None:
        raise LookupError(f"dashboard #{dashboard_id} no longer exists")
    target = Environment.objects.get(pk=target_id)
    charts = list(source.charts)
    steps = len(charts) + 2
    job.report(100 / steps / 2, f"checking {source.title} v{source.version}")
    pause()
    for index, chart in enumerate(charts, 1):
        title = chart.get("title") if isinstance(chart, dict) else None
        job.report(100 * index / steps, f"copying chart {index} of {len(charts)}: {title or '?'}")
        pause()
    database = remapped_database(source, target)
    job.report(100 * (steps - 1) / steps, f"remapping {source.database or '-'} → {database}")
    pause()
    with transaction.atomic():
        existing = (
            Dashboard.objects.select_for_update()
            .filter(environment=target, slug=source.slug)
            .first()
        )
        previous = existing.version if existing is not None else None
        deployed = existing or Dashboard(environment=target, slug=source.slug)
        deployed.title = source.title
        deployed.description = source.description
        deployed.owner = source.owner
        deployed.charts = copy.deepcopy(charts)
        deployed.database = database
        deployed.version = source.version
        deployed.published = True
        deployed.save()
    job.report(100, f"deployed to {target.name}")
    was = f"replacing v{previous}" if previous is not None else "new there"
    return ToolResult(
        text=(
            f"Deployed {source.title} v{source.version} from {source.environment.name} to "
            f"{target.name} as #{deployed.pk} ({was}); it queries {database}."
        ),
        data={
            "dashboard": deployed.pk,
            "source": source.pk,
            "environment": target.slug,
            "version": deployed.version,
            "previous_version": previous,
            "database": database,
        },
    )


# -- migration ----------------------------------------------------------------------------------


def migration_plan(dashboards: list[Dashboard], target: Environment) -> list[dict[str, Any]]:
    """What moving these dashboards into ``target`` would change, one entry per dashboard."""
    existing = {
        dashboard.slug: dashboard
        for dashboard in Dashboard.objects.filter(
            environment=target, slug__in=[dashboard.slug for dashboard in dashboards]
        )
    }
    plan = []
    for dashboard in dashboards:
        replaced = existing.get(dashboard.slug)
        plan.append(
            {
                "id": dashboard.pk,
                "slug": dashboard.slug,
                "title": dashboard.title,
                "from": dashboard.environment.slug,
                "to": target.slug,
                "action": "replace" if replaced is not None else "move",
                "replaces": replaced.pk if replaced is not None else None,
                "database": [dashboard.database, remapped_database(dashboard, target)],
            }
        )
    return plan


def describe_plan(plan: list[dict[str, Any]]) -> list[str]:
    lines = []
    for step in plan:
        old, new = step["database"]
        database = f"database {old or '-'} → {new}" if old != new else f"keeps database {new}"
        what = f"replaces #{step['replaces']}" if step["action"] == "replace" else "moves"
        lines.append(f"#{step['id']} {step['title']}: {what} in {step['to']}, {database}")
    return lines


def migrate_dashboards(job: JobContext, dashboard_ids: list[int], target_id: int) -> ToolResult:
    """Move dashboards into the target environment, remapping their database connection."""
    target = Environment.objects.get(pk=target_id)
    done: list[dict[str, Any]] = []
    total = len(dashboard_ids)
    for index, dashboard_id in enumerate(dashboard_ids, 1):
        with transaction.atomic():
            dashboard = (
                Dashboard.objects.select_for_update()
                .select_related("environment")
                .filter(pk=dashboard_id)
                .first()
            )
            if dashboard is None or dashboard.environment_id == target.pk:
                continue
            (step,) = migration_plan([dashboard], target)
            database = step["database"][1]
            if step["replaces"] is not None:
                # The target keeps its row (and the permissions granted on it); the moved
                # dashboard's content replaces it.
                replaced = Dashboard.objects.select_for_update().get(pk=step["replaces"])
                for name in ("title", "description", "owner", "charts", "version", "published"):
                    setattr(replaced, name, getattr(dashboard, name))
                replaced.database = database
                replaced.save()
                dashboard.delete()
            else:
                dashboard.environment = target
                dashboard.database = database
                dashboard.save(update_fields=["environment", "database", "updated_at"])
            done.append(step)
        job.report(100 * index / total, f"{index} of {total}: {step['title']}")
        pause()
    lines = describe_plan(done)
    return ToolResult(
        text=f"Migrated {len(done)} dashboards to {target.name}:\n" + "\n".join(lines)
        if done
        else f"Nothing to migrate to {target.name}.",
        data={"environment": target.slug, "migrated": done},
    )


# -- backup -------------------------------------------------------------------------------------


def back_up_environment(job: JobContext, environment_id: int, user_id: int | None) -> ToolResult:
    """Archive every dashboard of the environment to one file in Django storage."""
    environment = Environment.objects.get(pk=environment_id)
    dashboards = list(
        Dashboard.objects.filter(environment=environment).select_related("owner").order_by("slug")
    )
    collected = []
    for index, dashboard in enumerate(dashboards, 1):
        collected.append(dashboard)
        job.report(90 * index / max(len(dashboards), 1), f"archived {dashboard.slug}")
        pause()
    user = _user(user_id)
    content = archive_content(environment, collected, user)
    job.report(95, "writing the archive")
    backup = store_backup(environment, content, len(collected), user)
    job.report(100, f"backup #{backup.pk} written")
    return ToolResult(
        text=(
            f"Backup #{backup.pk} of {environment.name}: {backup.dashboard_count} dashboards, "
            f"{backup.size} bytes, sha256 {backup.sha256[:12]}…; restore it with "
            f"`manage.py restore_dashboards {backup.pk}`."
        ),
        data={
            "backup": backup.pk,
            "environment": environment.slug,
            "file": backup.file.name,
            "size": backup.size,
            "sha256": backup.sha256,
            "dashboards": backup.dashboard_count,
        },
    )


# -- documentation ------------------------------------------------------------------------------


def documentation_url(dashboard: Dashboard) -> str:
    """Where people read it: the project's page for it, or the admin where that is not routed."""
    try:
        return reverse("dashboards:documentation", args=[dashboard.pk])
    except NoReverseMatch:
        return reverse("admin:dashboards_dashboard_change", args=[dashboard.pk])


def write_documentation(job: JobContext, dashboard_id: int) -> ToolResult:
    """Have the configured LLM (or, without one, a labelled template) document one dashboard."""
    dashboard = Dashboard.objects.select_related("environment", "owner").get(pk=dashboard_id)
    job.report(10, f"reading {len(dashboard.charts)} charts of {dashboard.title}")
    pause()
    markdown, source = document(dashboard)
    job.report(90, "storing the documentation")
    Dashboard.objects.filter(pk=dashboard.pk).update(
        documentation=markdown, documentation_source=source, documented_at=timezone.now()
    )
    job.report(100, "documented")
    if source.startswith("llm:"):
        by = f"written by {source[4:]}"
    elif source == "template":
        by = "a template summary (no LLM is configured)"
    else:
        by = "a template summary (the LLM failed)"
    url = documentation_url(dashboard)
    return ToolResult(
        text=(
            f"Documentation for #{dashboard.pk} {dashboard.title} is ready, {by}: "
            f"{len(markdown)} characters, at {url}."
        ),
        data={"dashboard": dashboard.pk, "source": source, "markdown": markdown, "url": url},
    )
