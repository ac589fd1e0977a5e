"""MCP: the tool registry as a Model Context Protocol server, over Streamable HTTP and stdio.

A thin transport on the official SDK's low-level ``Server``. ``tools/list`` is the caller's
catalog (``catalog.visible_tools``, under their token's ceiling); ``tools/call`` goes through
``adispatch`` (source ``mcp``), so validation, denials, timeouts and the audit are every other
surface's. A confirmation opens the same ``PendingAction``: a guarded tool's plain one may be
answered in the client's own form (elicitation, when ``MCP_ELICITATION`` allows it); any other
is approved by the signed-in user on the approvals page, and the client's retry of the same call
returns what the approval ran (it never runs twice, and never opens a second action).

Both protocol revisions: 2025-11-25 (``initialize``, sessions, elicitation over the session's
back channel) and 2026-07-28 (stateless; elicitation is an ``input_required`` result whose
``requestState`` is signed with the project's secret, so any process can take the retry). A
background tool's job may be answered as a task in either (``tasks``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager, suppress
from typing import Any, TypeVar

import mcp_types as types
from asgiref.sync import sync_to_async
from django.utils.translation import gettext
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import METHOD_NOT_FOUND

from ... import __version__, telemetry
from ...access.approvals import policy_for
from ...core.cancellation import CancellationToken
from ...core.declaration import AssistantTool, RiskLevel
from ...core.registry import ToolRegistry, registry
from ...dispatch.calls import CallContext, Decision, DispatchCancelled, Outcome
from ...dispatch.catalog import visible_tools
from ...dispatch.door import adispatch
from ...exceptions import outage
from ...models import Job, PendingAction
from .callers import SCOPE_KEY, Caller, caller_of, client_label
from .confirmation import (
    ask,
    deliver,
    earlier_action,
    mark_requested,
    request_key,
    resumed,
    settled,
)
from .jobs import awaited_job
from .results import result_of, text_result
from .tasks import (
    CALL_AS_TASK,
    TaskMethods,
    created_extension_task,
    created_task,
    declares_extension,
    offers_tasks,
)

logger = logging.getLogger("assistant.mcp")

SERVER_NAME = "django-ops-assistant"

Answer = TypeVar("Answer")
# what a call that started a job answers: the job's result (waited for), or a task
JobAnswer = Callable[[ServerRequestContext[Any, Any], Caller, Outcome], Awaitable[Answer]]


# -- tools/list -----------------------------------------------------------------------------------


def title_of(tool: AssistantTool) -> str:
    """A short display title from the description: its first sentence."""
    first = tool.description.split(". ", 1)[0].splitlines()[0].rstrip(".")
    return first if len(first) <= 80 else first[:79].rstrip() + "…"


def mcp_tool(tool: AssistantTool, *, tasks: bool = False) -> types.Tool:
    """One tool as MCP lists it: the LLM catalog's schema, annotations from the declaration;
    with ``tasks``, a background tool may be called as a task."""
    read_only = tool.risk_level is RiskLevel.SAFE
    title = title_of(tool)
    execution = types.ToolExecution(task_support="optional") if tasks and tool.background else None
    return types.Tool(
        name=tool.operation,
        title=title,
        description=tool.description,
        input_schema=tool.parameters,
        annotations=types.ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=None if read_only else tool.risk_level is RiskLevel.DANGEROUS,
            idempotent_hint=tool.idempotent,
            open_world_hint=tool.open_world,
        ),
        execution=execution,
    )


# -- the server -----------------------------------------------------------------------------------


async def dispatched(name: str, arguments: Any, context: CallContext) -> Outcome:
    """``adispatch``, with the client's cancellation firing the call's stop token."""
    assert context.cancel is not None
    task = asyncio.ensure_future(adispatch(name, arguments, context=context))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        context.cancel.cancel()
        task.cancel()
        with suppress(DispatchCancelled, asyncio.CancelledError):
            await task
        raise


def build_server(*, site: ToolRegistry = registry, lifespan: Any = None) -> Server[Any]:
    """The MCP server for a registry (stdio passes a lifespan carrying its fixed caller)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = caller_of(ctx)
        tools = await sync_to_async(visible_tools)(
            caller.user, site=site, ceiling=caller.bearer.ceiling
        )
        return types.ListToolsResult(
            tools=[mcp_tool(tool, tasks=offers_tasks(ctx)) for tool in tools],
            ttl_ms=0,
            cache_scope="private",
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        """A call; at 2026-07-28 a background tool's job is a task when the request declares
        the tasks extension (the server's choice, never offered to one that does not)."""
        tool = site.find(params.name)
        as_task = tool is not None and tool.background and declares_extension(ctx)
        with traced(ctx, params):
            if as_task:
                return await answered(ctx, params, started_task)
            return await answered(ctx, params, awaited_job)

    async def call_as_task(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        """A task-augmented call: the job it starts is the task (other outcomes answer as usual)."""
        if not offers_tasks(ctx):  # reached by its name, not through route_tasks
            raise MCPError(METHOD_NOT_FOUND, "Method not found", CALL_AS_TASK)
        tool = site.find(params.name)
        # only a tool the caller sees is told apart: any other is refused by dispatch, as unknown
        if tool is not None and not tool.background and await shown_to(ctx, tool):
            message = gettext("%(tool)s does not run as a task: call it without params.task.") % {
                "tool": params.name
            }
            raise MCPError(METHOD_NOT_FOUND, message, {"code": "task_not_supported"})
        with traced(ctx, params):
            return await answered(ctx, params, started_task)

    async def shown_to(ctx: ServerRequestContext[Any, Any], tool: AssistantTool) -> bool:
        caller = caller_of(ctx)
        tools = await sync_to_async(visible_tools)(
            caller.user, site=site, ceiling=caller.bearer.ceiling
        )
        return any(shown.operation == tool.operation for shown in tools)

    async def answered(
        ctx: ServerRequestContext[Any, Any],
        params: types.CallToolRequestParams,
        on_job: JobAnswer[Answer],
    ) -> types.CallToolResult | types.InputRequiredResult | Answer:
        try:
            return await called(ctx, params, on_job)
        except Exception as exc:
            unavailable = outage(exc)
            if unavailable is None:
                raise
            return text_result(
                f"{unavailable.message} [{unavailable.code}]",
                data={"code": unavailable.code, "retry_after": unavailable.retry_after},
                error=True,
            )

    async def called(
        ctx: ServerRequestContext[Any, Any],
        params: types.CallToolRequestParams,
        on_job: JobAnswer[Answer],
    ) -> types.CallToolResult | types.InputRequiredResult | Answer:
        caller = caller_of(ctx)
        context = CallContext(
            user=caller.user,
            source="mcp",
            request_ip=caller.request_ip,
            cancel=CancellationToken(),
            site=site,
            ceiling=caller.bearer.ceiling,
            client=client_label(ctx, caller),
        )
        if params.request_state is not None:
            return await resumed(ctx, caller, context, params)
        arguments = params.arguments if params.arguments is not None else {}
        tool = site.find(params.name)
        key = ""
        if tool is not None and policy_for(tool).asks:
            key = request_key(caller, params.name, arguments)
            earlier = await sync_to_async(earlier_action)(caller, key)
            if earlier is not None:
                if not (earlier.status == PendingAction.Status.PENDING and earlier.is_expired):
                    return await settled(ctx, caller, context, earlier)
                await sync_to_async(deliver)(earlier)  # expired unanswered: ask anew
        outcome = await dispatched(params.name, arguments, context)
        if outcome.decision == Decision.CONFIRMATION_REQUESTED and outcome.pending_action:
            action = outcome.pending_action
            if key:
                await sync_to_async(mark_requested)(action, key)
            return await ask(ctx, caller, context, action)
        if outcome.ok and outcome.result is not None and outcome.result.task_id:
            return await on_job(ctx, caller, outcome)
        return result_of(outcome)

    options: dict[str, Any] = {"lifespan": lifespan} if lifespan is not None else {}
    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        instructions="The operations of this Django project you may use, as your permissions "
        "allow. Risky ones ask a human first: follow the approval link you are given.",
        on_list_tools=list_tools,
        **options,
    )
    # by hand, not on_call_tool=: its answer may be the extension's task, which that type omits
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    server.add_request_handler(CALL_AS_TASK, types.CallToolRequestParams, call_as_task)
    TaskMethods(site).register(server)
    server.middleware[:] = [untraced_tool_calls(each) for each in server.middleware]
    return server


def untraced_tool_calls(middleware: Any) -> Any:
    """The SDK's span middleware, leaving ``tools/call`` to ours (``traced``): a project whose
    own tracer provider is global would get two SERVER spans for each call otherwise, the SDK's
    and ours. Every other message keeps the SDK's span; other middleware is kept as it is."""
    if type(middleware).__name__ != "OpenTelemetryMiddleware":  # (its module is the SDK's private)
        return middleware

    async def spans_other_messages(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if ctx.method == "tools/call":
            return await call_next(ctx)
        return await middleware(ctx, call_next)

    return spans_other_messages


async def started_task(
    ctx: ServerRequestContext[Any, Any], caller: Caller, outcome: Outcome
) -> dict[str, Any]:
    """``CreateTaskResult`` for the job a call started, read back once its row is committed
    (so a ``tasks/get`` on any process finds it), in the request's revision's shape."""
    assert outcome.result is not None and outcome.result.task_id is not None
    job = await sync_to_async(Job.objects.get)(pk=outcome.result.task_id)
    if declares_extension(ctx):
        return created_extension_task(job)
    return created_task(job, outcome.result.text)


def stdio_lifespan(caller: Caller) -> Callable[[Server[Any]], Any]:
    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        yield {SCOPE_KEY: caller}

    return lifespan


def traced(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> AbstractContextManager[Any]:
    """A tools/call's server span, continuing the caller's trace (a no-op unless telemetry is on):
    from ``params._meta`` (``traceparent``/``tracestate``, MCP's SEP-414, on every transport,
    stdio included), else from the HTTP request's headers."""
    meta = params.meta if isinstance(params.meta, dict) else {}
    carrier = telemetry.carrier_of({k: v for k, v in meta.items() if isinstance(v, str)})
    if "traceparent" not in carrier:
        scope = getattr(ctx.request, "scope", None)
        carrier = telemetry.carrier_of(scope.get("headers") if isinstance(scope, dict) else None)
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": params.name,
        "gen_ai.operation.name": "execute_tool",
    }
    return telemetry.server_span(f"tools/call {params.name}", carrier, attributes)
