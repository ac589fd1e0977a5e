"""run_backup, run_llm_documentation and get_health_summary over REST: what they store, who may
run them, and the LLM's part in the documentation."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm

from assistant.models import Job
from dashboards.models import Backup, Dashboard
from tests.audit_trail import decisions
from tests.example.dashboard_calls import REFUSED, assert_progressed, dispatch, job_of, state
from tests.example.dashboards_world import World
from tests.openai_peer import error as llm_error
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.openai_peer import text as llm_text

pytestmark = pytest.mark.django_db


# -- run_backup -----------------------------------------------------------------------------


def test_backup_archives_the_environment_to_storage_with_its_checksum(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        response = dispatch(world.operator, "run_backup", environment="staging")

    assert response.status_code == 200
    body = response.json()
    job = job_of(response)
    assert body["decision"] == "executed"
    assert body["text"] == "Backing up Staging's 11 dashboards."  # (the job's id is task_id)
    backup = Backup.objects.get()
    assert (job.status, job.progress) == ("succeeded", 100)
    assert job.result == (
        f"Backup #{backup.pk} of Staging: 11 dashboards, {backup.size} bytes, sha256 "
        f"{backup.sha256[:12]}…; restore it with `manage.py restore_dashboards {backup.pk}`."
    )
    content = (world.media / backup.file.name).read_bytes()
    assert (backup.size, backup.sha256) == (len(content), hashlib.sha256(content).hexdigest())
    assert backup.file.name.startswith("dashboard-backups/staging/staging-")
    assert (backup.created_by, backup.dashboard_count, backup.environment.slug) == (
        world.operator,
        11,
        "staging",
    )
    archived = json.loads(content)
    assert archived["format"] == "dashboards-backup/1"
    assert len(archived["dashboards"]) == 11
    assert_progressed(progress, "run_backup")
    assert decisions("run_backup") == ["executed"]


def test_restore_dashboards_puts_the_environment_back_as_it_was(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        dispatch(world.operator, "run_backup", environment="staging")
    backup = Backup.objects.get()
    as_backed_up = state()["dashboards"]
    staging = world.env("staging")
    world.dashboard("web-traffic", "staging").delete()
    changed = world.dashboard("sales-overview", "staging")
    changed.title, changed.charts = "Changed", []
    changed.save()
    Dashboard.objects.create(environment=staging, slug="extra", title="Extra")
    out = StringIO()

    call_command("restore_dashboards", str(backup.pk), "--dry-run", stdout=out)

    assert out.getvalue().splitlines()[0] == (
        f"Would restore Staging from backup #{backup.pk}: 1 created, 1 updated, 1 deleted, "
        "9 unchanged."
    )
    assert Dashboard.objects.filter(slug="extra").exists()

    call_command("restore_dashboards", str(backup.pk), stdout=StringIO())

    restored = state()["dashboards"]
    assert not Dashboard.objects.filter(slug="extra").exists()
    # web-traffic came back with a new id; everything else is as backed up
    assert sorted(row[1:] for row in restored) == sorted(row[1:] for row in as_backed_up)


def test_restore_refuses_a_damaged_or_unknown_backup(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        dispatch(world.operator, "run_backup", environment="dev")
    backup = Backup.objects.get()
    (world.media / backup.file.name).write_bytes(b'{"format": "dashboards-backup/1"}')
    before = state()

    with pytest.raises(CommandError, match="does not match its size and checksum"):
        call_command("restore_dashboards", str(backup.pk))
    with pytest.raises(CommandError, match="No backup #999"):
        call_command("restore_dashboards", "999")
    assert state() == before


def test_the_operator_may_not_back_up_production(world: World) -> None:
    before = state()

    response = dispatch(world.operator, "run_backup", environment="prod")

    assert response.status_code == 403
    assert response.json()["detail"] == "You may not change the Production environment."
    assert decisions("run_backup") == ["denied"]
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_backup_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "run_backup", environment="dev")

    assert response.status_code == REFUSED[who]
    assert decisions("run_backup") == ["denied"]
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        (
            {"environment": "qa"},
            {"environment": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        ({}, {"environment": "required"}),
    ],
    ids=["unknown", "missing"],
)
def test_backup_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = dispatch(world.operator, "run_backup", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert state() == before


# -- run_llm_documentation ------------------------------------------------------------------


def test_without_an_llm_the_documentation_is_a_labelled_template(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    dashboard = world.dashboard("hiring-pipeline", "dev")

    with run_jobs():
        response = dispatch(
            world.operator, "run_llm_documentation", dashboard="hiring", environment="dev"
        )

    assert response.json()["decision"] == "executed"
    job = job_of(response)
    assert job.status == "succeeded"
    dashboard.refresh_from_db()
    assert dashboard.documentation.startswith(
        "> **Template summary — no language model is configured.** This page was assembled"
    )
    assert "# Hiring pipeline" in dashboard.documentation
    assert "SELECT stage, count(*) FROM candidates GROUP BY stage" in dashboard.documentation
    assert (dashboard.documentation_source, dashboard.documented_at is not None) == (
        "template",
        True,
    )
    assert "a template summary (no LLM is configured)" in job.result
    assert job.result_data["url"] == f"/admin/dashboards/dashboard/{dashboard.pk}/change/"
    assert_progressed(progress, "run_llm_documentation")


def test_the_configured_llm_writes_the_documentation(
    world: World, settings: Any, openai_peer: Any, run_jobs: Callable[[], Any]
) -> None:
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "doc-model", "TIMEOUT": 5},
    }
    openai_peer.script(llm_text("# Sales overview\n\nRevenue, month by month."))
    dashboard = world.dashboard("sales-overview", "prod")

    with run_jobs():
        response = dispatch(world.admin, "run_llm_documentation", dashboard=str(dashboard.pk))

    assert job_of(response).status == "succeeded"
    dashboard.refresh_from_db()
    assert dashboard.documentation == "# Sales overview\n\nRevenue, month by month.\n"
    assert dashboard.documentation_source == "llm:doc-model"
    (request,) = openai_peer.requests
    assert request["model"] == "doc-model"
    assert "SELECT avg(total) FROM orders" in request["messages"][0]["content"]


def test_a_failing_llm_still_documents_and_says_so(
    world: World, settings: Any, openai_peer: Any, run_jobs: Callable[[], Any]
) -> None:
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "doc-model", "TIMEOUT": 5},
    }
    openai_peer.script(llm_error(500, "down"))
    dashboard = world.dashboard("web-traffic", "prod")

    with run_jobs():
        response = dispatch(world.admin, "run_llm_documentation", dashboard=str(dashboard.pk))

    job = job_of(response)
    dashboard.refresh_from_db()
    assert dashboard.documentation.startswith(
        "> **Template summary — the language model failed (InternalServerError).**"
    )
    assert "a template summary (the LLM failed)" in job.result


def test_the_stored_documentation_is_viewable_by_those_who_may_view_the_dashboard(
    world: World, settings: Any, run_jobs: Callable[[], Any]
) -> None:
    settings.ROOT_URLCONF = "config.urls"
    granted = world.dashboard("sales-overview", "prod")
    hidden = world.dashboard("sales-pipeline", "prod")
    with run_jobs():
        for dashboard in (granted, hidden):
            response = dispatch(world.admin, "run_llm_documentation", dashboard=str(dashboard.pk))
    assert job_of(response).result_data["url"] == f"/dashboards/{hidden.pk}/documentation/"
    viewer = Client()
    viewer.force_login(world.viewer)

    page = viewer.get(f"/dashboards/{granted.pk}/documentation/")

    assert page.status_code == 200
    assert page["Content-Type"] == "text/plain; charset=utf-8"
    assert page.content.decode().startswith("> **Template summary")
    assert viewer.get(f"/dashboards/{hidden.pk}/documentation/").status_code == 404


def test_documenting_a_dashboard_the_user_may_not_view_looks_like_a_missing_one(
    world: World, make_user: Any
) -> None:
    writer = make_user("writer", "dashboards.document_dashboard")
    assign_perm("dashboards.view_dashboard", writer, world.dashboard("web-traffic", "dev"))
    writer = world.fresh(writer)
    hidden = world.dashboard("finance-kpis", "dev")
    before = state()

    by_id = dispatch(writer, "run_llm_documentation", dashboard=str(hidden.pk))
    missing = dispatch(writer, "run_llm_documentation", dashboard="999999")

    assert by_id.status_code == missing.status_code == 400
    assert by_id.json()["errors"] == {
        "dashboard": f"no dashboard you may view matches '{hidden.pk}'"
    }
    assert state() == before


def test_documentation_asks_which_dashboard_when_the_name_is_ambiguous(world: World) -> None:
    before = state()

    response = dispatch(world.operator, "run_llm_documentation", dashboard="overview")

    assert response.json()["data"]["ambiguous"] == "dashboard"
    assert len(response.json()["data"]["candidates"]) == 3
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_documentation_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "run_llm_documentation", dashboard="web-traffic")

    assert response.status_code == REFUSED[who]
    assert decisions("run_llm_documentation") == ["denied"]
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        ({"dashboard": "   "}, {"dashboard": "name a dashboard by its id, slug or title"}),
        (
            {"dashboard": "web", "environment": "qa"},
            {"environment": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        ({"dashboard": 3}, {"dashboard": "expected a string"}),
    ],
    ids=["blank", "unknown-environment", "not-a-string"],
)
def test_documentation_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = dispatch(world.operator, "run_llm_documentation", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert state() == before


# -- get_health_summary ---------------------------------------------------------------------


def test_the_health_summary_covers_every_part(world: World) -> None:
    Job.objects.create(
        operation="run_backup",
        function="x.y",
        status="failed",
        error="Boom\ntrace",
        finished_at=timezone.now(),
    )

    response = dispatch(world.operator, "get_health_summary")

    assert response.status_code == 200
    data = response.json()["data"]
    assert data["database"]["ok"] is True
    assert data["channel_layer"] == {
        "ok": True,
        "backend": "InMemoryChannelLayer",
        "latency_ms": data["channel_layer"]["latency_ms"],
        "detail": "round trip ok",
    }
    assert data["jobs"]["failed_last_24h"] == 1
    assert data["jobs"]["recent_failures"][0]["error"] == "Boom"
    assert [
        (row["environment"], row["dashboards"], row["published"]) for row in data["dashboards"]
    ] == [
        ("dev", 13, 0),
        ("staging", 11, 11),
        ("prod", 7, 7),
    ]
    assert data["status"] == "attention"
    assert data["problems"] == ["1 jobs failed in the last 24 h"]
    lines = response.json()["text"].splitlines()
    assert lines[0] == "Needs attention: 1 jobs failed in the last 24 h."
    assert (
        lines[-1]
        == "Dashboards: dev 13 (0 published), staging 11 (11 published), prod 7 (7 published)"
    )


def test_the_health_summary_shows_the_latest_validation_and_live_workers(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        dispatch(world.operator, "run_llm_validation", target="dashboards.Dashboard")
    Job.objects.create(
        operation="deploy_dashboard",
        function="x.y",
        status="running",
        worker="host:1:MainThread",
        heartbeat_at=timezone.now(),
    )

    data = dispatch(world.operator, "get_health_summary").json()["data"]

    assert data["workers"]["live"] == ["host:1:MainThread"]
    (run,) = data["validation"]
    assert (run["status"], run["failed"]) == ("failed", 11)
    assert "the latest validation run failed" in data["problems"]


def test_the_health_summary_says_what_it_can_see_of_workers(world: World) -> None:
    # A worker finished a job an hour ago and now waits for the next: idle, it leaves no trace.
    hour_ago = timezone.now() - timedelta(hours=1)
    Job.objects.create(
        operation="run_backup",
        function="x.y",
        status="succeeded",
        worker="host:1:MainThread",
        started_at=hour_ago,
        finished_at=hour_ago,
    )

    idle = dispatch(world.operator, "get_health_summary").json()["text"].splitlines()
    Job.objects.create(
        operation="deploy_dashboard",
        function="x.y",
        status="running",
        worker="host:1:MainThread",
        started_at=timezone.now(),
        heartbeat_at=timezone.now(),
    )
    busy = dispatch(world.operator, "get_health_summary").json()["text"].splitlines()

    assert idle[0] == "All healthy."
    assert idle[3] == "Workers: none busy now (an idle worker leaves no trace), 1 seen in 24 h"
    assert busy[0] == "All healthy."
    assert busy[3] == "Workers: 1 busy now, 1 seen in 24 h"


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_the_health_summary_is_refused_to_users_without_the_permission(
    world: World, who: str
) -> None:
    response = dispatch(getattr(world, who), "get_health_summary")

    assert response.status_code == 404  # (neither has a part in its domain: as if missing)
    assert decisions("get_health_summary") == ["denied"]


def test_the_health_summary_takes_no_entities(world: World) -> None:
    response = dispatch(world.operator, "get_health_summary", verbose=True)

    assert response.status_code == 400
    assert response.json()["errors"] == {"verbose": "unknown entity"}
    assert decisions("get_health_summary") == ["invalid"]
