"""The only door into a handler: look up → validate → authorize → confirmation gate → run → audit."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.apps import apps
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied

from .conf import assistant_settings
from .exceptions import (
    AssistantError,
    InvalidEntities,
    PermissionDenied,
    UnknownOperation,
)
from .lifecycle import CancellationToken, Cancelled
from .models import AuditEntry, Conversation, PendingAction
from .permissions import UserAccess, aaccess_for, access_for, denials
from .redaction import redact_text, sensitive_values
from .registry import AssistantTool, ToolCall, ToolRegistry, ToolResult, registry
from .storable import UNSTORABLE_CHARACTERS, plain, storable, storable_text

logger = logging.getLogger("assistant.dispatch")
Decision = AuditEntry.Decision

# HTTP status for each decision that is not an error; errors carry their own.
DECISION_STATUS = {
    Decision.EXECUTED: 200,
    Decision.FAILED: 200,
    Decision.CONFIRMED: 200,
    Decision.CANCELLED: 200,
    Decision.CONFIRMATION_REQUESTED: 202,
}


@dataclass(kw_only=True, slots=True)
class Outcome:
    """What one dispatch decided, with the result or the error a transport should show."""

    operation: str
    decision: str
    entities: dict[str, Any]
    tool: AssistantTool | None = None
    result: ToolResult | None = None
    pending_action: PendingAction | None = None
    error: AssistantError | None = None
    error_summary: str = ""
    audit_decision: str | None = None
    audit_id: int | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.decision in (Decision.EXECUTED, Decision.CONFIRMED)

    @property
    def status(self) -> int:
        if self.decision in DECISION_STATUS:
            return DECISION_STATUS[Decision(self.decision)]
        return self.error.status if self.error is not None else 400

    @property
    def code(self) -> str | None:
        return self.error.code if self.error is not None else None

    @property
    def text(self) -> str:
        if self.result is not None:
            return self.result.text
        if self.pending_action is not None and self.decision == Decision.CONFIRMATION_REQUESTED:
            return self.pending_action.summary
        return self.error.message if self.error is not None else ""


def jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """Validated entities as plain, storable JSON (what a pending action stores and re-validates)."""
    stored: dict[str, Any] = storable(values)
    return stored


def audit_entities(tool: AssistantTool | None, raw: Any) -> dict[str, Any]:
    """The entities as they may be stored: sensitive and unrecognised values redacted."""
    if not raw:
        return {}
    placeholder = assistant_settings.REDACTED
    if not isinstance(raw, dict):
        return {"entities": placeholder}
    known = tool.entity_map if tool is not None else {}
    sensitive = tool.sensitive_entities if tool is not None else frozenset()
    visible = {
        str(name): (value if name in known and name not in sensitive else placeholder)
        for name, value in raw.items()
    }
    return jsonable(visible)


def redacted(operation: Any, entities: Any, site: ToolRegistry = registry) -> dict[str, Any]:
    """Entities as they may be shown (chat, API) — the same view the audit stores."""
    tool = site._tools.get(operation) if isinstance(operation, str) else None
    return audit_entities(tool, entities)


def write_audit(call: _Call, outcome: Outcome) -> int:
    """Append one audit entry for a finished call: the single place the trail is written."""
    user = call.user if call.user is not None and call.user.is_authenticated else None
    tool = call.tool
    return AuditEntry.objects.create(
        user=user,
        username=user.get_username() if user is not None else "",
        operation=storable_text(call.operation[:64]) if isinstance(call.operation, str) else "",
        domain=tool.domain if tool else "",
        risk_level=tool.risk_level.value if tool else "",
        decision=outcome.audit_decision or outcome.decision,
        entities=storable(outcome.entities),
        duration_ms=outcome.duration_ms,
        error=storable_text(outcome.error_summary),
        source=call.source,
        request_ip=call.request_ip,
        conversation=call.conversation,
        pending_action=call.action,
    ).pk


async def awrite_audit(call: _Call, outcome: Outcome) -> int:
    return await sync_to_async(write_audit)(call, outcome)


def _error_summary(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:1997] + "..."


def _as_result(value: Any, operation: str) -> ToolResult:
    if isinstance(value, str):
        value = ToolResult(text=value)
    if not isinstance(value, ToolResult):
        raise TypeError(f"{operation} returned {type(value).__name__}, not ToolResult")
    # What a handler returns is stored (text, actions) and rendered: make it storable (the
    # common case, already storable, is returned as it is: this runs on every call).
    if (
        isinstance(value.text, str)
        and UNSTORABLE_CHARACTERS.search(value.text) is None
        and (not value.actions or plain(value.actions))
        and (value.data is None or plain(value.data))
    ):
        return value
    # bytes, sets, objects: what the JSON renderer and the columns would choke on, made plain
    return replace(
        value,
        text=storable_text(str(value.text)),
        actions=storable(value.actions),
        data=value.data if value.data is None or plain(value.data) else storable(value.data),
    )


def _failure(tool: AssistantTool, exc: Exception) -> tuple[str, AssistantError]:
    """Map what a handler raised to a decision and the error its user sees."""
    if isinstance(exc, AssistantError):
        if isinstance(exc, PermissionDenied):
            return Decision.DENIED, exc
        if isinstance(exc, InvalidEntities):
            return Decision.INVALID, exc
        return Decision.FAILED, exc
    if isinstance(exc, DjangoPermissionDenied):
        return Decision.DENIED, PermissionDenied(str(exc) or "Permission denied.")
    logger.exception("Tool %s raised", tool.operation, exc_info=exc)
    return Decision.FAILED, AssistantError(
        f"{tool.operation} failed unexpectedly; the error has been logged.", code="tool_failed"
    )


def _confirmation_summary(tool: AssistantTool, entities: dict[str, Any]) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in entities.items())
    return f"{tool.operation}({shown}) is {tool.risk_level} and needs your confirmation."


def _resolve_instance(tool: AssistantTool, values: dict[str, Any]) -> Any:
    entity, label = tool.object_check  # type: ignore[misc]
    model = apps.get_model(label)
    value = values.get(entity)
    instance = None
    if value is not None:
        try:
            instance = model._default_manager.filter(pk=value).first()
        except (ValueError, TypeError):
            instance = None
    return instance


def _no_such_object(tool: AssistantTool) -> InvalidEntities:
    entity, label = tool.object_check  # type: ignore[misc]
    return InvalidEntities(
        {entity: f"no {label} with this id that you may use"}, operation=tool.operation
    )


class _Call:
    """One dispatch in flight: the pieces the sync and async paths share."""

    __slots__ = (
        "access",
        "action",
        "cancel",
        "conversation",
        "instance",
        "operation",
        "raw",
        "request_ip",
        "session",
        "site",
        "source",
        "started",
        "tool",
        "toolset",
        "user",
        "values",
    )

    def __init__(
        self,
        operation: str,
        raw: Any,
        user: Any,
        conversation: Conversation | None,
        source: str,
        request_ip: str | None,
        site: ToolRegistry,
        cancel: CancellationToken | None = None,
        session: Any = None,
    ) -> None:
        self.started = perf_counter()
        self.cancel = cancel
        self.session = session
        self.toolset: Any = None
        self.operation = operation
        self.raw = raw
        self.user = user
        self.conversation = conversation
        self.source = source
        self.request_ip = request_ip
        self.site = site
        self.tool: AssistantTool | None = None
        self.values: dict[str, Any] = {}
        self.access: UserAccess | None = None
        self.action: PendingAction | None = None
        self.instance: Any = None

    def check(self) -> Outcome | None:
        """Look up (unless the caller already did) and validate; an Outcome stops the call."""
        if self.tool is None:
            try:
                self.tool = self.site.get(self.operation)
            except UnknownOperation as exc:
                return self.stop(Decision.UNKNOWN, exc)
        try:
            self.values = self.tool.validate(self.raw)
        except InvalidEntities as exc:
            return self.stop(Decision.INVALID, exc)
        return None

    def authorize(self) -> Outcome | None:
        """Tool-level permission check against the (already loaded) access snapshot."""
        assert self.tool is not None and self.access is not None
        if denials(self.access, self.tool):
            return self.stop(
                Decision.DENIED,
                PermissionDenied(f"You do not have permission to use {self.tool.operation}."),
            )
        return None

    def authorize_instance(self) -> Outcome | None:
        """Object-level check; a missing or forbidden instance look the same to the caller."""
        assert self.tool is not None and self.access is not None
        if self.tool.object_check is None:
            return None
        self.instance = _resolve_instance(self.tool, self.values)
        if self.instance is None:
            return self.stop(Decision.INVALID, _no_such_object(self.tool))
        if denials(self.access, self.tool, self.instance):
            # The caller sees what a missing instance gives; only the audit says denied.
            outcome = self.stop(Decision.INVALID, _no_such_object(self.tool))
            outcome.audit_decision = Decision.DENIED
            return outcome
        return None

    def tool_call(self) -> ToolCall:
        assert self.tool is not None
        return ToolCall(
            tool=self.tool,
            entities=self.values,
            user=self.user,
            conversation=self.conversation,
            settings=assistant_settings,
            source=self.source,
            request_ip=self.request_ip,
            pending_action=self.action,
            instance=self.instance,
            cancel=self.cancel or CancellationToken(),
            toolset=self.toolset,
            session=self.session,
        )

    def open_action(self) -> Outcome:
        assert self.tool is not None
        stored = jsonable(self.values)
        action = PendingAction.open(
            user=self.user,
            operation=self.tool.operation,
            entities=stored,
            ttl_seconds=float(assistant_settings.CONFIRMATION_TTL),
            conversation=self.conversation,
            summary=_confirmation_summary(self.tool, audit_entities(self.tool, stored)),
        )
        self.action = action
        return self.finish(Decision.CONFIRMATION_REQUESTED)

    def finished(self, value: Any, confirmed: bool) -> Outcome:
        assert self.tool is not None
        try:
            result = _as_result(value, self.tool.operation)
        except TypeError as exc:
            return self.failed(exc)
        return self.finish(Decision.CONFIRMED if confirmed else Decision.EXECUTED, result=result)

    def failed(self, exc: Exception) -> Outcome:
        assert self.tool is not None
        decision, error = _failure(self.tool, exc)
        secrets = sensitive_values(self.tool, self.values)
        return self.finish(
            decision, error=error, error_summary=redact_text(_error_summary(exc), secrets)
        )

    def stop(self, decision: str, error: AssistantError) -> Outcome:
        return self.finish(decision, error=error, error_summary=error.message)

    def finish(
        self,
        decision: str,
        *,
        result: ToolResult | None = None,
        error: AssistantError | None = None,
        error_summary: str = "",
    ) -> Outcome:
        duration_ms = (perf_counter() - self.started) * 1000
        return Outcome(
            operation=self.operation,
            decision=str(decision),
            entities=audit_entities(self.tool, self.raw),
            tool=self.tool,
            result=result,
            pending_action=self.action,
            error=error,
            error_summary=error_summary,
            duration_ms=duration_ms,
        )


def _audited(call: _Call, outcome: Outcome) -> Outcome:
    outcome.audit_id = write_audit(call, outcome)
    return outcome


async def _aaudited(call: _Call, outcome: Outcome) -> Outcome:
    outcome.audit_id = await awrite_audit(call, outcome)
    return outcome


def _run_sync(call: _Call, confirmed: bool) -> Outcome:
    tool = call.tool
    assert tool is not None
    if tool.timeout is not None:
        return _run_sync_with_deadline(call, confirmed)
    try:
        if tool.is_async:
            value = async_to_sync(_awaited)(tool, call.tool_call(), call.values)
        else:
            value = tool.handler(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return _ended(call, value, confirmed)


def _run_sync_with_deadline(call: _Call, confirmed: bool) -> Outcome:
    """A thread cannot be interrupted: at the deadline the handler's token fires, and whatever
    it returns afterwards is discarded as a timeout (an async handler is cut off outright)."""
    tool = call.tool
    assert tool is not None and tool.timeout is not None
    expired = threading.Event()
    call.cancel = deadline_token = (call.cancel or CancellationToken()).child()

    def expire() -> None:
        expired.set()
        deadline_token.cancel()

    timer = threading.Timer(tool.timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        if tool.is_async:
            value = async_to_sync(_awaited)(tool, call.tool_call(), call.values)
        else:
            value = tool.handler(call.tool_call(), **call.values)
    except TimeoutError as exc:
        return _timed_out(call) if tool.is_async else call.failed(exc)
    except Exception as exc:
        return _timed_out(call) if expired.is_set() else call.failed(exc)
    finally:
        timer.cancel()
    if expired.is_set():
        return _timed_out(call)
    return _ended(call, value, confirmed)


def _ended(call: _Call, value: Any, confirmed: bool) -> Outcome:
    """A handler returned: its result, unless the run was stopped meanwhile."""
    if call.cancel is not None and call.cancel.is_cancelled:
        return call.finish(
            Decision.CANCELLED,
            result=_as_result(value, call.operation) if value is not None else None,
            error=Cancelled("Stopped while running."),
            error_summary="stopped while running",
        )
    return call.finished(value, confirmed)


async def _run_async(call: _Call, confirmed: bool) -> Outcome:
    tool = call.tool
    assert tool is not None
    if tool.timeout is not None:
        call.cancel = (call.cancel or CancellationToken()).child()
    tool_call = call.tool_call()
    try:
        if tool.is_async:
            running = tool.handler(tool_call, **call.values)
        else:
            running = sync_to_async(tool.handler)(tool_call, **call.values)
        if tool.timeout is None:
            value = await running
        else:
            value = await asyncio.wait_for(running, tool.timeout)
    except TimeoutError:
        if tool.timeout is None:
            return call.failed(TimeoutError("timed out"))
        assert call.cancel is not None
        call.cancel.cancel()  # a sync handler in its thread sees its token fire
        return _timed_out(call)
    except asyncio.CancelledError:
        # The run was stopped while the handler ran: the audit still says so.
        outcome = call.finish(
            Decision.CANCELLED,
            error=Cancelled("Stopped while running."),
            error_summary="stopped while running",
        )
        await asyncio.shield(_aaudited(call, outcome))
        raise DispatchCancelled(outcome) from None
    except Exception as exc:
        return call.failed(exc)
    return call.finished(value, confirmed)


async def _awaited(tool: AssistantTool, tool_call: ToolCall, values: dict[str, Any]) -> Any:
    """An async handler run from sync code, cut off at its timeout like on the async path."""
    running = tool.handler(tool_call, **values)
    if tool.timeout is None:
        return await running
    return await asyncio.wait_for(running, tool.timeout)


def _timed_out(call: _Call) -> Outcome:
    from .exceptions import ToolTimeout

    assert call.tool is not None
    error = ToolTimeout(
        f"{call.tool.operation} took longer than {call.tool.timeout:g} s and was stopped."
    )
    return call.finish(Decision.TIMEOUT, error=error, error_summary=error.message)


def _decide_sync(call: _Call) -> Outcome:
    """Everything between lookup and run on the sync path."""
    outcome = call.check()
    if outcome is None:
        call.access = access_for(call.user)
        outcome = call.authorize() or call.authorize_instance()
    if outcome is None:
        if call.tool.requires_confirmation:  # type: ignore[union-attr]
            return call.open_action()
        return _run_sync(call, confirmed=False)
    return outcome


def dispatch(
    operation: str,
    entities: dict[str, Any] | None = None,
    *,
    user: Any,
    conversation: Conversation | None = None,
    source: str = "api",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
    cancel: CancellationToken | None = None,
    session: Any = None,
) -> Outcome:
    """Run one operation for ``user`` through every check, writing exactly one audit entry."""
    tool = site._tools.get(operation) if isinstance(operation, str) else None
    if tool is not None and tool.toolset is not None:
        # Toolsets live on an event loop: their tools take the async path.
        return async_to_sync(adispatch)(
            operation,
            entities,
            user=user,
            conversation=conversation,
            source=source,
            request_ip=request_ip,
            site=site,
            cancel=cancel,
            session=session,
        )
    call = _Call(operation, entities, user, conversation, source, request_ip, site, cancel, session)
    return _audited(call, _decide_sync(call))


async def adispatch(
    operation: str,
    entities: dict[str, Any] | None = None,
    *,
    user: Any,
    conversation: Conversation | None = None,
    source: str = "api",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
    cancel: CancellationToken | None = None,
    session: Any = None,
) -> Outcome:
    """The async twin of ``dispatch``: async handlers are awaited, ORM work runs in a thread.

    A sync tool is dispatched whole in one hop to the sync thread: every step of it is sync
    work, and each hop costs a thread switch.
    """
    tool = site._tools.get(operation) if isinstance(operation, str) else None
    if tool is not None and tool.toolset is not None:
        return await _adispatch_toolset(
            operation, entities, user, conversation, source, request_ip, site, cancel, session
        )
    if tool is None or not tool.is_async:
        return await _in_one_hop(
            dispatch,
            operation,
            entities,
            user=user,
            conversation=conversation,
            source=source,
            request_ip=request_ip,
            site=site,
            cancel=cancel,
            session=session,
        )
    call = _Call(operation, entities, user, conversation, source, request_ip, site, cancel, session)
    call.tool = tool
    outcome = call.check()
    if outcome is None:
        call.access = await aaccess_for(call.user)
        outcome = call.authorize()
        if outcome is None and tool.object_check is not None:
            outcome = await sync_to_async(call.authorize_instance)()
    if outcome is None:
        if tool.requires_confirmation:
            outcome = await sync_to_async(call.open_action)()
        else:
            outcome = await _run_async(call, confirmed=False)
    return await _aaudited(call, outcome)


class DispatchCancelled(asyncio.CancelledError):
    """The run was stopped while a handler ran; carries the audited ``cancelled`` outcome."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__("stopped while running")
        self.outcome = outcome


async def _adispatch_toolset(
    operation: str,
    entities: Any,
    user: Any,
    conversation: Conversation | None,
    source: str,
    request_ip: str | None,
    site: ToolRegistry,
    cancel: CancellationToken | None,
    session: Any,
) -> Outcome:
    """A toolset tool: its instance must be started in this session (lazily if need be)."""
    from .lifecycle import new_session

    own = session is None
    if own:
        session = new_session()
    try:
        call = _Call(
            operation, entities, user, conversation, source, request_ip, site, cancel, session
        )
        outcome = call.check()
        if outcome is None:
            call.access = await aaccess_for(call.user)
            outcome = call.authorize()
        if outcome is None:
            outcome = await _ready(call)
        if outcome is None and call.tool.object_check is not None:  # type: ignore[union-attr]
            outcome = await sync_to_async(call.authorize_instance)()
        if outcome is None:
            if call.tool.requires_confirmation:  # type: ignore[union-attr]
                outcome = await sync_to_async(call.open_action)()
            else:
                outcome = await _run_async(call, confirmed=False)
        return await _aaudited(call, outcome)
    finally:
        if own:
            await session.stop()


async def _ready(call: _Call) -> Outcome | None:
    """Find (or start) the call's toolset instance; not_ready while starting, unavailable if failed."""
    from .exceptions import ToolNotReady, ToolUnavailable
    from .lifecycle import ToolLifecycleState

    tool, session = call.tool, call.session
    assert tool is not None and session is not None
    state = session.state(tool.toolset)
    if state is ToolLifecycleState.CREATED:
        return call.stop(
            Decision.NOT_READY, ToolNotReady(f"{tool.operation} is still starting; try again.")
        )
    if state in (None, ToolLifecycleState.STOPPED, ToolLifecycleState.CANCELLED):
        await session.start(tool.toolset)
    instance = session.instance(tool.toolset)
    if instance is None or instance.state is not ToolLifecycleState.STARTED:
        return call.stop(
            Decision.UNAVAILABLE,
            ToolUnavailable(f"{tool.operation} is not available right now."),
        )
    call.toolset = instance
    return None


async def _in_one_hop(function: Any, *args: Any, **kwargs: Any) -> Outcome:
    """Run a sync dispatch in the sync thread; if the run is stopped, wait for what it decided."""
    future = asyncio.ensure_future(sync_to_async(function)(*args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        # A thread cannot be interrupted: the handler sees its token and returns early.
        outcome: Outcome = await future
        raise DispatchCancelled(outcome) from None
