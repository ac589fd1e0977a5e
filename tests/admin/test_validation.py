"""The validation admins: running a task now, its pass-rate chart, a run's findings."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from assistant.models import AuditEntry, ValidationFinding, ValidationRun, ValidationTask
from assistant.validation import ValidationTaskService
from tests.admin.pages import RUNS, TASKS, inline_rows, page_text, result_rows
from tests.clients import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def access_task() -> ValidationTask:
    """A task whose one rule fails: it expects a role that does not exist."""
    return ValidationTaskService.create_task(
        name="Access matrix",
        target="testapp.Order",
        rules=[{"name": "tool_access_matrix", "options": {"roles": {"ghosts": []}}}],
    )


def test_run_now_runs_the_task_and_audits_it(
    admin_client: Client,
    superuser: Any,
    access_task: ValidationTask,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            TASKS, {"action": "run_now", "_selected_action": [access_task.pk]}, follow=True
        )

    assert response.redirect_chain == [(TASKS, 302)]
    assert "Started 1 run(s)." in page_text(response)
    run = ValidationRun.objects.get(task=access_task)
    assert (run.status, run.passed, run.failed, run.warned) == ("failed", 0, 1, 0)
    assert (run.triggered_by, run.triggered_by_user) == ("user", superuser)
    entry = AuditEntry.objects.get(operation="validation_run")
    assert (entry.source, entry.decision, entry.domain, entry.username) == (
        "admin",
        "executed",
        "validation",
        "root",
    )
    assert entry.entities == {"task": access_task.pk, "run": run.pk}


def test_staff_without_the_run_permission_are_not_offered_run_now(
    auditor: Any, access_task: ValidationTask
) -> None:
    client = client_for(auditor, Client)

    page = client.get(TASKS).content.decode()
    posted = client.post(TASKS, {"action": "run_now", "_selected_action": [access_task.pk]})

    assert "run_now" not in page
    assert posted.status_code == 200
    assert not ValidationRun.objects.exists()
    assert not AuditEntry.objects.exists()


def test_the_task_page_charts_the_pass_rate_of_its_finished_runs(
    admin_client: Client, access_task: ValidationTask
) -> None:
    start = timezone.now() - timedelta(hours=1)
    made = [
        ("passed", 3, 0, 0),
        ("failed", 1, 1, 0),
        ("warned", 0, 0, 2),
        ("errored", 0, 0, 0),
        ("running", 0, 0, 0),
        ("queued", 0, 0, 0),
    ]
    runs = [
        ValidationRun.objects.create(
            task=access_task,
            status=status,
            passed=passed,
            failed=failed,
            warned=warned,
            created_at=start + timedelta(minutes=index),
        )
        for index, (status, passed, failed, warned) in enumerate(made)
    ]

    page = admin_client.get(f"{TASKS}{access_task.pk}/change/").content.decode()

    chart = re.search(r'<svg width="(\d+)" height="64"[^>]*>(.*?)</svg>', page, re.S)
    assert chart is not None
    bars = re.findall(r'<rect [^>]*fill="([^"]+)"><title>([^<]+)</title></rect>', chart.group(2))
    assert bars == [
        ("#127a3c", f"run {runs[0].pk}: 100%"),
        ("#9a6700", f"run {runs[1].pk}: 50%"),
        ("#b42318", f"run {runs[2].pk}: 0%"),
        ("#b42318", f"run {runs[3].pk}: 0%"),
    ]
    assert chart.group(1) == str(4 * 14)


def test_a_task_without_finished_runs_says_so(
    admin_client: Client, access_task: ValidationTask
) -> None:
    ValidationRun.objects.create(task=access_task, status="queued")

    page = page_text(admin_client.get(f"{TASKS}{access_task.pk}/change/"))

    assert "No finished runs yet." in page
    assert 'aria-label="pass rate per run"' not in page


def test_a_run_shows_its_counts_and_findings(
    admin_client: Client, access_task: ValidationTask
) -> None:
    run = ValidationRun.objects.create(task=access_task, status="warned", passed=1, warned=1)
    ValidationFinding.objects.create(run=run, rule="r", outcome="pass", message="all good")
    ValidationFinding.objects.create(run=run, rule="r", outcome="warn", message="look here")

    (row,) = result_rows(admin_client.get(RUNS))
    detail = admin_client.get(f"{RUNS}{run.pk}/change/")

    assert [row.text(field) for field in ("coloured_status", "passed", "failed", "warned")] == [
        "warned",
        "1",
        "0",
        "1",
    ]
    assert "background:#9a6700" in row.cells["coloured_status"]
    assert [
        (finding["rule"], finding["coloured_outcome"], finding["message"])
        for finding in inline_rows(detail, "findings")
    ] == [("r", "passed", "all good"), ("r", "warned", "look here")]
