"""The task manager: long work enqueued through Django's Tasks framework, one ``Job`` row per task.

A handler calls ``call.jobs.enqueue(func, *args, **kwargs)`` and returns at once with the job's
id as its ``task_id``. A worker (``manage.py db_worker`` with django-tasks-db) runs ``func(job,
*args, **kwargs)``; the job reports progress, notices a cancel through ``job.cancel``, and its
result lands back in the conversation as an assistant message. A job whose worker stops
beating is marked failed by the reaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django import db
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import IntegrityError, close_old_connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext

from .compat import task
from .conf import assistant_settings
from .core.cancellation import CancellationToken
from .core.declaration import title_of
from .core.registry import ToolResult
from .exceptions import Cancelled, JobDefinitionError, JobNotFound, WorkerLost
from .liveness import areap_interrupted_turns
from .models import Job, Message
from .stream import events
from .stream.broadcast import Publisher

logger = logging.getLogger("assistant.jobs")
RELAY_LOOK_BACK = 5.0  # seconds the job relay re-reads behind its watermark


def _path_of(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None)
    if not callable(function) or not module or not name:
        raise JobDefinitionError(f"{function!r}: a job must be a module-level function")
    path = f"{module}.{name}"
    if "<" in path:
        raise JobDefinitionError(f"{path}: a job must be a module-level function")
    try:
        if import_string(path) is not function:
            raise ImportError
    except ImportError:
        raise JobDefinitionError(f"{path} cannot be imported by a worker") from None
    return path


class JobManager:
    """``call.jobs``: enqueue long work for this call's user and conversation."""

    __slots__ = ("conversation", "operation", "user")

    def __init__(self, *, user: Any = None, conversation: Any = None, operation: str = "") -> None:
        self.user = user
        self.conversation = conversation
        self.operation = operation

    def enqueue(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Job:
        """Create the job row and hand it to the task backend; returns at once."""
        job = Job.objects.create(
            operation=self.operation,
            function=_path_of(function),
            args=list(args),
            kwargs=kwargs,
            user_id=self.user.pk if getattr(self.user, "is_authenticated", False) else None,
            conversation=self.conversation,
        )
        transaction.on_commit(lambda: _hand_over(job))
        return job


def _hand_over(job: Job) -> None:
    result = run_job.using(queue_name=assistant_settings.JOB_QUEUE).enqueue(str(job.pk))
    Job.objects.filter(pk=job.pk).update(task_result_id=str(result.id)[:64])


@task()
def run_job(job_id: str) -> str:
    """The Django task behind every job: run it once, record how it ended."""
    return execute_job(job_id)


class JobContext:
    """What a job function gets: its row, ``report()``, and ``cancel`` (set when the user cancels)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.cancel = CancellationToken()

    @property
    def id(self) -> str:
        return str(self.job.pk)

    def report(self, percent: float, message: str = "") -> None:
        """Store progress (the chat shows it); raises ``Cancelled`` once the user cancelled."""
        self.job.report(percent, message)
        if self.cancel.is_cancelled:
            raise Cancelled(gettext("The job was cancelled."))


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


def _heartbeat(context: JobContext, stop: threading.Event) -> None:
    interval = assistant_settings.JOB_HEARTBEAT
    try:
        while not stop.wait(interval):
            try:
                if context.job.beat():
                    context.cancel.cancel()
            except db.Error:  # DatabaseError, InterfaceError (a closed connection)
                # One failed beat (a busy SQLite file, a dropped connection) must not end the
                # heartbeat: a job that stops beating is reaped as dead while it still runs.
                logger.warning("Job %s: a heartbeat failed; beating on", context.job.pk)
                close_old_connections()
    finally:
        close_old_connections()


def execute_job(job_id: str) -> str:
    """Run one job in this worker (exactly once across workers) and return its final status."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return "missing"
    if not job.claim(worker_name()):
        return job.status
    context = JobContext(job)
    stop = threading.Event()
    beater = threading.Thread(target=_heartbeat, args=(context, stop), daemon=True)
    beater.start()
    won = False
    try:
        function = import_string(job.function)
        if inspect.iscoroutinefunction(function):
            value = async_to_sync(function)(context, *job.args, **job.kwargs)
        else:
            value = function(context, *job.args, **job.kwargs)
        if context.cancel.is_cancelled:
            won = job.finish(Job.Status.CANCELLED, error="Cancelled by the user.")
        else:
            text, data = _result(value)
            won = job.finish(Job.Status.SUCCEEDED, result=text, data=data)
    except Cancelled:
        won = job.finish(Job.Status.CANCELLED, error="Cancelled by the user.")
    except Exception as exc:
        logger.exception("Job %s (%s) failed", job.pk, job.function)
        won = job.finish(Job.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
    finally:
        stop.set()
        beater.join(timeout=5)
    if won:
        announce_completion(job)
    else:
        logger.warning(
            "Job %s had already ended (%s); its late result is dropped", job.pk, job.status
        )
    return job.status


def _result(value: Any) -> tuple[str, Any]:
    if isinstance(value, ToolResult):
        return value.text, value.data
    if value is None:
        return "Done.", None
    if isinstance(value, str):
        return value, None
    return "Done.", value


def job_title(job: Job) -> str:
    """What people read for a job: its tool's name as words, never its id or function."""
    return title_of(job.operation or job.function.rsplit(".", 1)[-1])


def completion_text(job: Job) -> str:
    name = job_title(job)
    if job.status == Job.Status.SUCCEEDED and job.failures:
        return f"{name} finished with {_failures(job.failures)}: {job.result}"
    if job.status == Job.Status.SUCCEEDED:
        return f"{name} finished: {job.result}"
    if job.status == Job.Status.CANCELLED:
        return f"{name} was cancelled."
    return f"{name} failed: {job.error.splitlines()[0] if job.error else 'unknown error'}"


def _failures(count: int) -> str:
    return f"{count} failure{'' if count == 1 else 's'}"


def announce_completion(job: Job) -> None:
    """Append the job's outcome to its conversation as an assistant message, once."""
    if job.conversation_id is None:
        return
    try:
        message = _completion_message(job)
    except IntegrityError:
        # The conversation was deleted meanwhile (the job row then holds none): nothing to say.
        if Job.objects.filter(pk=job.pk, conversation__isnull=False).exists():
            raise
        return
    if message is not None:
        job.completion_message = message


def _completion_message(job: Job) -> Message | None:
    with transaction.atomic():
        locked = Job.objects.select_for_update().filter(pk=job.pk).first()
        if locked is None or locked.completion_message_id is not None:
            return None
        if locked.conversation_id is None:  # (deleted since the caller read the job)
            return None
        message = Message.objects.create(
            conversation_id=locked.conversation_id,
            role=Message.Role.ASSISTANT,
            text=completion_text(locked),
            tool_calls=[
                {
                    "operation": locked.operation,
                    "task_id": str(locked.pk),
                    "decision": locked.status,
                    "text": locked.result or locked.error,
                }
            ],
        )
        Job.objects.filter(pk=job.pk).update(completion_message=message, updated_at=timezone.now())
    return message


def reap_stale_jobs(*, stale_after: float | None = None, dry_run: bool = False) -> list[Job]:
    """Mark failed the running jobs whose worker stopped beating; returns them."""
    seconds = assistant_settings.JOB_STALE_AFTER if stale_after is None else stale_after
    stale = list(Job.objects.stale(timezone.now() - timedelta(seconds=seconds)))
    if dry_run:
        return stale
    reaped = []
    for job in stale:
        updated = Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING).update(
            status=Job.Status.FAILED,
            error=f"The worker stopped responding (no heartbeat for {seconds:g} s).",
            finished_at=timezone.now(),
            updated_at=timezone.now(),
        )
        if updated:
            job.refresh_from_db()
            _fail_task_result(job)
            announce_completion(job)
            reaped.append(job)
            logger.warning("Reaped stale job %s (%s)", job.pk, job.worker)
    return reaped


def _fail_task_result(job: Job) -> None:
    """End django-tasks-db's own row of a reaped job too, so its admin no longer shows it running."""
    try:
        results = apps.get_model("django_tasks_database", "DBTaskResult")
    except LookupError:  # another task backend: it keeps no row of its own here
        return
    if not job.task_result_id:
        return
    with contextlib.suppress(ValidationError, ValueError):
        results._default_manager.filter(
            pk=job.task_result_id, status__in=["READY", "RUNNING"]
        ).update(
            status="FAILED",
            finished_at=job.finished_at,
            exception_class_path=f"{WorkerLost.__module__}.{WorkerLost.__qualname__}",
            traceback=job.error,
        )


def job_event(job: Job) -> dict[str, Any]:
    """How a job is shown in the chat (a CUSTOM ``assistant.job`` event's value)."""
    return {
        "id": str(job.pk),
        "operation": job.operation,
        "title": job_title(job),
        "status": job.status,
        "progress": job.progress,
        "message": job.progress_message,
        "result": job.result,
        # a job that ran to its end may still have found problems: the chat says how many
        "failures": job.failures,
        "error": job.error.splitlines()[0] if job.error else "",
        "conversation": str(job.conversation_id) if job.conversation_id else None,
        "completion_message": str(job.completion_message_id) if job.completion_message_id else None,
    }


def job_for(user: Any, job_id: Any) -> Job:
    """A job this user may see (their own; any, for staff with ``assistant.view_job``)."""
    try:
        pk = uuid.UUID(str(job_id))
    except ValueError:
        raise JobNotFound() from None
    job = Job.objects.visible_to(user).filter(pk=pk).first()
    if job is None:
        raise JobNotFound()
    return job


def cancel_job(user: Any, job_id: Any) -> Job:
    """The user asks a job to stop; finished jobs are left as they are."""
    job = job_for(user, job_id)
    if job.user_id != user.pk and not user.has_perm("assistant.change_job"):
        raise JobNotFound()
    job.request_cancel()
    if job.status == Job.Status.CANCELLED:
        announce_completion(job)  # it never started: no worker will say so
    return job


# -- the relay: job progress from the database to the chat ------------------------------------


class JobRelay:
    """Brings job progress and completion from the database to the chat, in every web process.

    Workers only write rows (they may run with no channel layer at all, or another one); while
    sockets are connected, each web process polls for jobs that changed and sends an
    ``assistant.job`` event (and the completion message) to their conversation. It also reaps
    jobs whose worker went silent, and closes the turns of server processes that died.
    """

    def __init__(self) -> None:
        self.watchers = 0
        self.task: asyncio.Task[None] | None = None
        # job id → (updated_at last sent, completion message sent): what was already relayed
        # within the look-back window
        self.sent: dict[Any, tuple[Any, bool]] = {}

    def acquire(self) -> None:
        self.watchers += 1
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def release(self) -> None:
        self.watchers = max(0, self.watchers - 1)

    async def _run(self) -> None:
        since = timezone.now()
        last_reap = last_turn_reap = 0.0
        loop = asyncio.get_running_loop()
        while self.watchers > 0:
            await asyncio.sleep(assistant_settings.JOB_RELAY_INTERVAL)
            try:
                since = await self.relay(since)
                if loop.time() - last_reap > assistant_settings.JOB_STALE_AFTER / 2:
                    last_reap = loop.time()
                    await sync_to_async(reap_stale_jobs)()
                # (first at start-up: the turns a process that died left, closed as interrupted)
                if assistant_settings.TURN_HEARTBEAT is not None and (
                    loop.time() - last_turn_reap > assistant_settings.TURN_STALE_AFTER / 2
                ):
                    last_turn_reap = loop.time()
                    await areap_interrupted_turns()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Relaying job progress failed; retrying")

    async def relay(self, since: Any) -> Any:
        """Send what changed after ``since``; returns the new watermark.

        It looks a few seconds behind the watermark: a row committed late, or stamped by a
        worker whose clock runs behind, is still seen; what was already sent is skipped.
        """
        window = timedelta(seconds=RELAY_LOOK_BACK)
        changed, messages = await sync_to_async(_changed_jobs)(since - window)
        for job, event in changed:
            last, message_sent = self.sent.get(job.pk, (None, False))
            message = messages.get(job.pk)
            fresh = last is None or job.updated_at > last
            announce = message is not None and not message_sent
            if not (fresh or announce):
                continue
            publisher = Publisher(str(job.conversation_id))
            if fresh:
                publisher.put(_frame(events.custom("assistant.job", event), job.conversation_id))
            if announce:
                for frame in _message_frames(message):
                    publisher.put(frame)
            await publisher.close()
            self.sent[job.pk] = (job.updated_at, message_sent or announce)
            since = max(since, job.updated_at)
        horizon = since - window
        self.sent = {pk: entry for pk, entry in self.sent.items() if entry[0] >= horizon}
        return since


def _changed_jobs(since: Any) -> tuple[list[Any], dict[Any, Any]]:
    jobs = list(
        Job.objects.filter(updated_at__gt=since, conversation__isnull=False)
        .select_related("completion_message")
        .order_by("updated_at")[:500]
    )
    messages = {job.pk: job.completion_message for job in jobs if job.completion_message}
    return [(job, job_event(job)) for job in jobs], messages


def _frame(event: Any, thread_id: Any) -> dict[str, Any]:
    return events.frame(event, thread_id=str(thread_id), run_id=None)


def _message_frames(message: Any) -> list[dict[str, Any]]:
    message_id = str(message.pk)
    thread_id = message.conversation_id
    return [
        _frame(events.text_start(message_id), thread_id),
        _frame(events.text_content(message_id, message.text), thread_id),
        _frame(events.text_end(message_id), thread_id),
    ]


_relays: dict[asyncio.AbstractEventLoop, JobRelay] = {}


def job_relay() -> JobRelay:
    loop = asyncio.get_running_loop()
    relay = _relays.get(loop)
    if relay is None:
        for old in [old for old in _relays if old.is_closed()]:
            del _relays[old]
        relay = _relays[loop] = JobRelay()
    return relay
