"""The call values: who calls (``CallContext``), a call in flight (``Call``) and what it came to (``Outcome``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any, NamedTuple

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.utils.translation import gettext

from ..access.credentials import Credential
from ..access.predicate import UserAccess
from ..access.tokens import Ceiling
from ..conf import assistant_settings
from ..core.cancellation import CancellationToken
from ..core.declaration import AssistantTool
from ..core.lifecycle import ToolSession
from ..core.redaction import redact_text, redacted_entities, sensitive_values
from ..core.registry import Prepared, ToolCall, ToolRegistry, ToolResult, registry
from ..core.storable import UNSTORABLE_CHARACTERS, plain, storable, storable_text
from ..exceptions import AssistantError, InvalidEntities, PermissionDenied, ToolFailed, ToolTimeout
from ..jobs import JobManager
from ..models import AuditEntry, Conversation, PendingAction
from ..telemetry import NO_SPAN, Span

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
    call_id: str = ""  # the model's id for this tool call, for its trace (gen_ai.tool.call.id)
    arrival: str = ""  # a model's call: "native" (tool_calls) or "text" (written as JSON)
    after_results: bool = False  # a model's call proposed with a tool's output in what it read

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
        return Decision.DENIED, PermissionDenied(str(exc) or gettext("Permission denied."))
    logger.exception("Tool %s raised", tool.operation, exc_info=exc)
    return Decision.FAILED, ToolFailed(
        f"{tool.operation} failed unexpectedly; the error has been logged."
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
        "span",
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
        self.span: Span = NO_SPAN  # its execute_tool span, once a door opens it

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


class DispatchCancelled(asyncio.CancelledError):
    """The call was stopped; carries what it came to (audited by the time dispatch raises it)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__("stopped while running")
        self.outcome = outcome
