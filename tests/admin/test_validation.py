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
from tests.admin.pages import RUNS, TASKS, inline_rows, page_text, result_rows, strip_tags
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
    assert "Started 1 run." in page_text(response)
    assert_ran_and_audited(access_task, superuser)


def assert_ran_and_audited(task: ValidationTask, user: Any) -> ValidationRun:
    """The task ran once (its one rule failed), started by ``user``, audited as an admin action."""
    run = ValidationRun.objects.get(task=task)
    assert (run.status, run.passed, run.failed, run.warned) == ("failed", 0, 1, 0)
    assert (run.triggered_by, run.triggered_by_user) == ("user", user)
    entry = AuditEntry.objects.get(operation="validation_run")
    assert (entry.source, entry.decision, entry.domain, entry.username) == (
        "admin",
        "executed",
        "validation",
        user.get_username(),
    )
    assert entry.entities == {"task": task.pk, "run": run.pk}
    return run


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
    ] == [("r", "warned", "look here"), ("r", "passed", "all good")]  # what needs a look first


def run_now_url(task: ValidationTask) -> str:
    return f"{TASKS}{task.pk}/run/"


def test_the_task_page_offers_run_now_to_those_who_may_run_it(
    admin_client: Client, auditor: Any, access_task: ValidationTask
) -> None:
    page = admin_client.get(f"{TASKS}{access_task.pk}/change/").content.decode()
    without = client_for(auditor, Client).get(f"{TASKS}{access_task.pk}/change/")

    form = re.search(
        r'<form method="post" action="([^"]+)" class="run-now">(.*?)</form>', page, re.S
    )
    assert form is not None
    assert form.group(1) == run_now_url(access_task)
    assert 'name="csrfmiddlewaretoken"' in form.group(2)
    assert '<button type="submit">Run now</button>' in form.group(2)
    assert without.status_code == 200
    assert "run-now" not in without.content.decode()


def test_run_now_on_the_task_page_runs_it_audits_it_and_says_so(
    admin_client: Client,
    superuser: Any,
    access_task: ValidationTask,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(run_now_url(access_task), follow=True)

    run = assert_ran_and_audited(access_task, superuser)
    assert response.redirect_chain == [(f"{TASKS}{access_task.pk}/change/", 302)]
    assert f"Started run {run.pk} of “Access matrix”." in strip_tags(page_text(response))
    assert f'href="{RUNS}{run.pk}/change/"' in response.content.decode()


def test_run_now_refuses_staff_without_the_run_permission(
    auditor: Any, access_task: ValidationTask
) -> None:
    response = client_for(auditor, Client).post(run_now_url(access_task))

    assert response.status_code == 403
    assert not ValidationRun.objects.exists()
    assert not AuditEntry.objects.exists()


def test_run_now_lets_staff_run_a_task_they_hold_the_run_permission_for(
    make_user: Any, access_task: ValidationTask, django_capture_on_commit_callbacks: Any
) -> None:
    from guardian.shortcuts import assign_perm

    owner = make_user("owner", "assistant.view_validationtask", is_staff=True)
    other = ValidationTaskService.create_task(name="Other", target="testapp.Order")
    assign_perm("assistant.run_validationtask", owner, access_task)
    client = client_for(owner, Client)

    with django_capture_on_commit_callbacks(execute=True):
        allowed = client.post(run_now_url(access_task))
    refused = client.post(run_now_url(other))

    assert (allowed.status_code, refused.status_code) == (302, 403)
    assert list(ValidationRun.objects.values_list("task__name", "triggered_by_user__username")) == [
        ("Access matrix", "owner")
    ]


def test_run_now_takes_a_post_with_the_csrf_token_only(
    superuser: Any, access_task: ValidationTask
) -> None:
    client = client_for(superuser, Client, enforce_csrf_checks=True)

    fetched = client.get(run_now_url(access_task))
    forged = client.post(run_now_url(access_task))

    assert (fetched.status_code, forged.status_code) == (405, 403)
    assert not ValidationRun.objects.exists()


def test_run_now_for_an_unknown_task_is_not_found(admin_client: Client) -> None:
    assert admin_client.post(f"{TASKS}999999/run/").status_code == 404
    assert not ValidationRun.objects.exists()


def test_a_runs_findings_list_failures_first_and_filter_by_outcome(
    admin_client: Client, access_task: ValidationTask
) -> None:
    run = ValidationRun.objects.create(
        task=access_task, status="failed", passed=1, failed=1, warned=1
    )
    for outcome, message in [("pass", "fine"), ("warn", "hmm"), ("fail", "broken")]:
        ValidationFinding.objects.create(run=run, rule="r", outcome=outcome, message=message)
    page = f"{RUNS}{run.pk}/change/"

    def shown(query: str) -> list[str]:
        return [row["message"] for row in inline_rows(admin_client.get(page + query), "findings")]

    assert shown("") == ["broken", "hmm", "fine"]
    assert shown("?outcome=fail") == ["broken"]
    assert shown("?outcome=warn") == ["hmm"]
    assert shown("?outcome=nonsense") == ["broken", "hmm", "fine"]
    links = strip_tags(page_text(admin_client.get(page + "?outcome=fail")))
    assert "Findings, failures first: all · failed (1) · warned (1) · passed (1)" in links
    assert (
        'href="?outcome=fail" aria-current="page"'
        in admin_client.get(page + "?outcome=fail").content.decode()
    )
