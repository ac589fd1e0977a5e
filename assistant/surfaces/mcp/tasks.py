"""MCP tasks: a call that starts a job answers with a task, the job's row, in both revisions.

2025-11-25 (the tasks utility): a ``tools/call`` carrying ``params.task`` for a tool declared
``background=True`` answers ``CreateTaskResult`` once it starts a job; ``tasks/get``,
``tasks/result``, ``tasks/list`` and ``tasks/cancel`` follow it. 2026-07-28 (the extension
``io.modelcontextprotocol/tasks``): the server decides; a background tool's call that started a
job answers a task (``resultType: "task"``) when that request's capabilities declare the
extension, and ``tasks/get`` (the result inlined once done), ``tasks/update`` and
``tasks/cancel`` (acknowledgements) follow it; a request that does not declare it gets ``-32021``.

Either way the methods read and act on ``Job`` rows only, so any server process answers for any
task. A task is the caller's when the job is visible to its user (``Job.objects.visible_to``) and
its tool to its token's ceiling; anything else answers exactly as an unknown id does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.db.models import Q
from django.utils.translation import gettext
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND

from ...access.tokens import still_holds
from ...conf import assistant_settings
from ...core.registry import ToolRegistry
from ...dispatch.calls import CallContext
from ...dispatch.confirmation import stop_job
from ...exceptions import JobNotFound
from ...models import Job, JobQuerySet
from .callers import Caller, caller_of, client_label
from .confirmation import is_modern
from .jobs import JOB_POLL_SECONDS, finished_result, report_progress, revoked_result

TASKS_REVISION = "2025-11-25"  # tasks are core there; 2026-07-28 moved them to an extension
EXTENSION = "io.modelcontextprotocol/tasks"
# the standard result of the extension's tasks/get, and all of tasks/update's and tasks/cancel's
COMPLETE = {"resultType": "complete"}
# the method a task-augmented tools/call is routed to (past the SDK's CallToolResult check)
CALL_AS_TASK = "assistant/tools/call-as-task"
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
POLL_INTERVAL_MS = 1000
PAGE_SIZE = 50
STILL_WORKING = -32000  # tasks/result waited MCP_JOB_WAIT seconds: ask again


def offers_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version == TASKS_REVISION


def declares_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this 2026-07-28 request's own capabilities declare the tasks extension."""
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return is_modern(ctx) and EXTENSION in (extensions or {})


async def route_tasks(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: ``initialize`` declares the capability, a task-augmented ``tools/call``
    goes to ``CALL_AS_TASK``; a client that sends no ``task`` is served as before."""
    if ctx.method == "initialize":
        result = await call_next(ctx)
        if isinstance(result, dict) and result.get("protocolVersion") == TASKS_REVISION:
            result = {**result, "capabilities": {**result["capabilities"], "tasks": CAPABILITY}}
        return result
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    if ctx.method == "tools/call" and offers_tasks(ctx) and params.get("task") is not None:
        return await call_next(replace(ctx, method=CALL_AS_TASK))
    return await call_next(ctx)


# -- a job as a task ------------------------------------------------------------------------------


def task_status(job: Job) -> types.TaskStatus:
    """A cancelled task stays cancelled, whatever its job's handler did after the request."""
    if job.cancel_requested or job.status == Job.Status.CANCELLED:
        return "cancelled"
    if job.status == Job.Status.SUCCEEDED:
        return "completed"
    if job.status == Job.Status.FAILED:
        return "failed"
    return "working"


def status_message(job: Job, status: types.TaskStatus) -> str:
    if status == "working":
        if job.status == Job.Status.QUEUED:
            return gettext("Queued.")
        return f"{job.progress}%" + (f": {job.progress_message}" if job.progress_message else "")
    if status == "failed":
        return job.error[:300] or gettext("Failed.")
    return gettext("Cancelled.") if status == "cancelled" else gettext("Completed.")


def _task(job: Job, status: types.TaskStatus) -> dict[str, Any]:
    """What both revisions' ``Task`` say of a job (each names its ttl and poll interval)."""
    return {
        "taskId": str(job.pk),
        "status": status,
        "statusMessage": status_message(job, status),
        "createdAt": job.created_at.isoformat(),
        "lastUpdatedAt": job.updated_at.isoformat(),
    }


def task_of(job: Job) -> dict[str, Any]:
    """The job as the 2025-11-25 ``Task``; its ttl is null (job rows are kept: unlimited)."""
    status = task_status(job)
    task = {**_task(job, status), "ttl": None}
    if status == "working":
        task["pollInterval"] = POLL_INTERVAL_MS
    return task


def extension_task(job: Job) -> dict[str, Any]:
    """The job as the extension's ``DetailedTask``: once ``completed``, with the result its plain
    call ends with inlined."""
    task = _extension_task(job)
    if task["status"] == "completed":
        result = finished_result(job).model_dump(by_alias=True, mode="json", exclude_none=True)
        task["result"] = result
    return task


def _extension_task(job: Job) -> dict[str, Any]:
    """The job as the extension's ``Task``. A failed job's is ``completed`` (its result is an
    ``isError`` one): a tool's error is not a JSON-RPC error, the only kind ``failed`` is for,
    and a started job never meets one."""
    status = task_status(job)
    task = {**_task(job, status), "ttlMs": None}
    if status == "working":
        task["pollIntervalMs"] = POLL_INTERVAL_MS
    elif status == "failed":
        task["status"] = "completed"
    return task


def created_task(job: Job, text: str) -> dict[str, Any]:
    """``CreateTaskResult``; the tool's own text is what the model may be told meanwhile."""
    return {"task": task_of(job), "_meta": {IMMEDIATE_RESPONSE: text}}


def created_extension_task(job: Job) -> dict[str, Any]:
    """The extension's ``CreateTaskResult``: ``Result & Task``, flat (no inlined result)."""
    return {"resultType": "task", **_extension_task(job)}


def task_not_found() -> MCPError:
    return MCPError(
        INVALID_PARAMS, "Failed to retrieve task: Task not found", {"code": "task_not_found"}
    )


# -- whose tasks ----------------------------------------------------------------------------------


def tasks_of(caller: Caller, site: ToolRegistry) -> JobQuerySet:
    """The jobs this caller may see as tasks: its user's, within its token's ceiling."""
    jobs = Job.objects.visible_to(caller.user)
    ceiling = caller.bearer.ceiling
    if ceiling is not None:
        jobs = jobs.filter(operation__in=[tool.operation for tool in site if ceiling.allows(tool)])
    return jobs


def task_job(caller: Caller, site: ToolRegistry, task_id: str) -> Job:
    try:
        pk = uuid.UUID(task_id)
    except ValueError:
        raise task_not_found() from None
    job = tasks_of(caller, site).filter(pk=pk).first()
    if job is None:
        raise task_not_found()
    return job


def page_of(caller: Caller, site: ToolRegistry, cursor: str | None) -> dict[str, Any]:
    """Newest first, ``PAGE_SIZE`` at a time; the cursor is the last task's (created_at, id)."""
    jobs = tasks_of(caller, site).order_by("-created_at", "-pk")
    if cursor is not None:
        created_at, pk = _after(cursor)
        jobs = jobs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=pk))
    page = list(jobs[: PAGE_SIZE + 1])
    result: dict[str, Any] = {"tasks": [task_of(job) for job in page[:PAGE_SIZE]]}
    if len(page) > PAGE_SIZE:
        last = page[PAGE_SIZE - 1]
        mark = f"{last.created_at.isoformat()}|{last.pk}".encode()
        result["nextCursor"] = base64.urlsafe_b64encode(mark).decode()
    return result


def _after(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        created_at, _, pk = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(created_at), uuid.UUID(pk)
    except (ValueError, binascii.Error, UnicodeError):
        raise MCPError(INVALID_PARAMS, "Invalid cursor", {"code": "invalid_cursor"}) from None


# -- the methods ----------------------------------------------------------------------------------


class UpdateTaskRequestParams(types.RequestParams):
    """``tasks/update``: answers to a task's input requests (ours never ask for any)."""

    task_id: str
    input_responses: dict[str, Any]


class TaskMethods:
    """The tasks methods for one registry: 2025-11-25's ``tasks/get``, ``tasks/result``,
    ``tasks/list`` and ``tasks/cancel``; the extension's ``tasks/get``, ``tasks/update`` and
    ``tasks/cancel`` at 2026-07-28."""

    def __init__(self, site: ToolRegistry) -> None:
        self.site = site

    def register(self, server: Any) -> None:
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self.result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.list)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.cancel)
        server.add_request_handler("tasks/update", UpdateTaskRequestParams, self.update)
        server.middleware.append(route_tasks)
        server.extensions[EXTENSION] = {}  # server/discover only: 2025-11-25 has no extensions

    def caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        """The caller of a tasks method this request's revision has (and, at 2026-07-28, whose
        request declares the extension: ``-32021`` otherwise, whatever the task id)."""
        if is_modern(ctx) and ctx.method in ("tasks/get", "tasks/update", "tasks/cancel"):
            require_client_extension(ctx, EXTENSION)
        elif not offers_tasks(ctx) or ctx.method == "tasks/update":
            raise MCPError(METHOD_NOT_FOUND, "Method not found", ctx.method)
        return caller_of(ctx)

    async def job(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> Job:
        return await sync_to_async(task_job)(self.caller(ctx), self.site, task_id)

    async def get(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        job = await self.job(ctx, params.task_id)
        return {**COMPLETE, **extension_task(job)} if is_modern(ctx) else task_of(job)

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskRequestParams
    ) -> dict[str, Any]:
        """Acknowledged: our jobs never ask for input, so every response answers no key."""
        await self.job(ctx, params.task_id)
        return dict(COMPLETE)

    async def list(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        return await sync_to_async(page_of)(self.caller(ctx), self.site, params.cursor)

    async def result(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """The tool result the job came to, once it has come to one (within ``MCP_JOB_WAIT``),
        with progress meanwhile when the request carries a ``progressToken``."""
        caller = self.caller(ctx)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + assistant_settings.MCP_JOB_WAIT
        job = await self.job(ctx, params.task_id)
        related = {RELATED_TASK: {"taskId": str(job.pk)}}
        reported: tuple[int, str] | None = None
        while task_status(job) == "working":
            reported = await report_progress(ctx, job, reported, related)
            if loop.time() >= deadline:
                message = gettext(
                    "The task is still working: poll tasks/get, then ask for its result again."
                )
                raise MCPError(STILL_WORKING, message, {"code": "task_working"})
            await asyncio.sleep(JOB_POLL_SECONDS)
            job = await self.job(ctx, params.task_id)
        if not await sync_to_async(still_holds)(caller.bearer):
            answer = revoked_result()
        else:
            cancelled = task_status(job) == "cancelled"
            answer = finished_result(job, Job.Status.CANCELLED if cancelled else None)
        dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {**dumped, "_meta": related}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        """Cancel as the REST API and the chat do (``stop_job``: same permission, audited).

        At 2026-07-28 cancelling is acknowledged whatever the task's state (the extension's
        cancellation is cooperative): a finished task is left as it is, and nothing is audited.
        """
        caller = self.caller(ctx)
        job = await self.job(ctx, params.task_id)
        if task_status(job) != "working":
            if is_modern(ctx):
                return dict(COMPLETE)
            message = gettext("The task is already %(status)s: it cannot be cancelled.") % {
                "status": task_status(job)
            }
            raise MCPError(INVALID_PARAMS, message, {"code": "task_finished"})
        context = CallContext(
            user=caller.user,
            source="mcp",
            request_ip=caller.request_ip,
            site=self.site,
            ceiling=caller.bearer.ceiling,
            client=client_label(ctx, caller),
        )
        try:
            job = await sync_to_async(stop_job)(job.pk, context=context)
        except JobNotFound:
            raise task_not_found() from None
        return dict(COMPLETE) if is_modern(ctx) else task_of(job)
