"""Jobs run by real db_worker processes (PostgreSQL): completion, progress, cancel, races."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.signals import connection_created
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from assistant.jobs import JobManager, cancel_job, execute_job, run_job
from assistant.models import Job
from tests import race_jobs
from tests.race_jobs import WORKER_STARTS, Workers, conversation_texts, eventually, reap, start_job
from tests.race_jobs import conversation as conversation  # a fixture
from tests.race_jobs import workers as workers  # a fixture
from tests.testapp import jobs as testapp_jobs
from tests.testapp.models import Order


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
    assert conversation_texts(conversation) == [("assistant", "Start job finished: 1 orders")]
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
    assert conversation_texts(conversation) == [("assistant", "Start job was cancelled.")]
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
        ("assistant", "Start job failed: The worker stopped responding (no heartbeat for 1 s).")
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
    told = "Start job failed: The worker stopped responding (no heartbeat for 1 s)."
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
