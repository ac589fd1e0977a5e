"""Answering a pending action: confirm it (re-checked, claimed once, run, audited) or refuse it.

The second entrance of the one door: a confirmed action takes dispatch's own steps (its
decision steps with two of its own, readiness, the run and the audit); its gate is the claim.
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from .dispatch import (
    Call,
    CallContext,
    Decision,
    Outcome,
    Step,
    aaudited,
    audited,
    authorize,
    authorize_instance,
    context_of,
    decide,
    in_one_hop,
    look_up,
    make_ready,
    own_session,
    run_async,
    run_sync,
    runs_in_loop,
    validate,
    write_audit,
)
from .exceptions import ActionExpired, ActionNotFound, InvalidEntities
from .models import PendingAction
from .permissions import reread_access
from .registry import ToolResult
from .storable import storable


def still_bound(call: Call) -> Outcome | None:
    """The stored entities are the ones the user was asked to confirm."""
    assert call.action is not None
    if not call.action.is_bound_to(call.action.entities):
        return call.stop(
            Decision.INVALID,
            InvalidEntities({"entities": "changed since confirmation was requested"}),
        )
    return None


def authorize_now(call: Call) -> Outcome | None:
    """A risky moment: the tool check against flags and permissions as they are now."""
    reread_access(call.context.user)
    return authorize(call)


# dispatch's decision steps (DECISIONS), with the binding check and access read afresh
CONFIRMATION: tuple[Step, ...] = (
    look_up,
    validate,
    still_bound,
    authorize_now,
    authorize_instance,
)


def claim(call: Call) -> Outcome | None:
    """The gate of a pending action: claim it exactly once (an expired one stops the call)."""
    assert call.action is not None
    action = call.action
    try:
        call.action = PendingAction.decide(
            action.pk, call.context.user, PendingAction.Status.CONFIRMED, site=call.context.site
        )
    except ActionExpired as exc:
        action.refresh_from_db()
        call.action = action
        return call.stop(Decision.EXPIRED, exc)
    return None


def _waiting(action_id: Any, user: Any) -> PendingAction:
    """The user's own pending action with this id, or ``ActionNotFound``."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound() from None
    action = (
        PendingAction.objects.owned_by(user).filter(pk=pk).select_related("conversation").first()
    )
    if action is None:
        raise ActionNotFound()
    return action


def _opened(action_id: Any, context: CallContext) -> tuple[Call, Outcome | None]:
    """The action's call, through the decision steps (not yet claimed)."""
    action = _waiting(action_id, context.user)
    context = context.but(conversation=action.conversation)
    call = Call(action.operation, action.entities, context, action=action)
    return call, decide(call, CONFIRMATION)


def _claimed_here(call: Call, stopped: Outcome | None) -> Outcome:
    """The sync tail: claim, run, audit."""
    outcome = stopped or claim(call) or run_sync(call)
    return audited(call, outcome)


async def _claimed_in_loop(call: Call, stopped: Outcome | None) -> Outcome:
    """The async tail: ready (a toolset's), claim, run, audit."""
    if stopped is not None:
        return await aaudited(call, stopped)
    own = own_session(call)
    try:
        outcome = await make_ready(call) or await sync_to_async(claim)(call)
        return await aaudited(call, outcome or await run_async(call))
    finally:
        if own is not None:
            await own.stop()


def confirm_action(action_id: Any, *, context: CallContext | None = None, **where: Any) -> Outcome:
    """Run a pending action once for its owner; raises ``ActionNotFound`` / ``AlreadyDecided``."""
    call, stopped = _opened(action_id, context_of(context, where))
    if stopped is None and call.tool is not None and call.tool.toolset is not None:
        return async_to_sync(_claimed_in_loop)(call, stopped)
    return _claimed_here(call, stopped)


async def aconfirm_action(
    action_id: Any, *, context: CallContext | None = None, **where: Any
) -> Outcome:
    call, stopped = await sync_to_async(_opened)(action_id, context_of(context, where))
    if stopped is None and not runs_in_loop(call.tool):
        return await in_one_hop(_claimed_here, call, stopped)
    return await _claimed_in_loop(call, stopped)


def cancel_action(action_id: Any, *, context: CallContext | None = None, **where: Any) -> Outcome:
    """Refuse a pending action (audited ``cancelled``); raises ``ActionNotFound`` / ``AlreadyDecided``."""
    context = context_of(context, where)
    try:
        action = PendingAction.decide(
            action_id, context.user, PendingAction.Status.CANCELLED, site=context.site
        )
    except ActionExpired as exc:
        action = PendingAction.objects.get(pk=action_id)
        call = _refusal(action, context)
        return audited(call, call.stop(Decision.EXPIRED, exc))
    call = _refusal(action, context)
    result = ToolResult(text=f"Cancelled {action.operation}.")
    return audited(call, call.finish(Decision.CANCELLED, result=result))


def _refusal(action: PendingAction, context: CallContext) -> Call:
    context = context.but(conversation=action.conversation)
    return Call(
        action.operation,
        action.entities,
        context,
        tool=context.site.find(action.operation),
        action=action,
    )


async def acancel_action(
    action_id: Any, *, context: CallContext | None = None, **where: Any
) -> Outcome:
    return await sync_to_async(cancel_action)(action_id, context=context_of(context, where))


def record_action(
    request: Any, operation: str, entities: dict[str, Any], *, domain: str = ""
) -> int:
    """Audit a staff action taken outside dispatch (the admin's Run now, Cancel job)."""
    context = CallContext(
        user=request.user, source="admin", request_ip=request.META.get("REMOTE_ADDR") or None
    )
    outcome = Outcome(operation=operation, decision=Decision.EXECUTED, entities=storable(entities))
    return write_audit(context, outcome, domain=domain)
