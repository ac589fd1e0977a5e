"""The only door into a handler: bound → look up → authorize → validate → ready → gate → run → audit.

The pipeline is written once. Its decision steps (``DECISIONS``) are one ordered sequence that
dispatch, confirmation (``confirmation.py``), the catalog's availability filter and the evals'
judge all use; ``dispatch`` and ``adispatch`` pick the sync or the async run once, the way
django-tasks' ``call`` / ``acall`` do, and every call that reaches them writes one audit entry
(``write_audit``, the one writer of the trail).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any, NamedTuple

from asgiref.sync import async_to_sync, sync_to_async
from django.apps import apps
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import IntegrityError, transaction

from .. import signals
from ..access.approvals import policy_for
from ..access.credentials import Credential
from ..access.permissions import (
    UserAccess,
    access_for,
    cached_access,
    denials,
    hidden_from,
    refusal,
)
from ..access.tokens import Ceiling
from ..conf import assistant_settings
from ..core.cancellation import CancellationToken
from ..core.lifecycle import (
    ToolLifecycleState,
    ToolSession,
    Toolset,
    new_session,
)
from ..core.redaction import redact_text, redacted_entities, sensitive_values
from ..core.registry import (
    PREVIEW_KINDS,
    AssistantTool,
    Prepared,
    ToolCall,
    ToolRegistry,
    ToolResult,
    registry,
)
from ..core.storable import (
    UNSTORABLE_CHARACTERS,
    plain,
    shows_something,
    storable,
    storable_text,
    typed_text,
)
from ..exceptions import (
    ArgumentsTooLarge,
    AssistantError,
    Cancelled,
    InvalidEntities,
    PermissionDenied,
    ToolFailed,
    ToolHidden,
    ToolNotReady,
    ToolTimeout,
    ToolUnavailable,
    UnknownOperation,
)
from ..jobs import JobManager
from ..models import AuditEntry, Conversation, PendingAction
from .bounds import kept_instead, too_large

logger = logging.getLogger("assistant.dispatch")
Decision = AuditEntry.Decision

# HTTP status for each decision that is not an error; errors carry their own.
DECISION_STATUS = {
    Decision.EXECUTED: 200,
    Decision.FAILED: 200,
    Decision.CONFIRMED: 200,
    Decision.CANCELLED: 200,
    Decision.CONFIRMATION_REQUESTED: 202,
    Decision.CLARIFY: 200,
}


class CallContext(NamedTuple):
    """Who calls, from where, in which conversation, with which stop token and tool session.

    Immutable (a named tuple: built on every call, it costs a third of a frozen dataclass).
    """

    user: Any
    source: str = "api"
    conversation: Conversation | None = None
    request_ip: str | None = None
    cancel: CancellationToken | None = None
    session: ToolSession | None = None
    site: ToolRegistry = registry
    ceiling: Ceiling | None = None  # a bearer token's: narrower than the user's permissions
    client: str = ""  # who called, for the audit: an MCP client's name and version, a token's name
    credential: Credential | None = None  # a run's: confirmed still to hold before the call

    def but(self, **changes: Any) -> CallContext:
        """This context with some fields changed (a child stop token, the action's conversation)."""
        return self._replace(**changes)


def context_of(context: CallContext | None, where: dict[str, Any]) -> CallContext:
    """The call's context: the one given, or one made of keyword arguments (never both)."""
    if context is None:
        return CallContext(**where)
    if where:
        raise TypeError(f"pass either context= or {', '.join(sorted(where))}, not both")
    return context


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
    reason: str = ""  # an answered action's: the approver's reason (and name, if not the requester)
    # A hidden tool's refusal shows its caller what a missing operation shows; its audit entry
    # keeps the truth: the tool's domain, risk and entities (redacted as the tool redacts them).
    audit_tool: AssistantTool | None = None
    audit_entities: dict[str, Any] | None = None

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


def write_audit(context: CallContext, outcome: Outcome, *, domain: str | None = None) -> int:
    """Append one audit entry: the single place the trail is written (staff actions too)."""
    try:
        entry = _audit_row(context, outcome, domain, context.conversation)
    except IntegrityError:
        # The conversation was deleted while its call ran: the entry stays, unlinked, as the
        # deletion's SET_NULL left its earlier entries.
        if not _conversation_gone(context.conversation):
            raise
        entry = _audit_row(context, outcome, domain, None)
    signals.send(signals.tool_called, AuditEntry, entry=entry, outcome=outcome)
    return entry.pk


def _audit_row(
    context: CallContext, outcome: Outcome, domain: str | None, conversation: Conversation | None
) -> AuditEntry:
    user = context.user if context.user is not None and context.user.is_authenticated else None
    tool = outcome.tool or outcome.audit_tool
    entities = outcome.entities if outcome.audit_entities is None else outcome.audit_entities
    return AuditEntry.objects.create(
        user=user,
        username=user.get_username() if user is not None else "",
        operation=storable_text(outcome.operation[:64])
        if isinstance(outcome.operation, str)
        else "",
        domain=domain if domain is not None else (tool.domain if tool else ""),
        risk_level=tool.risk_level.value if tool else "",
        decision=outcome.audit_decision or outcome.decision,
        entities=storable(entities),
        duration_ms=outcome.duration_ms,
        error=storable_text(outcome.error_summary),
        reason=storable_text(outcome.reason),
        source=context.source,
        client=storable_text(context.client[:200]),
        request_ip=context.request_ip,
        conversation=conversation,
        pending_action=outcome.pending_action,
    )


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
        if isinstance(exc, ToolTimeout):  # a time limit of the tool's own (a statement timeout)
            return Decision.TIMEOUT, exc
        return Decision.FAILED, exc
    if isinstance(exc, DjangoPermissionDenied):
        return Decision.DENIED, PermissionDenied(str(exc) or "Permission denied.")
    logger.exception("Tool %s raised", tool.operation, exc_info=exc)
    return Decision.FAILED, ToolFailed(
        f"{tool.operation} failed unexpectedly; the error has been logged."
    )


def _confirmation_summary(tool: AssistantTool, entities: dict[str, Any]) -> str:
    """The approval's sentence when the tool prepares none: what it does, and with what."""
    shown = ", ".join(
        f"{name}: “{value}”" if isinstance(value, str) else f"{name}: {value}"
        for name, value in entities.items()
    )
    return f"{tool.description} ({shown})" if shown else tool.description


def _no_such_object(tool: AssistantTool) -> InvalidEntities:
    entity, label = tool.object_check  # type: ignore[misc]
    return InvalidEntities(
        {entity: f"no {label} with this id that you may use"}, operation=tool.operation
    )


class Call:
    """One call in flight through the pipeline: its context and what the steps found so far."""

    __slots__ = (
        "access",
        "action",
        "cancel",
        "confirmed",
        "context",
        "instance",
        "operation",
        "prepared",
        "raw",
        "started",
        "tool",
        "toolset",
        "values",
    )

    def __init__(
        self,
        operation: Any,
        raw: Any,
        context: CallContext,
        *,
        tool: AssistantTool | None = None,
        action: PendingAction | None = None,
    ) -> None:
        self.started = perf_counter()
        self.operation = operation
        self.raw = raw
        self.context = context
        self.cancel = context.cancel
        self.tool = tool
        self.action = action
        self.confirmed = action is not None  # a pending action's call: the gate is its claim
        self.values: dict[str, Any] = {}
        self.access: UserAccess | None = None
        self.instance: Any = None
        self.toolset: Any = None
        self.prepared: Prepared | None = None

    def tool_call(self) -> ToolCall:
        assert self.tool is not None
        context = self.context
        return ToolCall(
            tool=self.tool,
            entities=self.values,
            user=context.user,
            conversation=context.conversation,
            settings=assistant_settings,
            source=context.source,
            request_ip=context.request_ip,
            pending_action=self.action,
            instance=self.instance,
            cancel=self.cancel or CancellationToken(),
            toolset=self.toolset,
            session=context.session,
            ceiling=context.ceiling,
            jobs=JobManager(
                user=context.user, conversation=context.conversation, operation=self.tool.operation
            ),
        )

    def stop(self, decision: str, error: AssistantError) -> Outcome:
        return self.finish(decision, error=error, error_summary=error.message)

    def failed(self, exc: Exception) -> Outcome:
        assert self.tool is not None
        decision, error = _failure(self.tool, exc)
        secrets = sensitive_values(self.tool, self.values)
        return self.finish(
            decision, error=error, error_summary=redact_text(_error_summary(exc), secrets)
        )

    def finished(self, value: Any) -> Outcome:
        assert self.tool is not None
        try:
            result = _as_result(value, self.tool.operation)
        except TypeError as exc:
            return self.failed(exc)
        return self.finish(
            Decision.CONFIRMED if self.confirmed else Decision.EXECUTED, result=result
        )

    def finish(
        self,
        decision: str,
        *,
        result: ToolResult | None = None,
        error: AssistantError | None = None,
        error_summary: str = "",
    ) -> Outcome:
        return Outcome(
            operation=self.operation,
            decision=str(decision),
            entities=redacted_entities(self.tool, self.raw),
            tool=self.tool,
            result=result,
            pending_action=self.action,
            error=error,
            error_summary=error_summary,
            duration_ms=(perf_counter() - self.started) * 1000,
        )


# -- the decision steps: each returns None (go on) or the Outcome that stops the call ----------

Step = Callable[[Call], Outcome | None]


def still_signed_in(call: Call) -> Outcome | None:
    """A run's credential still holds (not revoked or expired, the session not ended)."""
    credential = call.context.credential
    lapse = credential.lapse() if credential is not None else None
    return None if lapse is None else call.stop(Decision.DENIED, lapse)


def look_up(call: Call) -> Outcome | None:
    """The tool the operation names (unless the caller already found it)."""
    if call.tool is None:
        try:
            call.tool = call.context.site.get(call.operation)
        except UnknownOperation as exc:
            return call.stop(Decision.UNKNOWN, exc)
    return None


def validate(call: Call) -> Outcome | None:
    """The entities checked against the handler's signature."""
    assert call.tool is not None
    try:
        call.values = call.tool.validate(call.raw)
    except InvalidEntities as exc:
        return call.stop(Decision.INVALID, exc)
    return None


def authorize(call: Call) -> Outcome | None:
    """The tool-level permission check, against the user's access snapshot (loaded once)."""
    assert call.tool is not None
    if call.access is None:
        call.access = access_for(call.context.user)
    if denials(call.access, call.tool):
        error = refusal(call.access, call.tool, call.context.site)
        if isinstance(error, ToolHidden):
            if call.action is None:
                return hidden(call, error)
            error = PermissionDenied(error.message)  # (its owner knows the action's operation)
        return call.stop(Decision.DENIED, error)
    ceiling = call.context.ceiling
    if ceiling is not None and not ceiling.allows(call.tool):
        return call.stop(Decision.DENIED, ceiling.refusal(call.tool))
    return None


def hidden(call: Call, error: ToolHidden) -> Outcome:
    """A refused tool its caller may not know of answers as a missing one (status, code, text,
    entities all redacted); only the audit entry says ``denied``, and of which tool."""
    tool, call.tool = call.tool, None
    outcome = call.stop(Decision.UNKNOWN, UnknownOperation.named(call.operation))
    call.tool = tool
    outcome.error_summary = error.message
    outcome.audit_decision = Decision.DENIED
    outcome.audit_tool = tool
    outcome.audit_entities = redacted_entities(tool, call.raw)
    return outcome


def authorize_instance(call: Call) -> Outcome | None:
    """The object-level check; a missing and a forbidden instance look the same to the caller."""
    tool = call.tool
    assert tool is not None and call.access is not None
    if tool.object_check is None:
        return None
    entity, label = tool.object_check
    value = call.values.get(entity)
    if value is not None:
        try:
            call.instance = apps.get_model(label)._default_manager.filter(pk=value).first()
        except (ValueError, TypeError):
            call.instance = None
    if call.instance is None:
        return call.stop(Decision.INVALID, _no_such_object(tool))
    if denials(call.access, tool, call.instance):
        # The caller sees what a missing instance gives; only the audit says denied.
        outcome = call.stop(Decision.INVALID, _no_such_object(tool))
        outcome.audit_decision = Decision.DENIED
        return outcome
    return None


def within_bounds(call: Call) -> Outcome | None:
    """Arguments larger than a call may bring: refused before anything of them is kept (the
    audit and the caller get their size, digest and a short preview instead)."""
    encoded = too_large(call.raw)
    if encoded is None:
        return None
    tool = call.tool or call.context.site.find(call.operation)
    kept = kept_instead(tool, call.raw, encoded)
    # a tool hidden from the caller: its preview is redacted as a missing operation's is
    shown = kept_instead(None, call.raw, encoded) if _hides(call, tool) else kept
    call.raw = {}
    operation = call.operation if isinstance(call.operation, str) else ""
    limit = assistant_settings.MAX_TOOL_ARGUMENT_BYTES
    outcome = call.stop(
        Decision.INVALID, ArgumentsTooLarge(len(encoded), limit, operation=operation[:64])
    )
    outcome.entities = shown
    outcome.audit_entities = kept
    return outcome


def _hides(call: Call, tool: AssistantTool | None) -> bool:
    """Whether ``tool`` is one the caller is told does not exist (a pending action's owner knows
    its operation; an allowed call's snapshot is at hand, a refused one is decided off the loop)."""
    if tool is None or call.action is not None:
        return False
    if call.access is None:
        call.access = access_for(call.context.user)
    return hidden_from(call.access, tool, call.context.site)


# Bounded first (nothing of a huge call is copied, not even into the audit of a refusal), then
# the caller's credential; authorized before validated: a user refused a tool learns nothing of
# its parameters.
DECISIONS: tuple[Step, ...] = (
    within_bounds,
    still_signed_in,
    look_up,
    authorize,
    validate,
    authorize_instance,
)


def decide(call: Call, steps: Sequence[Step] = DECISIONS) -> Outcome | None:
    """Run the decision steps in order; the first Outcome stops the call."""
    for step in steps:
        outcome = step(call)
        if outcome is not None:
            return outcome
    return None


def decides_in_loop(call: Call) -> bool:
    """Whether the decision steps need no database: the access snapshot is fresh, no object,
    and the call is allowed (a refusal may read more of the user's access to explain itself)."""
    tool = call.tool
    if tool is None or tool.object_check is not None or call.context.credential is not None:
        return False
    call.access = cached_access(call.context.user)
    return call.access is not None and not denials(call.access, tool)


def failed_toolsets(
    toolsets: Iterable[type[Toolset] | None], session: ToolSession | None
) -> dict[type[Toolset], str]:
    """The toolsets a call from here would find failed, with their errors (``make_ready``'s answer).

    Each is readied where that call would run, as ``make_ready`` readies it: in ``session``, or
    without one in a session of its own (a call's own, stopped after), so a context with no
    server loop (WSGI, a command) gets the answer a call would. A call-scoped toolset starts for
    each call and is never judged ahead of one.
    """
    wanted = {t for t in toolsets if t is not None and t.scope != "call"}
    if not wanted:
        return {}
    if session is not None and not any(session.needs_start(t) for t in wanted):
        return _failures(session, wanted)  # (nothing to start: no hop to a loop)
    return async_to_sync(_readied_failures)(wanted, session)


async def _readied_failures(
    wanted: set[type[Toolset]], session: ToolSession | None
) -> dict[type[Toolset], str]:
    where = session if session is not None else new_session()
    try:
        await asyncio.gather(*(where.ready(toolset) for toolset in wanted))
        return _failures(where, wanted)
    finally:
        if session is None:
            await where.stop()


def _failures(session: ToolSession, wanted: set[type[Toolset]]) -> dict[type[Toolset], str]:
    failed = {}
    for toolset in wanted:
        instance = session.instance(toolset)
        if instance is not None and instance.state is ToolLifecycleState.FAILED:
            failed[toolset] = instance.error
    return failed


async def make_ready(call: Call) -> Outcome | None:
    """Find (or start) the call's toolset instance: not_ready while starting, unavailable if failed."""
    tool, session = call.tool, call.context.session
    assert tool is not None
    if tool.toolset is None:
        return None
    assert session is not None
    if tool.toolset.scope == "call":
        call.toolset = await session.start_for_call(tool.toolset)  # (ended by ``release``)
        if call.toolset.state is not ToolLifecycleState.STARTED:
            return call.stop(
                Decision.UNAVAILABLE,
                ToolUnavailable(f"{tool.operation} is not available right now."),
            )
        return None
    state = await session.ready(tool.toolset)
    if state is ToolLifecycleState.CREATED:
        return call.stop(
            Decision.NOT_READY, ToolNotReady(f"{tool.operation} is still starting; try again.")
        )
    instance = session.instance(tool.toolset)
    if instance is None or state is not ToolLifecycleState.STARTED:
        return call.stop(
            Decision.UNAVAILABLE, ToolUnavailable(f"{tool.operation} is not available right now.")
        )
    call.toolset = instance
    return None


async def release(call: Call) -> None:
    """The instance a call-scoped toolset started for this call ends with it."""
    instance, call.toolset = call.toolset, None
    if instance is not None and type(instance).scope == "call":
        assert call.context.session is not None
        await asyncio.shield(call.context.session.end_call(instance))


def prepare(call: Call) -> Outcome | None:
    """The tool's own resolution and checks, before anyone is asked (its ``prepare`` hook)."""
    tool = call.tool
    assert tool is not None and tool.prepare is not None
    try:
        if tool.prepare_is_async:
            prepared = async_to_sync(tool.prepare)(call.tool_call(), **call.values)
        else:
            prepared = tool.prepare(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return _prepared(call, prepared)


async def aprepare(call: Call) -> Outcome | None:
    """``prepare`` from the event loop: an async hook awaited, a sync one in the sync thread."""
    tool = call.tool
    assert tool is not None and tool.prepare is not None
    if not tool.prepare_is_async:
        return await sync_to_async(prepare)(call)
    try:
        prepared = await tool.prepare(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return await sync_to_async(_prepared)(call, prepared)


def _prepared(call: Call, prepared: Any) -> Outcome | None:
    """Take what the hook made: a reply ends the call (``clarify``), a ``Prepared`` goes on."""
    tool = call.tool
    assert tool is not None
    if isinstance(prepared, ToolResult | str):
        return call.finish(Decision.CLARIFY, result=_as_result(prepared, tool.operation))
    if not isinstance(prepared, Prepared):
        return call.failed(
            TypeError(f"{tool.operation}'s prepare returned {type(prepared).__name__}")
        )
    problem = _misshapen(prepared)
    if problem is not None:
        return call.failed(ValueError(f"{tool.operation}'s prepare returned {problem}"))
    if prepared.entities is not None:
        try:  # the handler gets what prepare resolved, held to the same signature
            call.values = tool.validate(prepared.entities)
        except InvalidEntities as exc:
            return call.failed(TypeError(f"{tool.operation}'s prepare resolved {exc.message}"))
    call.prepared = prepared
    return None


def _misshapen(prepared: Prepared) -> str | None:
    """What in a ``Prepared`` the pending action could not store or show, if anything."""
    if not isinstance(prepared.summary, str):
        return "a summary that is not text"
    if not isinstance(prepared.confirm_phrase, str) or len(prepared.confirm_phrase) > 200:
        return "a confirm phrase that is not text of at most 200 characters"
    if prepared.confirm_phrase and not shows_something(typed_text(prepared.confirm_phrase)):
        return "a confirm phrase with nothing visible to type"  # (an empty answer would match)
    preview = prepared.preview
    if preview is not None and (
        not isinstance(preview, dict) or preview.get("kind") not in PREVIEW_KINDS
    ):
        return "a preview of no known kind"
    return None


def open_action(call: Call) -> Outcome:
    """The confirmation gate: store a pending action instead of running the handler."""
    tool, prepared = call.tool, call.prepared
    assert tool is not None
    stored = storable(call.values)
    approval = policy_for(tool)
    try:
        call.action = PendingAction.open(
            user=call.context.user,
            operation=tool.operation,
            entities=stored,
            ttl_seconds=assistant_settings.CONFIRMATION_TTL,
            conversation=call.context.conversation,
            summary=prepared.summary
            if prepared is not None and prepared.summary
            else _confirmation_summary(tool, redacted_entities(tool, stored)),
            preview=prepared.preview if prepared is not None else None,
            confirm_phrase=prepared.confirm_phrase if prepared is not None else "",
            policy=approval.policy,
            approver_permission=approval.permission,
            site=call.context.site,
        )
    except IntegrityError:
        if not _conversation_gone(call.context.conversation):
            raise
        # Deleted while its turn ran: nobody could see the action to answer it (a deletion
        # refuses the actions waiting in it). The call is audited, unlinked, as refused.
        return call.stop(
            Decision.CANCELLED, Cancelled("The conversation was deleted; nothing was asked.")
        )
    return call.finish(Decision.CONFIRMATION_REQUESTED)


def _conversation_gone(conversation: Conversation | None) -> bool:
    """Whether a write failed because the call's conversation was deleted meanwhile (outside a
    transaction: inside one, the error stands)."""
    return (
        conversation is not None
        and not transaction.get_connection().in_atomic_block
        and not Conversation.objects.filter(pk=conversation.pk).exists()
    )


def gated(call: Call) -> bool:
    """Whether the gate stops this call: its policy asks first and it is not a confirmed action's."""
    assert call.tool is not None
    return not call.confirmed and policy_for(call.tool).asks


# -- running the handler --------------------------------------------------------------------------


def run_sync(call: Call) -> Outcome:
    """Run the handler on this thread (an async one through ``async_to_sync``)."""
    tool = call.tool
    assert tool is not None
    if tool.timeout is not None:
        return _run_sync_with_deadline(call)
    try:
        if tool.is_async:
            value = async_to_sync(_awaited)(tool, call.tool_call(), call.values)
        else:
            value = tool.handler(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return _ended(call, value)


def _run_sync_with_deadline(call: Call) -> Outcome:
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
    return _ended(call, value)


def _ended(call: Call, value: Any) -> Outcome:
    """A handler returned: its result, unless the run was stopped meanwhile."""
    if call.cancel is not None and call.cancel.is_cancelled:
        outcome = stopped(call, "while running")
        outcome.result = _as_result(value, call.operation) if value is not None else None
        return outcome
    return call.finished(value)


async def run_async(call: Call) -> Outcome:
    """Run the handler from the event loop (a sync one in a thread); a stop raises
    ``DispatchCancelled`` with the call's ``cancelled`` outcome, for the caller to audit."""
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
        # The run was stopped while the handler ran: the caller audits that, then goes on.
        raise DispatchCancelled(stopped(call, "while running")) from None
    except Exception as exc:
        return call.failed(exc)
    return call.finished(value)


async def _awaited(tool: AssistantTool, tool_call: ToolCall, values: dict[str, Any]) -> Any:
    """An async handler run from sync code, cut off at its timeout like on the async path."""
    running = tool.handler(tool_call, **values)
    if tool.timeout is None:
        return await running
    return await asyncio.wait_for(running, tool.timeout)


def stopped(call: Call, when: str) -> Outcome:
    """The outcome of a call stopped ``when`` (while running, before it ran)."""
    return call.finish(
        Decision.CANCELLED, error=Cancelled(f"Stopped {when}."), error_summary=f"stopped {when}"
    )


def _timed_out(call: Call) -> Outcome:
    assert call.tool is not None
    error = ToolTimeout(
        f"{call.tool.operation} took longer than {call.tool.timeout:g} s and was stopped."
    )
    return call.finish(Decision.TIMEOUT, error=error, error_summary=error.message)


def audited(call: Call, outcome: Outcome) -> Outcome:
    """The outcome, once its audit entry is written."""
    outcome.audit_id = write_audit(call.context, outcome)
    return outcome


async def aaudited(call: Call, outcome: Outcome) -> Outcome:
    outcome.audit_id = await sync_to_async(write_audit)(call.context, outcome)
    return outcome


class DispatchCancelled(asyncio.CancelledError):
    """The call was stopped; carries what it came to (audited by the time dispatch raises it)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__("stopped while running")
        self.outcome = outcome


async def in_one_hop(function: Callable[..., Outcome], *args: Any, **kwargs: Any) -> Outcome:
    """Run sync pipeline work in the sync thread; if the run is stopped, wait for what it decided.

    The hop runs in a task of its own, shielded: asgiref would pass a cancellation on into
    whatever the thread awaits through ``async_to_sync`` (an ``on_commit`` telling other
    processes of a change, say), cutting the pipeline short of its audit.
    """
    future = asyncio.ensure_future(sync_to_async(function)(*args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        pass
    # A thread cannot be interrupted: the handler sees its token and returns early. Until it
    # does, the hop is waited for through any further cancellation (a shutdown's): nothing of
    # the caller's goes on while the thread may still be writing.
    while True:
        try:
            outcome: Outcome = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                raise  # (the hop's own task was cancelled before it began)
            continue
        raise DispatchCancelled(outcome)


def runs_in_loop(tool: AssistantTool | None) -> bool:
    """Whether a tool's call takes the async path: an async handler, or a toolset's (on a loop)."""
    return tool is not None and (tool.is_async or tool.toolset is not None)


# -- the doors ------------------------------------------------------------------------------------


# Work of the caller's own on the sync thread once a call is audited, in the call's own hop (a
# turn stores its reply there): it gets the outcome; its failure is logged, never the call's.
Then = Callable[[Outcome], None]


def here(call: Call, then: Then | None = None) -> Outcome:
    """The whole pipeline on this thread: decide, gate, run, audit (and then the caller's ``then``)."""
    outcome = decide(call)
    if outcome is None and call.tool is not None and call.tool.prepare is not None:
        outcome = prepare(call)
    if outcome is None:
        outcome = open_action(call) if gated(call) else run_sync(call)
    outcome = audited(call, outcome)
    if then is not None:
        try:
            then(outcome)
        except Exception:  # the call stands, audited: the caller does its part again later
            logger.exception("A caller's work after %s failed", call.operation)
    return outcome


def own_session(call: Call) -> ToolSession | None:
    """A toolset's call that brings no tool session gets its own, for the caller to stop."""
    tool = call.tool
    if call.context.session is not None or tool is None or tool.toolset is None:
        return None
    session = new_session()
    call.context = call.context.but(session=session)
    return session


async def in_loop(call: Call) -> Outcome:
    """The whole pipeline from the event loop: decide, ready, gate, run, audit.

    Stopped at any step (a toolset still starting, a hop to the sync thread), the call is
    audited as what it came to before ``DispatchCancelled`` goes on: nothing unaudited.
    """
    own = own_session(call)
    try:
        try:
            outcome = await _settled_in_loop(call)
        except asyncio.CancelledError as exc:
            outcome = came_to(call, exc)
            await asyncio.shield(aaudited(call, outcome))
            raise DispatchCancelled(outcome) from None
        return await aaudited(call, outcome)
    finally:
        await release(call)
        if own is not None:
            await own.stop()


async def _settled_in_loop(call: Call) -> Outcome:
    outcome = decide(call) if decides_in_loop(call) else await sync_to_async(decide)(call)
    if outcome is None and call.tool is not None and call.tool.toolset is not None:
        outcome = await make_ready(call)
    if outcome is None and call.tool is not None and call.tool.prepare is not None:
        outcome = await aprepare(call)
    if outcome is None:
        # (the gate's hop is waited out when stopped: an action it opens is audited)
        outcome = await in_one_hop(open_action, call) if gated(call) else await run_async(call)
    return outcome


def came_to(call: Call, stop: asyncio.CancelledError) -> Outcome:
    """What a stopped call came to: its run's or its hop's outcome, else stopped before it ran."""
    if isinstance(stop, DispatchCancelled):
        return stop.outcome
    return stopped(call, "before it ran")


def dispatch(
    operation: str,
    entities: dict[str, Any] | None = None,
    *,
    context: CallContext | None = None,
    **where: Any,
) -> Outcome:
    """Run one operation through every step, writing exactly one audit entry.

    Pass a ``CallContext`` or its fields as keywords (``user=``, ``source=``, ...). A toolset's
    tool lives on an event loop: its call takes the async pipeline.
    """
    context = context_of(context, where)
    call = Call(operation, entities, context, tool=context.site.find(operation))
    if call.tool is not None and call.tool.toolset is not None:
        return async_to_sync(in_loop)(call)
    return here(call)


async def adispatch(
    operation: str,
    entities: dict[str, Any] | None = None,
    *,
    context: CallContext | None = None,
    then: Then | None = None,
    **where: Any,
) -> Outcome:
    """The async twin of ``dispatch``: a sync tool's whole pipeline goes to the sync thread in one hop.

    ``then`` runs at the end of that hop; a call that takes the async path has none, and never
    runs it (the caller does that work on its own).
    """
    context = context_of(context, where)
    call = Call(operation, entities, context, tool=context.site.find(operation))
    if runs_in_loop(call.tool):
        return await in_loop(call)
    return await in_one_hop(here, call, then)


def preview(operation: str, entities: Any, context: CallContext) -> Outcome:
    """What dispatch would decide, judged by the same steps but neither run nor audited.

    A call the steps pass comes back ``executed`` (or ``confirmation_requested``) with no result
    and its validated entities (as proposed: the tool's ``prepare``, which changes nothing, runs
    for its verdict only), redacted as the audit stores them.
    """
    call = Call(operation, entities, context, tool=context.site.find(operation))
    stopped = decide(call)
    proposed = call.values
    if stopped is None and call.tool is not None and call.tool.prepare is not None:
        stopped = prepare(call)
    if stopped is not None:
        return stopped
    assert call.tool is not None
    outcome = call.finish(Decision.CONFIRMATION_REQUESTED if gated(call) else Decision.EXECUTED)
    outcome.entities = redacted_entities(call.tool, storable(proposed))
    return outcome
