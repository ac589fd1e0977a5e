"""Background jobs: enqueued from a handler, run once, reported, cancelled, reaped."""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import CommandError
from django.utils import timezone

from assistant.dispatch.door import dispatch
from assistant.exceptions import Cancelled, JobDefinitionError, JobNotFound
from assistant.jobs import JobContext, JobManager, cancel_job, execute_job
from assistant.models import Conversation, Job, Message
from tests import race_jobs
from tests.race_jobs import conversation as conversation  # a fixture
from tests.race_jobs import conversation_texts, reap, start_job
from tests.testapp import jobs as testapp_jobs
from tests.testapp.models import Order


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
    assert conversation_texts(conversation) == [("assistant", "Start job finished: 2 orders")]
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
        ("assistant", "Start job failed: RuntimeError: the job blew up")
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
        ({"status": "queued"}, "Start job is queued."),
        ({"status": "running", "progress": 40}, "Start job is running: 40%"),
        (
            {"status": "running", "progress": 40, "progress_message": "copying"},
            "Start job is running: 40% — copying",
        ),
        (
            {"status": "succeeded", "progress": 100, "result": "2 orders"},
            "Start job succeeded: 2 orders",
        ),
        (
            {"status": "failed", "error": "RuntimeError: boom"},
            "Start job failed: RuntimeError: boom",
        ),
        ({"status": "cancelled"}, "Start job was cancelled."),
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
        assert outcome.text == "Start job is queued."
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
        ("assistant", "Start job failed: The worker stopped responding (no heartbeat for 60 s).")
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
