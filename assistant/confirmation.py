"""Answering a pending action: confirm it (re-checked, claimed once, run, audited) or refuse it.

The second entrance of the one door: a confirmed action runs through the same checks, run and
audit steps as ``dispatch`` (``dispatch._Call``), only later and exactly once.
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from .dispatch import (
    Decision,
    Outcome,
    _aaudited,
    _audited,
    _Call,
    _in_one_hop,
    _ready,
    _run_async,
    _run_sync,
    jsonable,
)
from .exceptions import ActionExpired, ActionNotFound, InvalidEntities
from .lifecycle import CancellationToken
from .models import AuditEntry, PendingAction
from .permissions import access_for, reread_access
from .registry import ToolRegistry, ToolResult, registry


def _confirm_checks(
    action_id: Any,
    user: Any,
    source: str,
    request_ip: str | None,
    site: ToolRegistry,
    cancel: CancellationToken | None = None,
) -> tuple[_Call, Outcome | None]:
    """Re-validate and re-authorize a pending action, then claim it exactly once."""
    action = (
        PendingAction.objects.owned_by(user)
        .filter(pk=action_id)
        .select_related("conversation")
        .first()
    )
    if action is None:
        raise ActionNotFound("No such pending action is waiting for you.")
    call = _Call(
        action.operation,
        action.entities,
        user,
        action.conversation,
        source,
        request_ip,
        site,
        cancel,
    )
    call.action = action
    outcome = call.check()
    if outcome is None and not action.is_bound_to(action.entities):
        outcome = call.stop(
            Decision.INVALID,
            InvalidEntities({"entities": "changed since confirmation was requested"}),
        )
    if outcome is None:
        reread_access(user)  # a risky moment: flags and permissions as they are now
        call.access = access_for(user)
        outcome = call.authorize() or call.authorize_instance()
    if outcome is None:
        try:
            call.action = PendingAction.decide(
                action.pk, user, PendingAction.Status.CONFIRMED, site=site
            )
        except ActionExpired as exc:
            action.refresh_from_db()
            call.action = action
            outcome = call.stop(Decision.EXPIRED, exc)
    return call, outcome


def confirm_action(
    action_id: Any,
    *,
    user: Any,
    source: str = "api",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
    cancel: CancellationToken | None = None,
    session: Any = None,
) -> Outcome:
    """Run a pending action once for its owner; raises ``ActionNotFound`` / ``AlreadyDecided``."""
    operation = (
        PendingAction.objects.filter(pk=action_id).values_list("operation", flat=True).first()
        if _is_uuid(action_id)
        else None
    )
    tool = site._tools.get(operation) if operation else None
    if tool is not None and tool.toolset is not None:
        return async_to_sync(aconfirm_action)(
            action_id,
            user=user,
            source=source,
            request_ip=request_ip,
            site=site,
            cancel=cancel,
            session=session,
        )
    call, outcome = _confirm_checks(action_id, user, source, request_ip, site, cancel)
    if outcome is None:
        outcome = _run_sync(call, confirmed=True)
    return _audited(call, outcome)


async def aconfirm_action(
    action_id: Any,
    *,
    user: Any,
    source: str = "api",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
    cancel: CancellationToken | None = None,
    session: Any = None,
) -> Outcome:
    return await _aconfirm(action_id, user, source, request_ip, site, cancel, session)


async def _aconfirm(
    action_id: Any,
    user: Any,
    source: str,
    request_ip: str | None,
    site: ToolRegistry,
    cancel: CancellationToken | None,
    session: Any = None,
) -> Outcome:
    call, outcome = await sync_to_async(_confirm_checks)(
        action_id, user, source, request_ip, site, cancel
    )
    if outcome is None and call.tool is not None and call.tool.toolset is not None:
        from .lifecycle import new_session

        own = session is None
        call.session = session if session is not None else new_session()
        try:
            outcome = await _ready(call) or await _run_async(call, confirmed=True)
            return await _aaudited(call, outcome)
        finally:
            if own:
                await call.session.stop()
    if outcome is None:
        if call.tool is not None and not call.tool.is_async:
            return await _in_one_hop(_run_and_audit, call)
        outcome = await _run_async(call, confirmed=True)
    return await _aaudited(call, outcome)


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def _run_and_audit(call: _Call) -> Outcome:
    return _audited(call, _run_sync(call, confirmed=True))


def _cancel(
    action_id: Any, user: Any, source: str, request_ip: str | None, site: ToolRegistry
) -> Outcome:
    try:
        action = PendingAction.decide(action_id, user, PendingAction.Status.CANCELLED, site=site)
    except ActionExpired as exc:
        action = PendingAction.objects.get(pk=action_id)
        call = _Call(
            action.operation, action.entities, user, action.conversation, source, request_ip, site
        )
        call.action = action
        call.tool = site._tools.get(action.operation)
        return _audited(call, call.stop(Decision.EXPIRED, exc))
    call = _Call(
        action.operation, action.entities, user, action.conversation, source, request_ip, site
    )
    call.action = action
    call.tool = site._tools.get(action.operation)
    return _audited(
        call,
        call.finish(Decision.CANCELLED, result=ToolResult(text=f"Cancelled {action.operation}.")),
    )


def cancel_action(
    action_id: Any,
    *,
    user: Any,
    source: str = "api",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
) -> Outcome:
    """Refuse a pending action (audited ``cancelled``); raises ``ActionNotFound`` / ``AlreadyDecided``."""
    return _cancel(action_id, user, source, request_ip, site)


async def acancel_action(
    action_id: Any,
    *,
    user: Any,
    source: str = "api",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
) -> Outcome:
    return await sync_to_async(_cancel)(action_id, user, source, request_ip, site)


def record_action(
    request: Any, operation: str, entities: dict[str, Any], *, domain: str = ""
) -> int:
    """Audit a staff action taken outside dispatch (the admin's Run now, Cancel job)."""
    user = request.user if request.user.is_authenticated else None
    return AuditEntry.objects.create(
        user=user,
        username=user.get_username() if user is not None else "",
        operation=operation[:64],
        domain=domain,
        decision=Decision.EXECUTED,
        entities=jsonable(entities),
        source="admin",
        request_ip=request.META.get("REMOTE_ADDR") or None,
    ).pk
