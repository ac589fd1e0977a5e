"""Background jobs: enqueued from a handler, run once by a worker, reported, cancelled, reaped."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.signals import connection_created
from django.utils import timezone
from django_tasks_db.models import DBTaskResult
from rest_framework.test import APIClient

from assistant.cancellation import Cancelled
from assistant.dispatch import dispatch
from assistant.jobs import (
    JobContext,
    JobDefinitionError,
    JobManager,
    JobNotFound,
    cancel_job,
    execute_job,
    run_job,
)
from assistant.models import Conversation, Job, Message
from tests import race_jobs
from tests.race_jobs import DATABASE_BACKEND, Workers, eventually
from tests.testapp import jobs as testapp_jobs
from tests.testapp.models import Order

API = "/assistant/api"
WORKER_STARTS = 30  # seconds a db_worker process may take to start and run what is asked


@pytest.fixture
def diagnostician(make_user: Callable[..., Any]) -> Any:
    """May run ``start_job``."""
    return make_user("diagnostician", "assistant.diagnostics_run")


@pytest.fixture
def conversation(diagnostician: Any) -> Conversation:
    return Conversation.objects.create(user=diagnostician, title="jobs")


def start_job(user: Any, conversation: Conversation | None = None, **entities: Any) -> Any:
    """Dispatch the test app's ``start_job`` tool; returns the outcome and the job it made."""
    outcome = dispatch("start_job", entities, user=user, conversation=conversation)
    assert outcome.decision == "executed", outcome.text
    return outcome, Job.objects.get(pk=outcome.result.task_id)


def running_job(user: Any, conversation: Conversation | None, *, heartbeat_age: float) -> Job:
    """A job a worker claimed and last beat for ``heartbeat_age`` seconds ago."""
    beat = timezone.now() - dt.timedelta(seconds=heartbeat_age)
    return Job.objects.create(
        operation="start_job",
        function="tests.testapp.jobs.wait_for_cancel",
        user=user,
        conversation=conversation,
        status=Job.Status.RUNNING,
        progress=10,
        worker="worker-host:4242:MainThread",
        started_at=beat,
        heartbeat_at=beat,
    )


def conversation_texts(conversation: Conversation) -> list[tuple[str, str]]:
    return list(
        Message.objects.filter(conversation=conversation)
        .order_by("created_at", "id")
        .values_list("role", "text")
    )


def a_local_function() -> Callable[..., Any]:
    def nested(job: JobContext) -> str:
        return "nested"

    return nested


# -- enqueue --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_handler_that_enqueues_returns_at_once_with_the_job_id_as_task_id(
    diagnostician, conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as handed_over:
        outcome, job = start_job(diagnostician, conversation, kind="count", steps=2)

    assert outcome.result.task_id == str(job.pk)
    assert outcome.text == f"started count job {job.pk}"
    assert (job.status, job.progress, job.started_at) == ("queued", 0, None)
    assert (job.operation, job.user, job.conversation) == ("start_job", diagnostician, conversation)
    assert (job.function, job.args, job.kwargs) == ("tests.testapp.jobs.count_orders", [2], {})
    assert len(handed_over) == 1, "the task backend gets the job once the transaction commits"
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_a_job_enqueued_outside_a_call_belongs_to_the_given_user_and_no_conversation(
    diagnostician, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        job = JobManager(user=diagnostician).enqueue(testapp_jobs.count_orders, 1)

    job.refresh_from_db()
    assert (job.operation, job.user, job.conversation) == ("", diagnostician, None)
    assert (job.status, job.result) == ("succeeded", "0 orders")
    assert Message.objects.count() == 0


@pytest.mark.parametrize(
    "function",
    [
        pytest.param(lambda job: "lambda", id="lambda"),
        pytest.param(a_local_function(), id="local function"),
        pytest.param(JobContext.report, id="method"),
        pytest.param(functools.partial(testapp_jobs.count_orders, steps=1), id="partial"),
        pytest.param("tests.testapp.jobs.count_orders", id="dotted path instead of function"),
    ],
)
@pytest.mark.django_db
def test_a_job_a_worker_could_not_import_is_refused_at_enqueue(diagnostician, function):
    with pytest.raises(JobDefinitionError) as refused:
        JobManager(user=diagnostician).enqueue(function)

    assert refused.value.code == "job_definition"
    assert Job.objects.count() == 0


# -- running ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_progress_reports_are_stored_clamped_to_0_100_and_count_as_a_heartbeat(diagnostician):
    job = running_job(diagnostician, None, heartbeat_age=120)
    context = JobContext(job)

    context.report(42.9, "copying")

    job.refresh_from_db()
    assert (job.progress, job.progress_message) == (42, "copying")
    assert timezone.now() - job.heartbeat_at < dt.timedelta(seconds=5)
    context.report(150)
    assert Job.objects.get(pk=job.pk).progress == 100
    context.report(-3)
    assert Job.objects.get(pk=job.pk).progress == 0


@pytest.mark.django_db
def test_a_report_after_a_cancel_is_stored_then_stops_the_job(diagnostician):
    context = JobContext(running_job(diagnostician, None, heartbeat_age=0))
    context.cancel.cancel()

    with pytest.raises(Cancelled):
        context.report(60, "still going")

    assert Job.objects.get(pk=context.id).progress == 60


@pytest.mark.django_db
def test_a_job_that_succeeds_stores_its_result_and_progress_100_and_tells_the_conversation(
    diagnostician, conversation, django_capture_on_commit_callbacks
):
    Order.objects.create(reference="A-1")
    Order.objects.create(reference="A-2")

    with django_capture_on_commit_callbacks(execute=True):
        _, job = start_job(diagnostician, conversation, kind="count", steps=3)

    job.refresh_from_db()
    assert (job.status, job.progress, job.progress_message) == ("succeeded", 100, "step 3 of 3")
    assert (job.result, job.error) == ("2 orders", "")
    assert job.started_at <= job.finished_at
    assert job.worker.split(":")[1] == str(os.getpid())
    assert conversation_texts(conversation) == [("assistant", "start_job finished: 2 orders")]
    message = Message.objects.get(conversation=conversation)
    assert job.completion_message == message
    assert message.tool_calls == [
        {
            "operation": "start_job",
            "task_id": str(job.pk),
            "decision": "succeeded",
            "text": "2 orders",
        }
    ]


@pytest.mark.django_db
def test_a_job_that_raises_is_stored_failed_with_its_error_and_the_conversation_is_told(
    diagnostician, conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        outcome, job = start_job(diagnostician, conversation, kind="explode")

    job.refresh_from_db()
    assert outcome.decision == "executed", "the handler itself only enqueued"
    assert (job.status, job.error, job.result) == ("failed", "RuntimeError: the job blew up", "")
    assert (job.progress, job.progress_message) == (50, "about to fail")
    assert conversation_texts(conversation) == [
        ("assistant", "start_job failed: RuntimeError: the job blew up")
    ]
    assert job.completion_message.tool_calls[0]["decision"] == "failed"


@pytest.mark.django_db
def test_a_job_runs_once_however_often_it_is_delivered(
    diagnostician, conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        job = JobManager(user=diagnostician, conversation=conversation).enqueue(
            race_jobs.record_run
        )

    assert execute_job(str(job.pk)) == "succeeded"
    assert execute_job(str(job.pk)) == "succeeded"

    assert Order.objects.filter(reference=f"job-{job.pk}").count() == 1
    assert Message.objects.filter(conversation=conversation).count() == 1


@pytest.mark.django_db
def test_a_job_that_no_longer_exists_is_reported_missing():
    assert execute_job("00000000-0000-0000-0000-000000000000") == "missing"


# -- cancelling ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cancelling_a_queued_job_cancels_it_at_once_and_the_worker_skips_it(
    diagnostician, conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as handed_over:
        job = JobManager(user=diagnostician, conversation=conversation).enqueue(
            race_jobs.record_run
        )

    assert cancel_job(diagnostician, job.pk).status == "cancelled"
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == ("cancelled", True)
    assert job.finished_at is not None
    for hand_over in handed_over:  # the ImmediateBackend runs the task now
        hand_over()

    job.refresh_from_db()
    assert (job.status, job.started_at, job.worker) == ("cancelled", None, "")
    assert Order.objects.count() == 0


@pytest.mark.django_db
def test_cancelling_a_running_job_asks_it_to_stop(diagnostician):
    job = running_job(diagnostician, None, heartbeat_age=0)

    cancel_job(diagnostician, job.pk)

    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == ("running", True)
    assert job.beat() is True, "the worker's next heartbeat hears about it"


@pytest.mark.django_db
def test_a_finished_job_is_left_as_it_is_when_cancelled(diagnostician):
    job = Job.objects.create(function="f.g", user=diagnostician, status="succeeded", result="ok")

    assert job.request_cancel() is False

    job.refresh_from_db()
    assert (job.status, job.cancel_requested, job.result) == ("succeeded", False, "ok")


@pytest.mark.parametrize(
    ("perms", "flags"),
    [((), {}), (("assistant.view_job",), {"is_staff": True})],
    ids=["another user", "staff who may only view jobs"],
)
@pytest.mark.django_db
def test_someone_elses_job_cannot_be_cancelled(diagnostician, make_user, perms, flags):
    job = running_job(diagnostician, None, heartbeat_age=0)
    intruder = make_user("intruder", *perms, **flags)

    with pytest.raises(JobNotFound):
        cancel_job(intruder, job.pk)

    assert Job.objects.get(pk=job.pk).cancel_requested is False


@pytest.mark.django_db
def test_staff_who_may_change_jobs_cancel_anyones(diagnostician, make_user):
    job = running_job(diagnostician, None, heartbeat_age=0)
    operator = make_user("operator", "assistant.view_job", "assistant.change_job", is_staff=True)

    cancel_job(operator, job.pk)

    assert Job.objects.get(pk=job.pk).cancel_requested is True


# -- get_task_status -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"status": "queued"}, "start_job is queued."),
        ({"status": "running", "progress": 40}, "start_job is running: 40%"),
        (
            {"status": "running", "progress": 40, "progress_message": "copying"},
            "start_job is running: 40% — copying",
        ),
        (
            {"status": "succeeded", "progress": 100, "result": "2 orders"},
            "start_job succeeded: 2 orders",
        ),
        (
            {"status": "failed", "error": "RuntimeError: boom"},
            "start_job failed: RuntimeError: boom",
        ),
        ({"status": "cancelled"}, "start_job was cancelled."),
    ],
    ids=["queued", "running", "running with a message", "succeeded", "failed", "cancelled"],
)
@pytest.mark.django_db
def test_get_task_status_tells_the_owner_how_their_job_is_doing(plain_user, fields, text):
    job = Job.objects.create(
        operation="start_job", function="tests.testapp.jobs.count_orders", user=plain_user, **fields
    )

    outcome = dispatch("get_task_status", {"task_id": str(job.pk)}, user=plain_user)

    assert outcome.decision == "executed"
    assert outcome.text == text
    assert outcome.result.task_id == str(job.pk)
    assert (outcome.result.data["id"], outcome.result.data["status"]) == (str(job.pk), job.status)


@pytest.mark.parametrize(
    ("perms", "flags", "sees_it"),
    [
        ((), {}, False),
        (("assistant.view_job",), {}, False),
        ((), {"is_staff": True}, False),
        (("assistant.view_job",), {"is_staff": True}, True),
    ],
    ids=["another user", "with view_job, not staff", "staff without view_job", "staff + view_job"],
)
@pytest.mark.django_db
def test_get_task_status_on_someone_elses_job_needs_staff_with_view_job(
    plain_user, make_user, perms, flags, sees_it
):
    job = Job.objects.create(
        operation="start_job", function="f.g", user=plain_user, status="queued"
    )
    asker = make_user("asker", *perms, **flags)

    outcome = dispatch("get_task_status", {"task_id": str(job.pk)}, user=asker)

    assert outcome.decision == "executed"
    if sees_it:
        assert outcome.text == "start_job is queued."
    else:
        assert outcome.text == f"No job {job.pk} of yours."
        assert outcome.result.data is None


@pytest.mark.django_db
def test_get_task_status_of_an_unknown_job_says_so(plain_user):
    outcome = dispatch(
        "get_task_status", {"task_id": "00000000-0000-0000-0000-000000000001"}, user=plain_user
    )

    assert outcome.text == "No job 00000000-0000-0000-0000-000000000001 of yours."


# -- the reaper ------------------------------------------------------------------------------


def reap(*options: str) -> str:
    out = StringIO()
    call_command("assistant_reap_jobs", *options, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_reaper_fails_a_running_job_whose_worker_went_silent(diagnostician, conversation):
    silent = running_job(diagnostician, conversation, heartbeat_age=120)
    alive = running_job(diagnostician, conversation, heartbeat_age=1)

    output = reap()

    assert output.splitlines() == [
        f"Marked failed: {silent.pk} start_job on worker-host:4242:MainThread",
        "1 stale job",
    ]
    silent.refresh_from_db()
    assert silent.status == "failed"
    assert silent.error == "The worker stopped responding (no heartbeat for 60 s)."
    assert silent.finished_at is not None
    assert conversation_texts(conversation) == [
        ("assistant", "start_job failed: The worker stopped responding (no heartbeat for 60 s).")
    ]
    assert silent.completion_message.tool_calls[0]["task_id"] == str(silent.pk)
    alive.refresh_from_db()
    assert (alive.status, alive.error, alive.completion_message) == ("running", "", None)


@pytest.mark.django_db
def test_the_reaper_leaves_queued_and_finished_jobs_alone(diagnostician):
    old = timezone.now() - dt.timedelta(hours=1)
    queued = Job.objects.create(function="f.g", user=diagnostician, created_at=old)
    done = Job.objects.create(
        function="f.g", user=diagnostician, status="succeeded", heartbeat_at=old, finished_at=old
    )

    assert reap().splitlines() == ["0 stale jobs"]

    assert Job.objects.get(pk=queued.pk).status == "queued"
    assert Job.objects.get(pk=done.pk).status == "succeeded"


@pytest.mark.django_db
def test_the_reaper_dry_run_lists_stale_jobs_and_changes_nothing(diagnostician, conversation):
    silent = running_job(diagnostician, conversation, heartbeat_age=120)

    output = reap("--dry-run")

    assert output.splitlines() == [
        f"Would mark failed: {silent.pk} start_job on worker-host:4242:MainThread",
        "1 stale job",
    ]
    silent.refresh_from_db()
    assert (silent.status, silent.error, silent.finished_at) == ("running", "", None)
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_the_reaper_takes_the_silence_that_counts_as_dead_from_the_command_line(diagnostician):
    quiet = running_job(diagnostician, None, heartbeat_age=10)

    assert reap().splitlines() == ["0 stale jobs"]
    assert reap("--stale-after", "5").splitlines()[-1] == "1 stale job"

    quiet.refresh_from_db()
    assert quiet.error == "The worker stopped responding (no heartbeat for 5 s)."


@pytest.mark.django_db
def test_the_reaper_refuses_a_silence_that_is_not_positive():
    with pytest.raises(CommandError, match="--stale-after must be a positive number"):
        reap("--stale-after", "0")


# -- REST ------------------------------------------------------------------------------------


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def some_jobs(plain_user: Any, make_user: Callable[..., Any]) -> dict[str, Job]:
    """Two of plain_user's jobs (one older, succeeded; one queued) and someone else's."""
    earlier = timezone.now() - dt.timedelta(minutes=5)
    other = make_user("other")
    return {
        "done": Job.objects.create(
            operation="start_job",
            function="f.g",
            user=plain_user,
            status="succeeded",
            result="2 orders",
            progress=100,
            created_at=earlier,
        ),
        "queued": Job.objects.create(operation="start_job", function="f.g", user=plain_user),
        "theirs": Job.objects.create(operation="start_job", function="f.g", user=other),
    }


@pytest.mark.django_db
def test_the_job_list_shows_your_own_jobs_newest_first(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/")

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert [job["id"] for job in body["results"]] == [
        str(some_jobs["queued"].pk),
        str(some_jobs["done"].pk),
    ]
    done = body["results"][1]
    assert (done["status"], done["progress"], done["result"], done["username"]) == (
        "succeeded",
        100,
        "2 orders",
        "plain",
    )


@pytest.mark.django_db
def test_the_job_list_filters_by_status(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/", {"status": "succeeded"})

    assert response.status_code == 200
    assert [job["id"] for job in response.json()["results"]] == [str(some_jobs["done"].pk)]


@pytest.mark.django_db
def test_the_job_list_refuses_an_unknown_status(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/", {"status": "exploded"})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["errors"]) == {"status"}


@pytest.mark.django_db
def test_staff_with_view_job_list_everyones_jobs_when_they_ask_for_all(make_user, some_jobs):
    staff = make_user("staff", "assistant.view_job", is_staff=True)
    Job.objects.create(operation="start_job", function="f.g", user=staff)

    mine = client_for(staff).get(f"{API}/jobs/").json()
    everyone = client_for(staff).get(f"{API}/jobs/", {"all": "1"}).json()

    assert mine["count"] == 1
    assert everyone["count"] == 4


@pytest.mark.django_db
def test_a_job_detail_shows_your_job(plain_user, some_jobs):
    job = some_jobs["done"]

    response = client_for(plain_user).get(f"{API}/jobs/{job.pk}/")

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["operation"], body["status"], body["result"]) == (
        str(job.pk),
        "start_job",
        "succeeded",
        "2 orders",
    )


@pytest.mark.django_db
def test_someone_elses_job_detail_is_not_found(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/{some_jobs['theirs'].pk}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_cancel_through_the_api_cancels_your_queued_job(plain_user, some_jobs):
    job = some_jobs["queued"]

    response = client_for(plain_user).post(f"{API}/jobs/{job.pk}/cancel/")

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["cancel_requested"]) == ("cancelled", True)
    assert Job.objects.get(pk=job.pk).status == "cancelled"


@pytest.mark.django_db
def test_cancel_through_the_api_of_someone_elses_job_is_not_found(plain_user, some_jobs):
    job = some_jobs["theirs"]

    response = client_for(plain_user).post(f"{API}/jobs/{job.pk}/cancel/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert Job.objects.get(pk=job.pk).status == "queued"


# -- with real workers (PostgreSQL) ----------------------------------------------------------


@pytest.fixture
def workers(transactional_db: None, settings: Any) -> Iterator[Workers]:
    """``db_worker`` processes on the test database; this test enqueues to the same backend."""
    settings.TASKS = DATABASE_BACKEND
    started = Workers()
    try:
        yield started
    finally:
        started.close()


def job_row(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_an_enqueued_job_and_its_completion_reaches_the_conversation(
    workers, diagnostician, conversation
):
    Order.objects.create(reference="A-1")
    _, job = start_job(diagnostician, conversation, kind="count", steps=3)
    assert job_row(job).status == "queued", "nothing runs the job until a worker takes it"

    worker = workers.start("--batch")
    assert workers.wait(worker, WORKER_STARTS) == 0, workers.output(worker)

    job.refresh_from_db()
    assert (job.status, job.progress, job.progress_message) == ("succeeded", 100, "step 3 of 3")
    assert job.result == "1 orders"
    assert job.worker.split(":")[1] == str(worker.pid)
    assert conversation_texts(conversation) == [("assistant", "start_job finished: 1 orders")]
    (task,) = DBTaskResult.objects.all()
    assert (str(task.id), task.status, task.return_value) == (
        job.task_result_id,
        "SUCCESSFUL",
        "succeeded",
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_stores_progress_while_the_job_runs(workers, diagnostician, conversation):
    job = JobManager(user=diagnostician, conversation=conversation).enqueue(
        testapp_jobs.count_orders, 4, 0.4
    )
    seen: list[tuple[str, int, str]] = []

    def finished() -> bool:
        row = job_row(job)
        state = (row.status, row.progress, row.progress_message)
        if not seen or seen[-1] != state:
            seen.append(state)
        return row.is_finished

    workers.start("--interval", "0.1")
    eventually(finished, timeout=WORKER_STARTS, interval=0.02, what="the job to finish")

    running = [(progress, message) for status, progress, message in seen if status == "running"]
    steps = [(0, ""), (25, "step 1 of 4"), (50, "step 2 of 4"), (75, "step 3 of 4")]
    steps.append((100, "step 4 of 4"))
    assert running == [step for step in steps if step in running], f"in order: {seen}"
    assert len(set(running) & set(steps[1:4])) >= 2, f"stored step by step: {seen}"
    assert seen[-1] == ("succeeded", 100, "step 4 of 4")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_job_stops_it_within_a_few_seconds(
    workers, diagnostician, conversation
):
    _, job = start_job(diagnostician, conversation, kind="wait", seconds=60)
    worker = workers.start("--interval", "0.1")
    eventually(lambda: job_row(job).status == "running", timeout=WORKER_STARTS, what="running")

    asked = time.monotonic()
    cancel_job(diagnostician, job.pk)
    eventually(lambda: job_row(job).is_finished, timeout=10, what="the job to stop")
    took = time.monotonic() - asked

    job.refresh_from_db()
    assert (job.status, job.error) == ("cancelled", "Cancelled by the user.")
    assert took < 5, f"the job stopped {took:.1f} s after the cancel"
    # The row is finished first; the worker then appends the message in its own transaction.
    eventually(lambda: conversation_texts(conversation), timeout=10, what="the message")
    assert conversation_texts(conversation) == [("assistant", "start_job was cancelled.")]
    assert worker.poll() is None, "the worker lives on for the next job"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_worker_is_killed_stays_running_until_the_reaper_fails_it(
    workers, diagnostician, conversation
):
    _, job = start_job(diagnostician, conversation, kind="wait", seconds=60)
    worker = workers.start("--interval", "0.1")
    eventually(lambda: job_row(job).progress == 10, timeout=WORKER_STARTS, what="running")

    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    last_beat = job_row(job).heartbeat_at
    time.sleep(1.2)

    assert job_row(job).status == "running", "nobody else knows the worker died"
    assert job_row(job).heartbeat_at == last_beat
    assert reap("--stale-after", "30").splitlines() == ["0 stale jobs"]
    assert reap("--stale-after", "1").splitlines()[-1] == "1 stale job"
    job.refresh_from_db()
    assert (job.status, job.error) == (
        "failed",
        "The worker stopped responding (no heartbeat for 1 s).",
    )
    assert conversation_texts(conversation) == [
        ("assistant", "start_job failed: The worker stopped responding (no heartbeat for 1 s).")
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_frozen_worker_that_wakes_after_its_job_was_reaped_does_not_overwrite_the_failure(
    workers, diagnostician, conversation
):
    _, job = start_job(diagnostician, conversation, kind="wait", seconds=1)
    worker = workers.start("--interval", "0.1")
    eventually(lambda: job_row(job).progress == 10, timeout=WORKER_STARTS, what="running")
    worker.send_signal(signal.SIGSTOP)  # a paused VM, a long GC, a lost network: silent
    try:
        time.sleep(1.2)
        assert reap("--stale-after", "1").splitlines()[-1] == "1 stale job"
    finally:
        worker.send_signal(signal.SIGCONT)
    eventually(
        lambda: DBTaskResult.objects.filter(status="SUCCESSFUL").exists(),
        timeout=10,
        what="the woken worker to finish its task",
    )

    job.refresh_from_db()
    told = "start_job failed: The worker stopped responding (no heartbeat for 1 s)."
    assert conversation_texts(conversation) == [("assistant", told)]
    assert (job.status, job.error) == (
        "failed",
        "The worker stopped responding (no heartbeat for 1 s).",
    ), "the job's row says what the conversation was told"


def race(workers: Workers, user: Any, jobs: int, deliveries: int) -> list[Job]:
    """Enqueue ``jobs`` recording jobs, each handed to the backend ``deliveries`` times in a row
    (so both workers take the same job at once), then let two ``--batch`` workers drain them."""
    enqueued = []
    for _ in range(jobs):
        enqueued.append(JobManager(user=user).enqueue(race_jobs.record_run, 0.05))
        for _ in range(deliveries - 1):
            run_job.enqueue(str(enqueued[-1].pk))
    racers = [workers.start("--batch"), workers.start("--batch")]
    for racer in racers:
        assert workers.wait(racer, 60) == 0, workers.output(racer)
    pids = {str(racer.pid) for racer in racers}
    finished = list(Job.objects.filter(pk__in=[job.pk for job in enqueued]))
    assert {job.worker.split(":")[1] for job in finished} == pids, "both workers took jobs"
    return finished


def assert_each_ran_exactly_once(finished: list[Job], jobs: int) -> None:
    assert len(finished) == jobs
    assert {job.status for job in finished} == {"succeeded"}, [job.error for job in finished]
    runs = dict(Order.objects.values_list("reference", "approvals"))
    assert len(runs) == jobs
    for job in finished:
        ran_in = job.worker.split(":")[1]
        assert runs[f"job-{job.pk}"] == int(ran_in), "the run was in the worker that claimed it"
        assert job.result == f"ran in {ran_in}"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_over_a_batch_run_every_job_exactly_once(workers, diagnostician):
    finished = race(workers, diagnostician, jobs=40, deliveries=1)

    assert_each_ran_exactly_once(finished, 40)
    assert DBTaskResult.objects.filter(status="SUCCESSFUL").count() == 40


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_job_delivered_twice_to_racing_workers_still_runs_once(workers, diagnostician):
    finished = race(workers, diagnostician, jobs=20, deliveries=2)

    assert_each_ran_exactly_once(finished, 20)
    assert DBTaskResult.objects.filter(status="SUCCESSFUL").count() == 40


# -- the heartbeat through a busy database ---------------------------------------------------


@pytest.fixture
def only_held_locks_refuse(transactional_db: None) -> Iterator[None]:
    """Connections opened from now on give up on a held lock after 50 ms (PostgreSQL would wait
    for ever, SQLite 5 s). SQLite's in-memory test database is one cache shared by every
    connection, where a read locks the table against other connections' writes: all of them,
    this thread's included, read without such locks, so a writer meets only the lock a test holds.
    """

    def configure(db: Any) -> None:
        with db.cursor() as cursor:
            if db.vendor == "postgresql":
                cursor.execute("SET lock_timeout = '50ms'")
            elif db.vendor == "sqlite":
                cursor.execute("PRAGMA busy_timeout = 50")
                cursor.execute("PRAGMA read_uncommitted = 1")

    def on_connect(sender: Any, **kwargs: Any) -> None:
        configure(kwargs["connection"])

    connection_created.connect(on_connect)
    if connection.vendor == "sqlite":
        configure(connection)
    try:
        yield
    finally:
        connection_created.disconnect(on_connect)
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA read_uncommitted = 0")
                cursor.execute("PRAGMA busy_timeout = 5000")


@contextlib.contextmanager
def job_writes_refused() -> Iterator[None]:
    """Another connection holds a lock that refuses writes to ``assistant_job`` until the block
    ends: SQLite's one write transaction; on PostgreSQL an EXCLUSIVE table lock (reads still go)."""
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    raw = other.get_new_connection(other.get_connection_params())
    try:
        if other.vendor == "postgresql":
            raw.execute("LOCK TABLE assistant_job IN EXCLUSIVE MODE")  # opens a transaction
        else:
            raw.execute("BEGIN IMMEDIATE")
        yield
    finally:
        raw.rollback()
        raw.close()


def failed_beats(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if "heartbeat failed" in record.getMessage()]


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_refused_by_a_busy_database_resumes_once_it_accepts_writes_again(
    diagnostician, settings, only_held_locks_refuse, caplog
):
    settings.ASSISTANT = {**settings.ASSISTANT, "JOB_HEARTBEAT": 0.05}
    caplog.set_level(logging.WARNING, logger="assistant.jobs")
    job = Job.objects.create(
        operation="start_job",
        function="tests.testapp.jobs.wait_for_cancel",
        kwargs={"seconds": 8},
        user=diagnostician,
    )

    def work() -> None:  # a worker running the job, on connections of its own
        try:
            execute_job(str(job.pk))
        finally:
            connections.close_all()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        eventually(lambda: job_row(job).progress == 10, timeout=5, what="the job to run")
        first_beat = job_row(job).heartbeat_at
        eventually(lambda: job_row(job).heartbeat_at > first_beat, timeout=2, what="a heartbeat")

        with job_writes_refused():
            locked_at = timezone.now()
            deadline = time.monotonic() + 1  # a few beats come and go while it is held
            while len(failed_beats(caplog)) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            silenced = job_row(job).heartbeat_at
        released_at = timezone.now()

        eventually(
            lambda: job_row(job).heartbeat_at > released_at,
            timeout=2,
            what="the heartbeat to resume once the database accepts writes again",
        )
        assert silenced < locked_at, "no beat got through while the lock was held"
        assert len(failed_beats(caplog)) >= 3, "each refused beat is logged"
        watched_until = time.monotonic() + 1  # twice the silence that counts as dead below
        while time.monotonic() < watched_until:
            assert reap("--stale-after", "0.5").splitlines() == ["0 stale jobs"]
            time.sleep(0.05)
        assert job_row(job).status == "running"
    finally:
        cancel_job(diagnostician, job.pk)  # heard through the heartbeat
        worker.join(timeout=10)

    assert not worker.is_alive()
    job.refresh_from_db()
    assert (job.status, job.error) == ("cancelled", "Cancelled by the user.")
