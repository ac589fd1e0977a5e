"""The job admin: its list and the audited cancel action."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from assistant.models import AuditEntry, Job
from tests.admin.pages import JOBS, page_text, result_rows
from tests.clients import client_for

pytestmark = pytest.mark.django_db


def job(status: str, **fields: Any) -> Job:
    return Job.objects.create(
        operation="start_job", function="tests.testapp.jobs.count_orders", status=status, **fields
    )


def test_cancel_stops_a_queued_job_and_asks_a_running_one_to_stop(
    admin_client: Client,
) -> None:
    queued, running = job("queued"), job("running", started_at=timezone.now())
    finished = job("succeeded")

    response = admin_client.post(
        JOBS,
        {"action": "cancel_jobs", "_selected_action": [queued.pk, running.pk]},
        follow=True,
    )

    assert response.redirect_chain == [(JOBS, 302)]
    assert "Asked 2 jobs to stop." in page_text(response)
    queued.refresh_from_db()
    running.refresh_from_db()
    finished.refresh_from_db()
    assert (queued.status, queued.cancel_requested) == ("cancelled", True)
    assert queued.finished_at is not None
    assert (running.status, running.cancel_requested) == ("running", True)
    assert (finished.status, finished.cancel_requested) == ("succeeded", False)


def test_cancelling_jobs_is_audited_as_an_admin_action(
    admin_client: Client, superuser: Any
) -> None:
    queued, running = job("queued"), job("running")

    admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [queued.pk, running.pk]})

    entries = AuditEntry.objects.filter(operation="cancel_job").order_by("id")
    assert [
        (entry.source, entry.decision, entry.domain, entry.username, entry.user_id)
        for entry in entries
    ] == [("admin", "executed", "jobs", "root", superuser.pk)] * 2
    assert sorted(entry.entities["job"] for entry in entries) == sorted(
        [str(queued.pk), str(running.pk)]
    )
    assert {entry.request_ip for entry in entries} == {"127.0.0.1"}


def test_staff_who_may_only_view_jobs_are_not_offered_cancel(helpdesk: Any) -> None:
    queued = job("queued")
    client = client_for(helpdesk, Client)

    page = client.get(JOBS).content.decode()
    posted = client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [queued.pk]})

    assert "cancel_jobs" not in page
    assert posted.status_code == 200
    queued.refresh_from_db()
    assert (queued.status, queued.cancel_requested) == ("queued", False)
    assert not AuditEntry.objects.filter(operation="cancel_job").exists()


def test_the_job_list_shows_status_progress_and_error(admin_client: Client) -> None:
    failed = job(
        "failed",
        progress=40,
        error="RuntimeError: boom\nTraceback (most recent call last): ...",
        started_at=timezone.now() - timedelta(seconds=3),
        finished_at=timezone.now(),
    )

    (row,) = result_rows(admin_client.get(JOBS))

    assert row.link == f"{JOBS}{failed.pk}/change/"
    assert row.text("coloured_status") == "failed"
    assert '<progress max="100" value="40"></progress> 40%' in row.cells["progress_bar"]
    assert row.text("duration") == "3.0 s"
    assert row.text("short_error") == "RuntimeError: boom"
