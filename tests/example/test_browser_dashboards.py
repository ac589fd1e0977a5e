"""A realistic session on the dashboards domain in Debian's chromium, driven by Playwright against
the live ASGI server: search, back up staging, deploy to prod after approving, read the task's
status, validate, read the health summary — with a screenshot at every step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.models import AuditEntry, Job, ValidationRun
from dashboards.models import Backup
from tests.browsing import approve, screenshots, send
from tests.example.dashboard_pages import DESKTOP, idle, reply, tool_card
from tests.example.dashboards_world import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


screenshot = screenshots("dashboards-")


def job_card(page: Page, job: Job) -> Any:
    return page.locator(f"#j-{job.pk}")


def test_an_admins_session_on_the_dashboards(
    open_chat: Callable[[Any], Page], world: World
) -> None:
    target = world.dashboard("sales-overview", "prod")
    page = open_chat(world.admin, **DESKTOP)

    # 1. search
    send(page, 'search dashboards "sales"')
    expect(reply(page, "6 dashboards matching “sales”:")).to_be_visible()
    expect(reply(page, f"#{target.pk} Sales overview — prod, v1")).to_be_visible()
    expect(tool_card(page, "search_dashboards").locator(".badge")).to_have_text("executed")
    idle(page)
    screenshot(page, "1-search")

    # 2. back up staging: a job, with its card
    send(page, 'back up "staging"')
    expect(reply(page, "Backing up Staging's 11 dashboards.")).to_be_visible()
    backup_job = Job.objects.get(operation="run_backup")
    expect(job_card(page, backup_job).locator(".badge")).to_have_text("succeeded")
    expect(job_card(page, backup_job).locator(".job-message")).to_contain_text("Backup #")
    idle(page)
    screenshot(page, "2-backup")
    backup = Backup.objects.get()
    assert (backup.environment.slug, backup.dashboard_count) == ("staging", 11)

    # 3. deploy a dashboard to prod: it waits for approval, then runs as a job
    send(page, "deploy dashboard=sales-overview source=staging target=prod")
    approval = page.locator(".approval")
    expect(approval).to_contain_text(
        "Deploy Sales overview v2 from Staging to Production, replacing v1"
    )
    expect(tool_card(page, "deploy_dashboard").locator(".badge")).to_have_text(
        "confirmation requested"
    )
    screenshot(page, "3-deploy-approval")
    target.refresh_from_db()
    assert target.version == 1
    assert not Job.objects.filter(operation="deploy_dashboard").exists()

    approve(page, approval)

    expect(reply(page, "Deploying #")).to_be_visible()
    expect(tool_card(page, "deploy_dashboard").locator(".badge")).to_have_text("confirmed")
    deploy_job = Job.objects.get(operation="deploy_dashboard")
    expect(approval).to_have_count(0)
    idle(page)

    # 4. the task's status: the job card follows it to the end
    card = job_card(page, deploy_job)
    expect(card.locator(".badge")).to_have_text("succeeded")
    expect(card.locator("progress")).to_have_attribute("value", "100")
    expect(card.locator(".job-message")).to_contain_text(
        "Deployed Sales overview v2 from Staging to Production"
    )
    screenshot(page, "4-deployed")
    target.refresh_from_db()
    assert (target.version, target.database) == (2, "prod_warehouse")
    assert list(
        AuditEntry.objects.filter(operation="deploy_dashboard")
        .order_by("pk")
        .values_list("decision", flat=True)
    ) == ["confirmation_requested", "confirmed"]

    # 5. validate the dashboards: the seeded defects are found
    send(page, "validate 'dashboards.Dashboard'")
    expect(reply(page, "Validation task ")).to_be_visible()
    run = ValidationRun.objects.get()
    assert run.job is not None
    expect(job_card(page, run.job).locator(".job-message")).to_contain_text(
        "failed — 82 passed, 11 failed, 31 warned."
    )
    idle(page)
    screenshot(page, "5-validated")

    # 6. the health summary
    send(page, "health summary")
    expect(reply(page, "Needs attention: the latest validation run failed.")).to_be_visible()
    expect(reply(page, "Database: ok")).to_be_visible()
    expect(reply(page, "Channel layer: ok (InMemoryChannelLayer")).to_be_visible()
    expect(
        reply(
            page,
            "Dashboards: dev 13 (0 published), staging 11 (11 published), prod 7 (7 published)",
        )
    ).to_be_visible()
    idle(page)
    screenshot(page, "6-health")


def test_asking_for_a_tasks_status_by_its_id(
    open_chat: Callable[[Any], Page], world: World
) -> None:
    page = open_chat(world.operator, **DESKTOP)
    send(page, 'back up "dev"')
    expect(reply(page, "Backing up Development's")).to_be_visible()
    job = Job.objects.get(operation="run_backup")
    idle(page)

    send(page, f'what\'s the status of task "{job.pk}"')

    expect(reply(page, "Run backup succeeded: Backup #")).to_be_visible(timeout=3_000)
    screenshot(page, "task-status")
