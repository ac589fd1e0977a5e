"""``get_task_status``: a job's status, progress and result (ADR-0008 step 2)."""

from __future__ import annotations

import uuid
from typing import Annotated

from django.utils.translation import gettext

from ..core.registry import ToolCall, ToolResult, assistant_tool
from ..jobs import job_event, job_title
from ..models import Job


@assistant_tool(
    operation="get_task_status",
    domain="assistant",
    description="Show the status, progress and result of a background job by its task id",
    risk_level="safe",
    public=True,
    keywords=["task status", "job status", "status of task"],
    repeatable=True,  # a running job's status changes between two calls
)
def get_task_status(
    call: ToolCall, task_id: Annotated[uuid.UUID, "the job's task id"]
) -> ToolResult:
    job = Job.objects.visible_to(call.user).filter(pk=task_id).first()
    if job is None:
        return ToolResult(text=gettext("No job %(id)s of yours.") % {"id": task_id})

    name = job_title(job)
    if job.status == Job.Status.RUNNING:
        text = gettext("%(name)s is running: %(progress)s%%") % {
            "name": name,
            "progress": job.progress,
        }
        if job.progress_message:
            text += f" — {job.progress_message}"
    elif job.status == Job.Status.QUEUED:
        text = gettext("%(name)s is queued.") % {"name": name}
    elif job.status == Job.Status.SUCCEEDED:
        text = gettext("%(name)s succeeded: %(result)s") % {"name": name, "result": job.result}
    elif job.status == Job.Status.CANCELLED:
        text = gettext("%(name)s was cancelled.") % {"name": name}
    else:
        text = gettext("%(name)s failed: %(error)s") % {"name": name, "error": job.error}
    return ToolResult(text=text, task_id=str(job.pk), data=job_event(job))
