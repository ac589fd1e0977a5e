"""What the job tests share: a job started through the tool, the functions real workers run and
the ``db_worker`` processes that run them."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from io import StringIO
from typing import IO, Any

import pytest
from django.core.management import call_command

from assistant.dispatch.door import dispatch
from assistant.jobs import JobContext
from assistant.models import Conversation, Job, Message
from tests.processes import ROOT, database_url
from tests.testapp.models import Order

WORKER_STARTS = 30  # seconds a db_worker process may take to start and run what is asked
DATABASE_BACKEND = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


def record_run(job: JobContext, seconds: float = 0.0) -> str:
    """Leave one order per run, named after the job (a second run fails on the unique name)."""
    time.sleep(seconds)
    Order.objects.create(reference=f"job-{job.id}", approvals=os.getpid())
    return f"ran in {os.getpid()}"


class Workers:
    """``manage.py db_worker`` processes on the test database; ``close()`` ends what is left."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []

    def start(self, *options: str) -> subprocess.Popen[bytes]:
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "DATABASE_URL": database_url(),
        }
        command = [sys.executable, "manage.py", "db_worker", "--no-reload", "--no-startup-delay"]
        process = subprocess.Popen(
            [*command, "--queue-name", "*", *options],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        self.logs.append(log)
        return process

    def output(self, process: subprocess.Popen[bytes]) -> str:
        log = self.logs[self.processes.index(process)]
        log.seek(0)
        return log.read().decode(errors="replace")

    def wait(self, process: subprocess.Popen[bytes], timeout: float) -> int:
        """The exit code of a ``--batch`` worker that must end within ``timeout`` seconds."""
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"db_worker still runs after {timeout:g} s:\n{self.output(process)}"
            ) from None

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        for log in self.logs:
            log.close()


@pytest.fixture
def workers(transactional_db: None, settings: Any) -> Iterator[Workers]:
    """``db_worker`` processes on the test database; this test enqueues to the same backend."""
    settings.TASKS = DATABASE_BACKEND
    started = Workers()
    try:
        yield started
    finally:
        started.close()


def eventually(check: Any, *, timeout: float, interval: float = 0.05, what: str = "") -> Any:
    """Poll ``check()`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or check}")
        time.sleep(interval)


@pytest.fixture
def conversation(diagnostician: Any) -> Conversation:
    return Conversation.objects.create(user=diagnostician, title="jobs")


def start_job(user: Any, conversation: Conversation | None = None, **entities: Any) -> Any:
    """Dispatch the test app's ``start_job`` tool; returns the outcome and the job it made."""
    outcome = dispatch("start_job", entities, user=user, conversation=conversation)
    assert outcome.decision == "executed", outcome.text
    return outcome, Job.objects.get(pk=outcome.result.task_id)


def conversation_texts(conversation: Conversation) -> list[tuple[str, str]]:
    return list(
        Message.objects.filter(conversation=conversation)
        .order_by("created_at", "id")
        .values_list("role", "text")
    )


def reap(*options: str) -> str:
    out = StringIO()
    call_command("assistant_reap_jobs", *options, stdout=out)
    return out.getvalue()
