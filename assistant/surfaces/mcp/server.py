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
``requestState`` is signed with the project's secret, so any process can take the retry).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signing
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.request import validate_host
from django.urls import reverse
from django.utils import timezone
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken as SdkAccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ... import __version__
from ...access import oauth
from ...access.approvals import policy_for
from ...access.permissions import reread_access
from ...access.tokens import Bearer, aauthenticate_bearer, still_holds
from ...conf import assistant_settings
from ...core.cancellation import CancellationToken
from ...core.registry import AssistantTool, RiskLevel, ToolRegistry, registry
from ...dispatch.calls import CallContext, Decision, DispatchCancelled, Outcome
from ...dispatch.catalog import visible_tools
from ...dispatch.confirmation import acancel_action, aconfirm_action
from ...dispatch.door import adispatch
from ...exceptions import AssistantError, DatabaseUnavailable, outage
from ...models import Job, PendingAction
from .sessions import CappedSessionManager

logger = logging.getLogger("assistant.mcp")

SERVER_NAME = "django-ops-assistant"
SCOPE_KEY = "assistant.caller"  # where the HTTP view leaves the authenticated caller
APPROVAL = "approval"  # the key of the one input request a confirmation round sends
APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this action now (it runs once, as asked).",
        }
    },
    "required": ["approved"],
}
REQUEST_STATE_SALT = "assistant.mcp.request-state"
JOB_POLL_SECONDS = 0.25


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """Who an MCP request acts for, through which credential, and where its links point."""

    bearer: Bearer
    request_ip: str | None = None
    base_url: str = ""  # scheme and host of the request ("" for stdio: relative links)

    @property
    def user(self) -> Any:
        return self.bearer.user


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
    """The caller the HTTP view authenticated (or stdio's ``--user``)."""
    scope = getattr(ctx.request, "scope", None)
    caller = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    if caller is None and isinstance(ctx.lifespan_context, dict):
        caller = ctx.lifespan_context.get(SCOPE_KEY)
        if isinstance(caller, Caller):
            # stdio's one user object outlives every request: each reads the user's flags and
            # permissions afresh, as a request over HTTP or a CLI call does
            reread_access(caller.user)
    if not isinstance(caller, Caller):  # the view refuses such requests before the SDK sees them
        raise RuntimeError("an MCP request reached the server without an authenticated caller")
    return caller


def client_label(ctx: ServerRequestContext[Any, Any], caller: Caller) -> str:
    """The audit's client column: the MCP client's name and version, and the token's name."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    name = f"{info.name} {info.version}".strip() if info is not None else "MCP client"
    return f"{name} ({caller.bearer.name})"[:200]


# -- tools/list -----------------------------------------------------------------------------------


def title_of(tool: AssistantTool) -> str:
    """A short display title from the description: its first sentence."""
    first = tool.description.split(". ", 1)[0].splitlines()[0].rstrip(".")
    return first if len(first) <= 80 else first[:79].rstrip() + "…"


def mcp_tool(tool: AssistantTool) -> types.Tool:
    """One tool as MCP lists it: the LLM catalog's schema, annotations from the declaration."""
    read_only = tool.risk_level is RiskLevel.SAFE
    title = title_of(tool)
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
    )


# -- tools/call: results --------------------------------------------------------------------------


def text_result(text: str, *, data: Any = None, error: bool = False) -> types.CallToolResult:
    structured = None
    if data is not None:
        structured = json.loads(json.dumps(data, cls=DjangoJSONEncoder))
        if not isinstance(structured, dict):  # 2025-11-25 wants an object
            structured = {"result": structured}
    return types.CallToolResult(
        content=[types.TextContent(text=text or "(no text)")],
        structured_content=structured,
        is_error=error,
    )


def result_of(outcome: Outcome) -> types.CallToolResult:
    """An outcome as a tool result: text carries the result's text, structuredContent its data;
    anything else (a refusal, a failure, a rejection) is an ``isError`` result naming its code."""
    result = outcome.result
    if outcome.error is None and result is not None and (outcome.ok or _benign(outcome)):
        return text_result(result.text, data=result.data)
    code = outcome.code or outcome.decision
    return text_result(
        f"{outcome.text} [{code}]",
        data={"code": code, "decision": outcome.decision, "message": outcome.text},
        error=True,
    )


def _benign(outcome: Outcome) -> bool:
    """Decisions that are answers, not errors (a prepare hook's question)."""
    return outcome.decision == Decision.CLARIFY


def stored_result(action: PendingAction) -> types.CallToolResult:
    """What a decided action came to, as the approval stored it."""
    result = action.result or {}
    decision = result.get("decision") or action.status
    if decision in (Decision.EXECUTED, Decision.CONFIRMED):
        return text_result(result.get("text", ""), data=result.get("data"))
    code = result.get("code") or decision
    text = result.get("text") or f"This {action.operation} request was {action.status}."
    return text_result(
        f"{text} [{code}]", data={"code": code, "decision": decision, "message": text}, error=True
    )


def approval_url(caller: Caller, action: PendingAction) -> str:
    base = assistant_settings.PUBLIC_URL or caller.base_url
    return f"{base.rstrip('/')}{reverse('assistant:approvals')}?action={action.pk}"


def waiting_result(caller: Caller, action: PendingAction) -> types.CallToolResult:
    """A confirmation this client cannot take: where the human approves, and what to do next."""
    url = approval_url(caller, action)
    expires = timezone.localtime(action.expires_at).isoformat(timespec="seconds")
    text = (
        f"Waiting for approval: {action.summary}\n"
        f"Approve or reject it at {url} (until {expires}), then call {action.operation} again "
        "with the same arguments for its result."
    )
    return text_result(
        text,
        data={
            "status": Decision.CONFIRMATION_REQUESTED.value,
            "action_id": str(action.pk),
            "approval_url": url,
            "expires_at": action.expires_at.isoformat(),
            "policy": action.policy,
        },
    )


# -- tools/call: confirmation ---------------------------------------------------------------------


def request_key(caller: Caller, operation: str, arguments: Any) -> str:
    """The identity of a call, to find the action an earlier identical call opened."""
    canonical = json.dumps(
        [caller.user.pk, caller.bearer.kind, caller.bearer.token_id, operation, arguments],
        sort_keys=True,
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def earlier_action(caller: Caller, key: str) -> PendingAction | None:
    """The action an identical earlier call opened whose result no retry has taken yet."""
    return (
        PendingAction.objects.filter(user=caller.user, request_key=key, delivered_at__isnull=True)
        .order_by("-created_at")
        .first()
    )


def deliver(action: PendingAction) -> bool:
    """Hand a decided action's result to one retry (the first to ask; False for the others)."""
    return bool(
        PendingAction.objects.filter(pk=action.pk, delivered_at__isnull=True).update(
            delivered_at=timezone.now()
        )
    )


def mark_requested(action: PendingAction, key: str) -> None:
    PendingAction.objects.filter(pk=action.pk).update(request_key=key)
    action.request_key = key


def seal(action: PendingAction, caller: Caller) -> str:
    return signing.dumps(
        {"action": str(action.pk), "user": caller.user.pk, "token": caller.bearer.token_id},
        salt=REQUEST_STATE_SALT,
    )


def unseal(state: str, caller: Caller) -> str | None:
    """The action id a ``requestState`` names, if this server signed it for this caller."""
    try:
        payload = signing.loads(
            state, salt=REQUEST_STATE_SALT, max_age=assistant_settings.CONFIRMATION_TTL + 60
        )
    except signing.BadSignature:
        return None
    if (
        not isinstance(payload, dict)
        or payload.get("user") != caller.user.pk
        or payload.get("token") != caller.bearer.token_id
    ):
        return None
    action = payload.get("action")
    return action if isinstance(action, str) else None


def elicits_form(action: PendingAction, capabilities: types.ClientCapabilities | None) -> bool:
    """Whether the client's own form may take this decision: a guarded tool's plain confirmation
    (no reason, no phrase, no second person), where settings allow it and the client can."""
    if assistant_settings.MCP_ELICITATION != "guarded":
        return False
    if action.policy != PendingAction.Policy.CONFIRM or action.confirm_phrase:
        return False
    if action.risk != RiskLevel.GUARDED.value:
        return False
    elicitation = capabilities.elicitation if capabilities is not None else None
    # an empty elicitation capability means form (the 2025-06-18 meaning, kept since)
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def elicits_url(capabilities: types.ClientCapabilities | None) -> bool:
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def ask(
    ctx: ServerRequestContext[Any, Any], caller: Caller, context: CallContext, action: PendingAction
) -> types.CallToolResult | types.InputRequiredResult:
    """Put a pending action to the human: in the client's form, at our approvals page, or say where."""
    capabilities = ctx.session.client_capabilities
    if elicits_form(action, capabilities):
        message = f"Approve this action? {action.summary}"
        if is_modern(ctx):
            return types.InputRequiredResult(
                input_requests={
                    APPROVAL: types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=message, requested_schema=APPROVE_SCHEMA
                        )
                    )
                },
                request_state=seal(action, caller),
            )
        remaining = (action.expires_at - timezone.now()).total_seconds()
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                answer = await ctx.session.elicit_form(
                    message, APPROVE_SCHEMA, related_request_id=ctx.request_id
                )
        except TimeoutError:
            return waiting_result(caller, action)
        return await answered(caller, context, action, answer)
    url = approval_url(caller, action)
    if elicits_url(capabilities):
        message = f"Approve or reject in your browser: {action.summary}"
        if is_modern(ctx):
            return types.InputRequiredResult(
                input_requests={
                    APPROVAL: types.ElicitRequest(
                        params=types.ElicitRequestURLParams(message=message, url=url)
                    )
                },
                request_state=seal(action, caller),
            )
        try:
            async with asyncio.timeout(30):
                await ctx.session.elicit_url(
                    message, url, str(action.pk), related_request_id=ctx.request_id
                )
        except TimeoutError:
            pass
    return waiting_result(caller, action)


async def answered(
    caller: Caller, context: CallContext, action: PendingAction, answer: Any
) -> types.CallToolResult:
    """The client's form answer, run through the same confirm and reject as every surface."""
    approved = (
        getattr(answer, "action", None) == "accept"
        and isinstance(getattr(answer, "content", None), dict)
        and answer.content.get("approved") is True
    )
    refused = getattr(answer, "action", None) == "decline" or (
        getattr(answer, "action", None) == "accept" and not approved
    )
    if not approved and not refused:  # dismissed: the action waits, answerable elsewhere
        return waiting_result(caller, action)
    try:
        if approved:
            outcome = await aconfirm_action(action.pk, context=context)
        else:
            outcome = await acancel_action(
                action.pk, reason="declined in the MCP client", context=context
            )
    except AssistantError as exc:
        fresh = await sync_to_async(PendingAction.objects.get)(pk=action.pk)
        decided = fresh.status != PendingAction.Status.PENDING and fresh.result is not None
        if decided and await sync_to_async(deliver)(fresh):
            return stored_result(fresh)
        return text_result(f"{exc.message} [{exc.code}]", data={"code": exc.code}, error=True)
    await sync_to_async(deliver)(action)
    return result_of(outcome)


async def resumed(
    ctx: ServerRequestContext[Any, Any],
    caller: Caller,
    context: CallContext,
    params: types.CallToolRequestParams,
) -> types.CallToolResult | types.InputRequiredResult:
    """A 2026-07-28 retry carrying our ``requestState`` (and, maybe, the human's answer).

    The retry must be the call that opened the action (its request key): a state replayed with
    other arguments would answer, or approve, an action that is not the one being called.
    """
    action_id = unseal(params.request_state or "", caller)
    arguments = params.arguments if params.arguments is not None else {}
    action = (
        await sync_to_async(
            PendingAction.objects.filter(
                pk=action_id,
                user=caller.user,
                operation=params.name,
                request_key=request_key(caller, params.name, arguments),
            ).first
        )()
        if action_id is not None
        else None
    )
    if action is None:
        return text_result(
            "This confirmation is not valid here: call the tool again. [invalid_request_state]",
            data={"code": "invalid_request_state"},
            error=True,
        )
    return await settled(ctx, caller, context, action, (params.input_responses or {}).get(APPROVAL))


async def settled(
    ctx: ServerRequestContext[Any, Any],
    caller: Caller,
    context: CallContext,
    action: PendingAction,
    answer: Any = None,
) -> types.CallToolResult | types.InputRequiredResult:
    """An earlier call's action, as it stands: its result once decided, else ask (again)."""
    if action.status == PendingAction.Status.PENDING and not action.is_expired:
        if answer is not None and elicits_form(action, ctx.session.client_capabilities):
            return await answered(caller, context, action, answer)
        if answer is not None:  # a URL round came back: the decision is made on our page
            return waiting_result(caller, action)
        return await ask(ctx, caller, context, action)
    if action.status == PendingAction.Status.CONFIRMED and action.result is None:
        return waiting_result(caller, action)  # being run right now, by its approval
    if await sync_to_async(deliver)(action):
        if action.status == PendingAction.Status.PENDING:  # expired before anyone decided
            return text_result(
                f"This {action.operation} request expired; call the tool again to ask anew. [expired]",
                data={"code": "expired"},
                error=True,
            )
        return stored_result(action)
    return text_result(
        "This request's result was already returned. [already_decided]",
        data={"code": "already_decided"},
        error=True,
    )


# -- tools/call: jobs -----------------------------------------------------------------------------


async def awaited_job(
    ctx: ServerRequestContext[Any, Any], caller: Caller, outcome: Outcome
) -> types.CallToolResult:
    """A call that started a job: progress while the request is open, then the job's result."""
    assert outcome.result is not None and outcome.result.task_id is not None
    progress_token = ctx.meta.get("progress_token") if ctx.meta else None
    wait = assistant_settings.MCP_JOB_WAIT
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    reported: tuple[int, str] | None = None
    query = Job.objects.visible_to(caller.user).filter(pk=outcome.result.task_id)
    while True:
        if not await sync_to_async(still_holds)(caller.bearer):
            # revoked (or its user deactivated) while the call waited: the job goes on, but
            # what it comes to is not this credential's to see any more
            message = (
                "This token stopped holding while the call waited (revoked, expired, or its "
                "user deactivated); the job goes on."
            )
            return text_result(
                f"{message} [token_revoked]",
                data={"code": "token_revoked", "message": message},
                error=True,
            )
        job = await sync_to_async(query.first)()
        if job is None:
            return result_of(outcome)
        if progress_token is not None and (job.progress, job.progress_message) != reported:
            reported = (job.progress, job.progress_message)
            await ctx.session.send_progress_notification(
                progress_token,
                float(job.progress),
                100.0,
                job.progress_message or None,
                related_request_id=str(ctx.request_id),
            )
        if job.is_finished:
            data = {"task_id": str(job.pk), "status": job.status, "data": job.result_data}
            if job.status == Job.Status.SUCCEEDED:
                return text_result(job.result or f"{job.operation} succeeded.", data=data)
            text = job.error or f"{job.operation} {job.status}."
            return text_result(f"{text} [{job.status}]", data=data, error=True)
        if loop.time() >= deadline:
            return text_result(
                f"{outcome.result.text}\nStill running: ask get_task_status with task_id "
                f"{job.pk} for its progress and result.",
                data={"task_id": str(job.pk), "status": job.status, "progress": job.progress},
            )
        await asyncio.sleep(JOB_POLL_SECONDS)


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
            tools=[mcp_tool(tool) for tool in tools], ttl_ms=0, cache_scope="private"
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            return await called(ctx, params)
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
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
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
            return await awaited_job(ctx, caller, outcome)
        return result_of(outcome)

    options: dict[str, Any] = {"lifespan": lifespan} if lifespan is not None else {}
    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        instructions="The operations of this Django project you may use, as your permissions "
        "allow. Risky ones ask a human first: follow the approval link you are given.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        **options,
    )
    return server


def stdio_lifespan(caller: Caller) -> Callable[[Server[Any]], Any]:
    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        yield {SCOPE_KEY: caller}

    return lifespan


# -- Streamable HTTP: one session manager per event loop, started on first use --------------------


class Endpoint:
    """The SDK's session manager, run lazily inside whatever loop serves requests.

    daphne sends no ASGI lifespan and Django's handler takes none, so the manager's task group
    starts with the first request of each event loop and lives as long as the loop.
    """

    def __init__(self, site: ToolRegistry = registry) -> None:
        self.site = site
        self._managers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, StreamableHTTPSessionManager
        ] = weakref.WeakKeyDictionary()
        self._runners: set[asyncio.Task[None]] = set()

    async def manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        manager = self._managers.get(loop)
        if manager is not None:
            return manager
        manager = CappedSessionManager(
            app=build_server(site=self.site),
            stateless=False,
            # Host is checked by Django (ALLOWED_HOSTS) and Origin by the view, before the SDK
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._managers[loop] = manager
        started = asyncio.Event()

        async def run() -> None:
            async with manager.run():
                started.set()
                await asyncio.Event().wait()  # until the loop is closed (cancelled with it)

        runner = loop.create_task(run(), name="assistant-mcp-session-manager")
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)
        await started.wait()
        return manager

    async def handle(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        manager = await self.manager()
        await manager.handle_request(scope, receive, send)


endpoint = Endpoint()


def sdk_user(bearer: Bearer) -> AuthenticatedUser:
    """The SDK's view of the caller: a session may only be used by the credential that opened it."""
    return AuthenticatedUser(
        SdkAccessToken(
            token="",
            client_id=f"{bearer.kind}:{bearer.token_id or ''}",
            subject=str(bearer.user.pk),
            scopes=sorted(bearer.scopes),
        )
    )


# -- the Django view: authenticate, check the origin, hand the request to the SDK ----------------


TRANSPORT_CODES = {
    400: "bad_request",
    404: "session_not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    503: "mcp_unavailable",
}


def refused(status: int, code: str, detail: str, **headers: str) -> HttpResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=status)
    for name, value in headers.items():
        response.headers[name.replace("_", "-")] = value
    return response


def unavailable_response(exc: DatabaseUnavailable) -> HttpResponse:
    """The 503 every surface answers while the database is down."""
    return refused(exc.status, exc.code, exc.message, Retry_After=str(exc.retry_after))


def origin_allowed(request: HttpRequest) -> bool:
    """A browser's cross-site request is refused (DNS rebinding); the host rules are Django's own."""
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return not origin
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # (a malformed one: "http://[::1")
        return False
    if netloc and netloc == request.get_host():
        return True
    if origin in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        return True
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    host, _, _ = netloc.rpartition(":") if netloc.count(":") == 1 else (netloc, "", "")
    return bool(netloc) and validate_host(host or netloc, allowed)


async def serve(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The Streamable HTTP endpoint: a bearer token (never a cookie), then the SDK's transport."""
    try:
        request.get_host()  # ALLOWED_HOSTS, as for every Django view
    except DisallowedHost:
        return refused(400, "bad_host", "This host is not allowed.")
    if not origin_allowed(request):
        return refused(403, "origin_not_allowed", "Requests from this origin are not allowed.")
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return refused(
            401,
            "not_authenticated",
            "Send a bearer token: Authorization: Bearer <token>.",
            WWW_Authenticate=oauth.challenge(request),
        )
    try:
        bearer = await aauthenticate_bearer(key, resource=oauth.resource_of(request))
    except Exception as exc:
        unavailable = outage(exc)
        if unavailable is not None:
            return unavailable_response(unavailable)
        if not isinstance(exc, AssistantError):
            raise
        return refused(
            401,
            exc.code,
            exc.message,
            WWW_Authenticate=oauth.challenge(request, error="invalid_token"),
        )
    caller = Caller(
        bearer=bearer,
        request_ip=request.META.get("REMOTE_ADDR") or None,
        base_url=f"{request.scheme}://{request.get_host()}",
    )
    scope = dict(getattr(request, "scope", None) or _scope_of(request))
    scope[SCOPE_KEY] = caller
    scope["user"] = sdk_user(bearer)
    try:
        body = request.body
    except RequestDataTooBig:  # past DATA_UPLOAD_MAX_MEMORY_SIZE, before the SDK's own limit
        return refused(413, "request_too_large", "The request body is too large.")
    return await _bridged(scope, body)


def _scope_of(request: HttpRequest) -> dict[str, Any]:
    """An ASGI scope for a request that came without one (a WSGI server, Django's test client)."""
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode(),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "", 0),
        "server": (request.get_host(), 0),
    }


async def _bridged(scope: dict[str, Any], body: bytes) -> HttpResponse | StreamingHttpResponse:
    """Run the SDK's ASGI handler for one request and answer with what it sends (streamed)."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    gone = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        await messages.put(dict(message))

    async def handle() -> None:
        try:
            await endpoint.handle(scope, receive, send)
        finally:
            await messages.put({"type": "assistant.done"})

    task = asyncio.ensure_future(handle())
    try:
        start = await messages.get()
        first = await messages.get() if start["type"] == "http.response.start" else start
    except asyncio.CancelledError:  # the client left before the answer began (Django noticed)
        gone.set()
        with suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), 5)
        raise
    if start["type"] != "http.response.start":
        gone.set()
        await task
        logger.error("The MCP transport answered without a response")
        return refused(503, "mcp_unavailable", "The MCP endpoint could not answer; try again.")
    status = start["status"]
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
    if first["type"] != "http.response.body" or not first.get("more_body", False):
        gone.set()
        await task
        body = first.get("body", b"")
        kind = next((v for k, v in headers if k.lower() == "content-type"), "")
        if status >= 400 and not kind.startswith("application/json"):
            # the transport's own refusals (a wrong content type or method) speak JSON too
            detail = body.decode("utf-8", "replace").strip() or "The request was refused."
            return refused(status, TRANSPORT_CODES.get(status, "bad_request"), detail)
        response = HttpResponse(body, status=status)
        _copy_headers(response, headers)
        return response

    async def chunks() -> AsyncIterator[bytes]:
        message = first
        try:
            while message["type"] == "http.response.body":
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    break
                message = await messages.get()
        finally:
            gone.set()  # the client went away, or the stream ended: the SDK cleans up
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5)
                except (TimeoutError, asyncio.CancelledError):
                    task.cancel()

    streaming = StreamingHttpResponse(chunks(), status=status)
    _copy_headers(streaming, headers)
    streaming.headers.setdefault("X-Accel-Buffering", "no")
    return streaming


def _copy_headers(
    response: HttpResponse | StreamingHttpResponse, headers: list[tuple[str, str]]
) -> None:
    for name, value in headers:
        if name.lower() not in ("content-length",):
            response.headers[name] = value
