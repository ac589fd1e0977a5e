"""``get_health_summary``: database, channel layer, workers, jobs, validation and dashboards at a glance."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import DatabaseError, connection
from django.db.models import Count, Min, Q
from django.utils import timezone

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.conf import assistant_settings
from assistant.models import Job, ValidationRun

from ..models import Environment

LAYER_TIMEOUT = 2.0  # seconds a channel-layer round trip may take


async def channel_layer_check() -> dict[str, Any]:
    """Send one message to a fresh channel of the configured layer and read it back."""
    layer = get_channel_layer()
    if layer is None:
        return {"ok": False, "backend": None, "detail": "no channel layer is configured"}
    backend = type(layer).__name__
    started = time.perf_counter()
    try:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "health.ping"})
        received = await asyncio.wait_for(layer.receive(channel), LAYER_TIMEOUT)
    except Exception as exc:  # a broken layer is exactly what this reports
        return {"ok": False, "backend": backend, "detail": f"{type(exc).__name__}: {exc}"[:200]}
    ok = received.get("type") == "health.ping"
    return {
        "ok": ok,
        "backend": backend,
        "latency_ms": round((time.perf_counter() - started) * 1000, 1),
        "detail": "round trip ok" if ok else "read back something else",
    }


def database_check() -> dict[str, Any]:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return {"ok": False, "vendor": connection.vendor, "detail": str(exc)[:200]}
    return {
        "ok": True,
        "vendor": connection.vendor,
        "latency_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def stored_facts() -> dict[str, Any]:
    """Everything the database knows: workers' heartbeats, the job backlog, validation, dashboards."""
    now = timezone.now()
    stale_after = assistant_settings.JOB_STALE_AFTER
    alive_since = now - timedelta(seconds=stale_after)
    day_ago = now - timedelta(hours=24)
    running = Job.objects.filter(status=Job.Status.RUNNING)
    live_workers = sorted(
        set(running.filter(heartbeat_at__gte=alive_since).values_list("worker", flat=True))
    )
    stale = running.filter(heartbeat_at__lt=alive_since).count()
    seen = (
        Job.objects.filter(started_at__gte=day_ago)
        .exclude(worker="")
        .values_list("worker", flat=True)
        .distinct()
        .count()
    )
    queued = Job.objects.filter(status=Job.Status.QUEUED).aggregate(
        count=Count("pk"), oldest=Min("created_at")
    )
    failures = list(
        Job.objects.filter(status=Job.Status.FAILED, finished_at__gte=day_ago)
        .order_by("-finished_at")
        .values("id", "operation", "error", "finished_at")[:5]
    )
    failed_count = Job.objects.filter(status=Job.Status.FAILED, finished_at__gte=day_ago).count()
    runs = [
        {
            "run": run.pk,
            "task": run.task.name,
            "status": run.status,
            "passed": run.passed,
            "failed": run.failed,
            "warned": run.warned,
            "finished_at": run.finished_at,
        }
        for run in ValidationRun.objects.select_related("task").order_by("-created_at")[:3]
    ]
    environments = [
        {
            "environment": env.slug,
            "name": env.name,
            "dashboards": env.total,
            "published": env.live,
            "production": env.is_production,
        }
        # GROUP BY drops Meta.ordering: restate it.
        for env in Environment.objects.annotate(
            total=Count("dashboards"),
            live=Count("dashboards", filter=Q(dashboards__published=True)),
        ).order_by("position", "name")
    ]
    return {
        "workers": {"live": live_workers, "stale_running_jobs": stale, "seen_last_24h": seen},
        "jobs": {
            "queued": queued["count"],
            "oldest_queued_seconds": (
                round((now - queued["oldest"]).total_seconds()) if queued["oldest"] else None
            ),
            "running": running.count(),
            "failed_last_24h": failed_count,
            "recent_failures": [
                {
                    "id": str(row["id"]),
                    "operation": row["operation"],
                    "error": (row["error"].splitlines() or [""])[0][:200],
                    "finished_at": row["finished_at"],
                }
                for row in failures
            ],
        },
        "validation": runs,
        "dashboards": environments,
        "database": database_check(),
    }


def problems_in(facts: dict[str, Any]) -> list[str]:
    problems = []
    if not facts["database"]["ok"]:
        problems.append("the database does not answer")
    if not facts["channel_layer"]["ok"]:
        problems.append("the channel layer does not answer")
    jobs, workers = facts["jobs"], facts["workers"]
    if workers["stale_running_jobs"]:
        problems.append(f"{workers['stale_running_jobs']} running jobs lost their worker")
    if jobs["queued"] and (jobs["oldest_queued_seconds"] or 0) > assistant_settings.JOB_STALE_AFTER:
        problems.append(f"{jobs['queued']} jobs wait for a worker")
    if jobs["failed_last_24h"]:
        problems.append(f"{jobs['failed_last_24h']} jobs failed in the last 24 h")
    latest = facts["validation"][0] if facts["validation"] else None
    if latest and latest["status"] in (ValidationRun.Status.FAILED, ValidationRun.Status.ERRORED):
        problems.append(f"the latest validation run {latest['status']}")
    return problems


def workers_line(workers: dict[str, Any]) -> str:
    """Only a worker running a job beats: an idle one is not "0 workers" beside "All healthy"."""
    busy = len(workers["live"])
    now = f"{busy} busy now" if busy else "none busy now (an idle worker leaves no trace)"
    stale = workers["stale_running_jobs"]
    return f"Workers: {now}, {workers['seen_last_24h']} seen in 24 h" + (
        f", {stale} stale" if stale else ""
    )


def summary_lines(facts: dict[str, Any]) -> list[str]:
    database, layer = facts["database"], facts["channel_layer"]
    workers, jobs = facts["workers"], facts["jobs"]
    lines = [
        f"Database: {'ok' if database['ok'] else 'DOWN'} ({database['vendor']}"
        + (f", {database['latency_ms']} ms)" if database["ok"] else f": {database['detail']})"),
        f"Channel layer: {'ok' if layer['ok'] else 'DOWN'} ({layer['backend'] or 'none'}"
        + (f", {layer['latency_ms']} ms)" if layer["ok"] else f": {layer['detail']})"),
        workers_line(workers),
        f"Jobs: {jobs['queued']} queued, {jobs['running']} running, "
        f"{jobs['failed_last_24h']} failed in the last 24 h",
    ]
    if facts["validation"]:
        lines.append("Latest validation runs:")
        lines += [
            f"  • {run['task']}: {run['status']} ({run['passed']} passed, {run['failed']} "
            f"failed, {run['warned']} warned)"
            for run in facts["validation"]
        ]
    else:
        lines.append("Latest validation runs: none yet")
    lines.append(
        "Dashboards: "
        + (
            ", ".join(
                f"{env['environment']} {env['dashboards']} ({env['published']} published)"
                for env in facts["dashboards"]
            )
            or "no environments"
        )
    )
    return lines


@assistant_tool(
    operation="get_health_summary",
    domain="operations",
    description=(
        "Health summary: database, channel layer, workers' heartbeats, job backlog and failures "
        "in the last 24 h, latest validation results, dashboards per environment"
    ),
    risk_level="safe",
    permission_checks=[("health", "READ")],
    keywords=["health summary", "health check", "system health", "health"],
)
async def get_health_summary(call: ToolCall) -> ToolResult:
    facts = await sync_to_async(stored_facts)()
    facts["channel_layer"] = await channel_layer_check()
    problems = problems_in(facts)
    facts["status"] = "ok" if not problems else "attention"
    facts["problems"] = problems
    head = "All healthy." if not problems else "Needs attention: " + "; ".join(problems) + "."
    return ToolResult(text="\n".join([head, *summary_lines(facts)]), data=facts)
