"""A validation task sees what its owner may view now, and goes with its owner; staff over REST
are audited as in the admin; a job finishing into a conversation deleted meanwhile."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm

from assistant import jobs as jobs_module
from assistant.jobs import execute_job, reap_stale_jobs
from assistant.models import AuditEntry, Conversation, Job, Message, ValidationRun, ValidationTask
from assistant.validation import ValidationTaskService, run_due_validations
from tests.clients import API, client_for
from tests.testapp.models import Order
from tests.validations import findings
from tests.validations import orders as orders  # a fixture

TASKS_ADMIN = "/admin/assistant/validationtask/"
RUNS_ADMIN = "/admin/assistant/validationrun/"


def seen(run: ValidationRun) -> set[str]:
    """The records a run's findings name."""
    return {target for _, target, _, _ in findings(run) if target}


def rest_task_of(author: Any, **payload: Any) -> ValidationTask:
    """A task made over REST by ``author`` (who becomes its owner)."""
    body = {"target": "testapp.Order", "rules": ["test_reference_has_prefix"], **payload}
    created = client_for(author).post(f"{API}/validation-tasks/", body, format="json")
    assert created.status_code == 201, created.json()
    return ValidationTask.objects.get(pk=created.json()["id"])


# -- a task goes with its owner ---------------------------------------------------------------


@pytest.mark.django_db
def test_a_shared_task_whose_owner_was_deleted_does_not_validate_records_they_never_saw(
    author, make_user, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", author, orders[1])  # the author sees ORD-2 only
    task = rest_task_of(author)
    colleague = make_user("colleague")  # may view no order at all
    for action in ("view", "run"):
        assign_perm(f"assistant.{action}_validationtask", colleague, task)
    client = client_for(colleague)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"{API}/validation-tasks/{task.pk}/run/")
    assert seen(ValidationRun.objects.get()) == {"ORD-2"}  # as designed, while the author exists

    author.delete()  # the task acted as its owner: it goes with them

    response = client.post(f"{API}/validation-tasks/{task.pk}/run/")
    assert response.status_code == 404, response.json()
    assert not ValidationTask.objects.filter(pk=task.pk).exists()
    assert client.get(f"{API}/validation-runs/").json()["results"] == []


@pytest.mark.django_db
def test_a_scheduled_task_whose_owner_was_deleted_does_not_start_validating_everything(
    author, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", author, orders[1])
    task = rest_task_of(author, schedule=3600)
    author.delete()
    ValidationTask.objects.filter(pk=task.pk).update(next_run_at=task.created_at)  # due now

    with django_capture_on_commit_callbacks(execute=True):
        started = run_due_validations()

    for run in started:
        run.refresh_from_db()
        assert seen(run) <= {"ORD-2"}, f"the ownerless task validated {seen(run)}"


# -- staff make tasks of their own in the admin --------------------------------------------------


@pytest.fixture
def task_staff(make_user: Callable[..., Any]) -> Any:
    """Staff who manage validation tasks and read their runs, but may view no order."""
    return make_user(
        "taskstaff",
        "assistant.add_validationtask",
        "assistant.change_validationtask",
        "assistant.view_validationtask",
        "assistant.run_validationtask",
        "assistant.view_validationrun",
        is_staff=True,
    )


@pytest.mark.django_db
def test_staff_who_may_not_view_orders_cannot_validate_them_through_an_admin_made_task(
    task_staff, orders, django_capture_on_commit_callbacks
):
    client = client_for(task_staff, Client)
    added = client.post(
        f"{TASKS_ADMIN}add/",
        {
            "name": "All orders",
            "owner": "",  # blank is allowed: the task then sees every record
            "target_type": ContentType.objects.get_for_model(Order).pk,
            "target_id": "",
            "target_filter": "{}",
            "rules": '["test_reference_has_prefix"]',
            "schedule": "none",
            "interval_seconds": "",
            "cron": "",
            "enabled": "on",
        },
    )
    task = ValidationTask.objects.filter(name="All orders").first()
    if task is None:  # refused: what should happen
        assert added.status_code == 200
        return
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"{TASKS_ADMIN}{task.pk}/run/")
    run = ValidationRun.objects.get(task=task)
    page = client.get(f"{RUNS_ADMIN}{run.pk}/change/").content.decode()

    assert not {"ORD-1", "bad-3"} & seen(run), f"the task validated {seen(run)}"
    assert "bad-3" not in page


# -- a deactivated owner's task sees nothing -----------------------------------------------------


@pytest.mark.django_db
def test_a_task_of_a_deactivated_owner_validates_nothing(
    author, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", author, orders[1])
    task = rest_task_of(author)
    author.is_active = False
    author.save()
    assert not author.has_perm("testapp.view_order", orders[1])  # Django: an inactive user may not

    with django_capture_on_commit_callbacks(execute=True):  # the scheduler, or a colleague's run
        run = ValidationTaskService.trigger_run(task, ValidationRun.Trigger.SCHEDULE)
    run.refresh_from_db()

    assert seen(run) == set(), "a task sees what its owner may view now"


# -- staff actions over REST are audited as in the admin ----------------------------------------


@pytest.mark.django_db
def test_staff_cancelling_someone_elses_job_over_rest_is_audited_as_in_the_admin(
    make_user, diagnostician
):
    job = Job.objects.create(
        operation="start_job",
        function="tests.testapp.jobs.wait_for_cancel",
        user=diagnostician,
        status=Job.Status.RUNNING,
    )
    operator = make_user("operator", "assistant.view_job", "assistant.change_job", is_staff=True)

    response = client_for(operator).post(f"{API}/jobs/{job.pk}/cancel/")

    assert response.status_code == 200, response.json()
    assert Job.objects.get(pk=job.pk).cancel_requested is True
    entry = AuditEntry.objects.filter(operation="cancel_job").first()
    assert entry is not None, "the admin's Cancel writes an audit entry; REST's cancel writes none"
    assert (entry.username, entry.entities) == ("operator", {"job": str(job.pk)})


@pytest.mark.django_db
def test_running_a_task_over_rest_is_audited_as_the_admins_run_now_is(
    make_user, orders, django_capture_on_commit_callbacks
):
    operator = make_user(
        "operator", "assistant.view_validationtask", "assistant.run_validationtask", is_staff=True
    )
    task = rest_task_of(make_user("author", "assistant.add_validationtask", "testapp.view_order"))

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(operator).post(f"{API}/validation-tasks/{task.pk}/run/")

    assert response.status_code == 202, response.json()
    entry = AuditEntry.objects.filter(operation="validation_run").first()
    assert entry is not None, "the admin's Run now writes an audit entry; REST's run writes none"
    assert entry.entities == {"task": task.pk, "run": response.json()["id"]}


# -- a job finishing while its conversation is deleted ------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_conversation_is_deleted_as_it_finishes_ends_without_an_integrity_error(
    diagnostician, monkeypatch
):
    conversation = Conversation.objects.create(user=diagnostician, title="jobs")
    job = Job.objects.create(
        operation="start_job",
        function="tests.testapp.jobs.count_orders",
        args=[1],
        user=diagnostician,
        conversation=conversation,
    )
    finish = Job.finish

    def finish_then_conversation_deleted(self: Job, *args: Any, **kwargs: Any) -> bool:
        won = finish(self, *args, **kwargs)
        Conversation.objects.filter(pk=conversation.pk).delete()  # a DELETE from another request
        return won

    monkeypatch.setattr(Job, "finish", finish_then_conversation_deleted)

    assert execute_job(str(job.pk)) == "succeeded"  # raises IntegrityError today

    job.refresh_from_db()
    assert (job.status, job.conversation_id, job.completion_message_id) == ("succeeded", None, None)
    assert not Message.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_queued_job_whose_conversation_is_being_deleted_is_no_500(
    diagnostician, monkeypatch
):
    conversation = Conversation.objects.create(user=diagnostician, title="jobs")
    job = Job.objects.create(
        operation="start_job",
        function="tests.testapp.jobs.count_orders",
        user=diagnostician,
        conversation=conversation,
    )
    request_cancel = Job.request_cancel

    def cancel_then_conversation_deleted(self: Job) -> bool:
        asked = request_cancel(self)
        Conversation.objects.filter(pk=conversation.pk).delete()
        return asked

    monkeypatch.setattr(Job, "request_cancel", cancel_then_conversation_deleted)

    response = client_for(diagnostician).post(f"{API}/jobs/{job.pk}/cancel/")

    assert Job.objects.get(pk=job.pk).status == Job.Status.CANCELLED  # the cancel took effect
    assert response.status_code == 200  # yet the answer is a 500 today


@pytest.mark.django_db(transaction=True)
def test_the_reaper_reaps_a_job_whose_conversation_is_deleted_meanwhile_and_the_rest(
    diagnostician, monkeypatch
):
    beat = timezone.now() - dt.timedelta(seconds=3600)
    conversation = Conversation.objects.create(user=diagnostician, title="jobs")
    stale = [
        Job.objects.create(
            operation="start_job",
            function="tests.testapp.jobs.wait_for_cancel",
            user=diagnostician,
            conversation=conversation,
            status=Job.Status.RUNNING,
            started_at=beat,
            heartbeat_at=beat,
        )
        for _ in range(2)
    ]
    fail_task_result = jobs_module._fail_task_result

    def fail_then_conversation_deleted(job: Job) -> None:
        fail_task_result(job)
        Conversation.objects.filter(pk=conversation.pk).delete()

    monkeypatch.setattr(jobs_module, "_fail_task_result", fail_then_conversation_deleted)

    reaped = reap_stale_jobs(stale_after=60)  # raises IntegrityError today

    assert {job.pk for job in reaped} == {job.pk for job in stale}
    assert set(Job.objects.values_list("status", flat=True)) == {Job.Status.FAILED}
