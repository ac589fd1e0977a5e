"""The reaper ends django-tasks-db's own row of a job it failed, not only the job."""

from __future__ import annotations

import datetime as dt
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from assistant.jobs import run_job
from assistant.models import Job
from tests.race_jobs import DATABASE_BACKEND


def silent_job(user: Any, *, task_result_id: str) -> Job:
    beat = timezone.now() - dt.timedelta(seconds=120)
    return Job.objects.create(
        operation="start_job",
        function="tests.testapp.jobs.wait_for_cancel",
        user=user,
        status=Job.Status.RUNNING,
        worker="worker-host:4242:MainThread",
        started_at=beat,
        heartbeat_at=beat,
        task_result_id=task_result_id,
    )


@pytest.fixture
def task_row(settings: Any, db: None) -> DBTaskResult:
    """A task row as a worker leaves it when it dies mid-job: claimed, never finished."""
    settings.TASKS = DATABASE_BACKEND
    result = run_job.enqueue("00000000-0000-0000-0000-000000000001")
    row = DBTaskResult.objects.get(pk=result.id)
    row.claim("worker-host:4242")
    return row


@pytest.mark.django_db
def test_the_reaper_fails_the_task_row_of_a_job_it_failed(make_user, task_row):
    job = silent_job(make_user("owner"), task_result_id=str(task_row.pk))

    call_command("assistant_reap_jobs", stdout=StringIO())

    task_row.refresh_from_db()
    assert task_row.status == "FAILED"
    assert task_row.finished_at is not None
    assert task_row.traceback == "The worker stopped responding (no heartbeat for 60 s)."
    (error,) = task_row.task_result.errors
    assert error.exception_class.__name__ == "WorkerLost"
    assert Job.objects.get(pk=job.pk).status == "failed"


@pytest.mark.django_db
def test_a_dry_run_leaves_the_task_row_running(make_user, task_row):
    silent_job(make_user("owner"), task_result_id=str(task_row.pk))

    call_command("assistant_reap_jobs", "--dry-run", stdout=StringIO())

    task_row.refresh_from_db()
    assert (task_row.status, task_row.finished_at) == ("RUNNING", None)


@pytest.mark.django_db
def test_a_job_whose_task_row_is_not_a_database_row_is_still_reaped(make_user):
    job = silent_job(make_user("owner"), task_result_id="not-a-uuid")

    call_command("assistant_reap_jobs", stdout=StringIO())

    assert Job.objects.get(pk=job.pk).status == "failed"
