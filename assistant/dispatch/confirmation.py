"""Answering a pending action: confirm it (re-checked, claimed once, run, audited) or refuse it.

The second entrance of the one door: a confirmed action takes dispatch's own steps (its
decision steps with two of its own, readiness, the run and the audit); its gate is the claim.
Who may answer, and what a confirmation must carry, is the action's policy
(``PendingAction.check_answer``); the handler always runs as the action's requester.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NamedTuple

from asgiref.sync import async_to_sync, sync_to_async
from django.db.models import Count
from django.utils.translation import gettext

from .. import telemetry
from ..access.caches import access_for, reread_access
from ..core.compiled import rows_for
from ..core.redaction import redact_data, redact_text, sensitive_values
from ..core.registry import ToolResult
from ..core.storable import storable
from ..exceptions import (
    AccountInactive,
    ActionExpired,
    InvalidEntities,
    JobNotFound,
    OutsideTokenScope,
    SecretUnreadable,
)
from ..jobs import cancel_job
from ..models import Conversation, Job, PendingAction
from .audit import aaudited, audited, write_audit
from .calls import Call, CallContext, Decision, DispatchCancelled, Outcome, context_of
from .door import came_to, decide, own_session
from .execution import in_one_hop, make_ready, release, run_async, run_sync, runs_in_loop
from .refusals import Step, authorize, authorize_instance, look_up, still_signed_in, validate


def still_bound(call: Call) -> Outcome | None:
    """The stored entities are the ones the user was asked to confirm."""
    assert call.action is not None
    if not call.action.is_bound_to(call.action.entities):
        return call.stop(
            Decision.INVALID,
            InvalidEntities({"entities": "changed since confirmation was requested"}),
        )
    return None


def unsealed(call: Call) -> Outcome | None:
    """The action's sealed entities read back for its handler; unreadable, it can never run
    and expires."""
    assert call.action is not None
    try:
        call.raw = call.action.arguments()
    except SecretUnreadable as exc:
        call.action = call.action.expire()
        return call.stop(Decision.EXPIRED, exc)
    return None


def authorize_now(call: Call) -> Outcome | None:
    """A risky moment: the tool check against flags and permissions as they are now."""
    reread_access(call.context.user)
    return authorize(call)


# dispatch's decision steps (DECISIONS), with the binding check, the secrets unsealed and access
# read afresh
CONFIRMATION: tuple[Step, ...] = (
    still_signed_in,
    look_up,
    still_bound,
    unsealed,
    validate,
    authorize_now,
    authorize_instance,
)


class Answer(NamedTuple):
    """Who answers a pending action, and what they typed (a reason, the confirm phrase)."""

    user: Any
    reason: str = ""
    phrase: str = ""

    def audit_reason(self, action: PendingAction, verb: str) -> str:
        """The audit entry's reason: as given, naming the approver when not the requester."""
        if self.user.pk == action.user_id:
            return action.reason
        who = f"{verb} by {self.user.get_username()}"
        return f"{who}: {action.reason}" if action.reason else who


def answerable(
    action_id: Any, user: Any, *, confirm: bool, reason: str = "", phrase: str = ""
) -> PendingAction:
    """The action this user may answer so; else ``ActionNotFound`` or the policy's refusal.

    A risky moment for whoever answers, as ``authorize_now`` is for the requester: their flags
    and permissions are read as they are now (an open socket's user object may hold a reading
    from before an approver lost the permission or was deactivated).
    """
    reread_access(user)
    access_for(user)  # (and Django's permission cache, which ``for_decider`` asks, emptied)
    action = PendingAction.for_decider(action_id, user)
    action.check_answer(user, confirm=confirm, reason=reason, phrase=phrase)
    return action


def claim(call: Call, answer: Answer) -> Outcome | None:
    """The gate of a pending action: claim it exactly once (an expired one stops the call)."""
    assert call.action is not None
    action = call.action
    try:
        call.action = PendingAction.decide(
            action.pk,
            answer.user,
            PendingAction.Status.CONFIRMED,
            reason=answer.reason,
            phrase=answer.phrase,
            site=call.context.site,
        )
    except ActionExpired as exc:
        action.refresh_from_db()
        call.action = action
        return call.stop(Decision.EXPIRED, exc)
    return None


def _opened(action_id: Any, context: CallContext, answer: Answer) -> tuple[Call, Outcome | None]:
    """The action's call as its requester's, through the decision steps (not yet claimed)."""
    action = answerable(
        action_id, answer.user, confirm=True, reason=answer.reason, phrase=answer.phrase
    )
    context = context.but(user=action.user, conversation=action.conversation)
    call = Call(action.operation, action.entities, context, action=action)
    return call, decide(call, CONFIRMATION)


def _noted(call: Call, outcome: Outcome, answer: Answer) -> Outcome:
    """A claimed action's outcome carries the approver's reason (and name) to its audit entry."""
    if call.action is not None and call.action.status == PendingAction.Status.CONFIRMED:
        outcome.reason = answer.audit_reason(call.action, "approved")
    return outcome


def kept(call: Call, outcome: Outcome) -> Outcome:
    """A decided action keeps what it came to, for a caller that asks again (an MCP retry),
    with its sensitive entities' values redacted as everything else it keeps."""
    action = call.action
    if action is not None and action.status != PendingAction.Status.PENDING:
        result = outcome.result
        secrets = sensitive_values(call.tool, call.values)
        PendingAction.objects.filter(pk=action.pk, result__isnull=True).update(
            result=storable(
                {
                    "decision": outcome.decision,
                    "code": outcome.code,
                    "text": redact_text(outcome.text, secrets),
                    "data": redact_data(result.data, secrets) if result is not None else None,
                }
            )
        )
    return outcome


def _claimed_here(call: Call, stopped: Outcome | None, answer: Answer) -> Outcome:
    """The sync tail: claim, run, audit."""
    with telemetry.tool_span(call) as call.span:
        outcome = stopped or claim(call, answer) or run_sync(call)
        outcome = audited(call, _noted(call, outcome, answer))
    return kept(call, outcome)


async def _claimed_in_loop(call: Call, stopped: Outcome | None, answer: Answer) -> Outcome:
    """The async tail: ready (a toolset's), claim, run, audit.

    Stopped on the way, the action is audited and keeps what it came to (an MCP retry is told
    so, not left waiting): the audit's and the keeping's hops follow the claim's in the sync
    thread, so they see whether it claimed.
    """
    if stopped is not None:
        with telemetry.tool_span(call) as call.span:
            return await aaudited(call, stopped)
    own = own_session(call)
    try:
        with telemetry.tool_span(call) as call.span:
            try:
                outcome = await make_ready(call) or await sync_to_async(claim)(call, answer)
                outcome = outcome or await run_async(call)
            except asyncio.CancelledError as exc:
                outcome = _noted(call, came_to(call, exc), answer)
                await asyncio.shield(_settled(call, outcome))
                raise DispatchCancelled(outcome) from None
            return await _settled(call, _noted(call, outcome, answer))
    finally:
        await release(call)
        if own is not None:
            await own.stop()


async def _settled(call: Call, outcome: Outcome) -> Outcome:
    """Audited, then kept by its action."""
    return await sync_to_async(kept)(call, await aaudited(call, outcome))


def confirm_action(
    action_id: Any,
    *,
    reason: str = "",
    phrase: str = "",
    context: CallContext | None = None,
    **where: Any,
) -> Outcome:
    """Run a pending action once, as its requester, for whoever its policy lets confirm it.

    Raises ``ActionNotFound``, ``AlreadyDecided`` and the policy's refusals
    (``SecondPersonRequired``, ``ReasonRequired``, ``PhraseMismatch``), changing nothing.
    """
    context = context_of(context, where)
    answer = Answer(context.user, reason, phrase)
    call, stopped = _opened(action_id, context, answer)
    if stopped is None and call.tool is not None and call.tool.toolset is not None:
        return async_to_sync(_claimed_in_loop)(call, stopped, answer)
    return _claimed_here(call, stopped, answer)


async def aconfirm_action(
    action_id: Any,
    *,
    reason: str = "",
    phrase: str = "",
    context: CallContext | None = None,
    **where: Any,
) -> Outcome:
    context = context_of(context, where)
    answer = Answer(context.user, reason, phrase)
    call, stopped = await sync_to_async(_opened)(action_id, context, answer)
    if stopped is None and not runs_in_loop(call.tool):
        return await in_one_hop(_claimed_here, call, stopped, answer)
    return await _claimed_in_loop(call, stopped, answer)


def cancel_action(
    action_id: Any, *, reason: str = "", context: CallContext | None = None, **where: Any
) -> Outcome:
    """Refuse a pending action (audited ``cancelled``); raises ``ActionNotFound`` / ``AlreadyDecided``."""
    context = context_of(context, where)
    answer = Answer(context.user, reason)
    call = _refusal(answerable(action_id, answer.user, confirm=False), context)
    refused = unrefusable(call, answer.user)
    if refused is not None:
        with telemetry.tool_span(call) as call.span:
            return audited(call, refused)
    return _cancelled(
        action_id,
        answer,
        context,
        lambda: PendingAction.decide(
            action_id, answer.user, PendingAction.Status.CANCELLED, reason=reason, site=context.site
        ),
    )


def withdraw_action(action_id: Any, *, reason: str = "", context: CallContext) -> Outcome:
    """Refuse a waiting action on its requester's behalf because its conversation is being
    deleted, whoever deletes it (its user, or staff): audited ``cancelled``, the deleter named."""
    answer = Answer(context.user, reason)
    return _cancelled(
        action_id,
        answer,
        context,
        lambda: PendingAction.withdraw(action_id, answer.user, reason=reason, site=context.site),
    )


def _cancelled(
    action_id: Any, answer: Answer, context: CallContext, move: Callable[[], PendingAction]
) -> Outcome:
    """The refusal's tail: the action moved to ``cancelled`` (or found expired), audited, kept."""
    try:
        action = move()
    except ActionExpired as exc:
        action = PendingAction.objects.get(pk=action_id)
        call = _refusal(action, context)
        outcome = call.stop(Decision.EXPIRED, exc)
    else:
        call = _refusal(action, context)
        result = ToolResult(
            text=gettext("Cancelled %(operation)s.") % {"operation": action.operation}
        )
        outcome = call.finish(Decision.CANCELLED, result=result)
        outcome.reason = answer.audit_reason(action, "refused")
    with telemetry.tool_span(call) as call.span:
        return kept(call, audited(call, outcome))


def unrefusable(call: Call, user: Any) -> Outcome | None:
    """The ``denied`` outcome of a refusal its answerer may not make after all: a run's whose
    credential lapsed, a deactivated user's, or a bounded token's beyond its ceiling (it changes
    things only through its tools)."""
    lapsed = still_signed_in(call)
    if lapsed is not None:
        return lapsed
    if not access_for(user).active:
        return call.stop(Decision.DENIED, AccountInactive())
    ceiling, tool = call.context.ceiling, call.tool
    if ceiling is None or (tool is not None and ceiling.allows(tool)):
        return None
    return call.stop(
        Decision.DENIED,
        OutsideTokenScope(
            gettext("This token does not allow %(operation)s.") % {"operation": call.operation}
        ),
    )


def _refusal(action: PendingAction, context: CallContext) -> Call:
    """The refused action's call, as its requester's (the audit's user)."""
    context = context.but(user=action.user, conversation=action.conversation)
    return Call(
        action.operation,
        action.entities,
        context,
        tool=context.site.find(action.operation),
        action=action,
    )


async def acancel_action(
    action_id: Any, *, reason: str = "", context: CallContext | None = None, **where: Any
) -> Outcome:
    return await sync_to_async(cancel_action)(
        action_id, reason=reason, context=context_of(context, where)
    )


def record_action(
    request: Any,
    operation: str,
    entities: dict[str, Any],
    *,
    domain: str = "",
    source: str = "admin",
    client: str = "",
) -> int:
    """Audit an action taken outside dispatch (the admin's Run now, Cancel job; a token's
    creation or revocation)."""
    context = CallContext(
        user=request.user,
        source=source,
        request_ip=request.META.get("REMOTE_ADDR") or None,
        client=client,
    )
    return recorded(context, operation, entities, domain=domain)


def recorded(
    context: CallContext, operation: str, entities: dict[str, Any], *, domain: str = ""
) -> int:
    """``record_action`` for a caller that holds a context rather than a request."""
    outcome = Outcome(operation=operation, decision=Decision.EXECUTED, entities=storable(entities))
    return write_audit(context, outcome, domain=domain)


def stop_job(job_id: Any, *, context: CallContext) -> Job:
    """Ask a job to stop for a user who may (its owner, or a holder of ``change_job``), audited
    ``cancel_job`` as the admin's Cancel is; refused, audited ``denied`` and ``JobNotFound`` raised."""
    try:
        job = cancel_job(context.user, job_id)
    except JobNotFound as exc:
        refused = Outcome(
            operation="cancel_job",
            decision=Decision.DENIED,
            entities=storable({"job": str(job_id)[:100]}),
            error=exc,
            error_summary=exc.message,
        )
        write_audit(context, refused, domain="jobs")
        raise
    recorded(context, "cancel_job", {"job": str(job.pk)}, domain="jobs")
    return job


def waiting_actions(
    user: Any, conversation: Conversation | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The conversation's own waiting actions (oldest first), and how many the user's inbox holds
    per conversation ("" for those in none, or in someone else's)."""
    if not rows_for("assistant.may_concern", user, _one_that_may_concern):
        return [], {}  # as nearly always: one plain query, not the inbox's two
    access_for(user)  # a reading permission news made stale is replaced: the inbox asks has_perm
    answerable = PendingAction.objects.answerable_by(user)
    waiting: dict[str, int] = {}
    for row in answerable.values("conversation", "user").annotate(count=Count("id")).order_by():
        key = str(row["conversation"]) if row["conversation"] and row["user"] == user.pk else ""
        waiting[key] = waiting.get(key, 0) + row["count"]
    if conversation is None:
        return [], waiting
    own = answerable.owned_by(user).filter(conversation=conversation).select_related("user")
    return [action.shown() for action in own.order_by("created_at")], waiting


def _one_that_may_concern(user: Any) -> Any:
    return PendingAction.objects.may_concern(user).order_by().values_list("pk")[:1]
