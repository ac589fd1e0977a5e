"""A tool that started a job: its call waits for the job, reporting progress, within bounds."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.utils.translation import gettext
from mcp.server.context import ServerRequestContext

from ...access.tokens import still_holds
from ...conf import assistant_settings
from ...dispatch.calls import Outcome
from ...models import Job
from .callers import Caller
from .results import result_of, text_result

JOB_POLL_SECONDS = 0.25


# -- tools/call: jobs -----------------------------------------------------------------------------


async def awaited_job(
    ctx: ServerRequestContext[Any, Any], caller: Caller, outcome: Outcome
) -> types.CallToolResult:
    """A call that started a job: progress while the request is open, then the job's result."""
    assert outcome.result is not None and outcome.result.task_id is not None
    wait = assistant_settings.MCP_JOB_WAIT
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    reported: tuple[int, str] | None = None
    query = Job.objects.visible_to(caller.user).filter(pk=outcome.result.task_id)
    while True:
        job = await sync_to_async(query.first)()
        # the credential is asked after the job is read: what it shows was read while it held
        if not await sync_to_async(still_holds)(caller.bearer):
            return revoked_result()
        if job is None:
            return result_of(outcome)
        reported = await report_progress(ctx, job, reported)
        if job.is_finished:
            return finished_result(job)
        if loop.time() >= deadline:
            return text_result(
                f"{outcome.result.text}\n"
                + gettext(
                    "Still running: ask get_task_status with task_id %(task)s for its progress "
                    "and result."
                )
                % {"task": job.pk},
                data={"task_id": str(job.pk), "status": job.status, "progress": job.progress},
            )
        await asyncio.sleep(JOB_POLL_SECONDS)


def revoked_result() -> types.CallToolResult:
    """The credential stopped holding while a call waited: the job goes on, but what it comes to
    is not this credential's to see any more."""
    message = gettext(
        "This token stopped holding while the call waited (revoked, expired, or its "
        "user deactivated); the job goes on."
    )
    return text_result(
        f"{message} [token_revoked]",
        data={"code": "token_revoked", "message": message},
        error=True,
    )


def finished_result(job: Job, status: str | None = None) -> types.CallToolResult:
    """What a job came to, as its tools/call answers it (``status`` overrides the row's)."""
    status = status or job.status
    data = {"task_id": str(job.pk), "status": status, "data": job.result_data}
    if status == Job.Status.SUCCEEDED:
        done = gettext("%(operation)s succeeded.") % {"operation": job.operation}
        return text_result(job.result or done, data=data)
    text = job.error or f"{job.operation} {status}."
    return text_result(f"{text} [{status}]", data=data, error=True)


async def report_progress(
    ctx: ServerRequestContext[Any, Any],
    job: Job,
    reported: tuple[int, str] | None,
    meta: dict[str, Any] | None = None,
) -> tuple[int, str] | None:
    """``notifications/progress`` on the request's stream when it carries a ``progressToken``
    and the job moved since ``reported``; returns what has been reported now."""
    token = ctx.meta.get("progress_token") if ctx.meta else None
    now = (job.progress, job.progress_message)
    if token is None or now == reported:
        return reported
    params = types.ProgressNotificationParams(
        progress_token=token,
        progress=float(job.progress),
        total=100.0,
        message=job.progress_message or None,
        _meta=meta,
    )
    notification = types.ProgressNotification(params=params)
    await ctx.session.send_notification(notification, str(ctx.request_id))
    return now
