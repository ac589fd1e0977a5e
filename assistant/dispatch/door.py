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
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import IntegrityError
from django.utils.translation import gettext

from .. import telemetry
from ..access.approvals import policy_for
from ..access.caches import cached_access
from ..access.predicate import denials
from ..conf import assistant_settings
from ..core.declaration import AssistantTool
from ..core.lifecycle import ToolSession, new_session
from ..core.redaction import redacted_entities
from ..core.storable import storable
from ..exceptions import Cancelled
from ..models import PendingAction
from .audit import _conversation_gone, aaudited, audited
from .calls import Call, CallContext, Decision, DispatchCancelled, Outcome, context_of
from .execution import (
    aprepare,
    in_one_hop,
    make_ready,
    prepare,
    release,
    run_async,
    run_sync,
    runs_in_loop,
    stopped,
)
from .refusals import (
    Step,
    authorize,
    authorize_instance,
    look_up,
    still_signed_in,
    validate,
    within_bounds,
)

logger = logging.getLogger("assistant.dispatch")


def _confirmation_summary(tool: AssistantTool, entities: dict[str, Any]) -> str:
    """The approval's sentence when the tool prepares none: what it does, and with what."""
    shown = ", ".join(
        f"{name}: “{value}”" if isinstance(value, str) else f"{name}: {value}"
        for name, value in entities.items()
    )
    return f"{tool.description} ({shown})" if shown else tool.description


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


def open_action(call: Call) -> Outcome:
    """The confirmation gate: store a pending action instead of running the handler."""
    tool, prepared = call.tool, call.prepared
    assert tool is not None
    stored = storable(call.values)
    approval = policy_for(tool, after_results=call.context.after_results)
    summary = (
        prepared.summary
        if prepared is not None and prepared.summary
        else _confirmation_summary(tool, redacted_entities(tool, stored))
    )
    if approval.steered:
        summary += " " + gettext(
            "(Asked first: the assistant proposed this after reading a tool's output, which "
            "may have steered it.)"
        )
    try:
        call.action = PendingAction.open(
            user=call.context.user,
            operation=tool.operation,
            entities=stored,
            ttl_seconds=assistant_settings.CONFIRMATION_TTL,
            conversation=call.context.conversation,
            summary=summary,
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
            Decision.CANCELLED,
            Cancelled(gettext("The conversation was deleted; nothing was asked.")),
        )
    return call.finish(Decision.CONFIRMATION_REQUESTED)


def gated(call: Call) -> bool:
    """Whether the gate stops this call: its policy asks first and it is not a confirmed action's."""
    assert call.tool is not None
    return (
        not call.confirmed and policy_for(call.tool, after_results=call.context.after_results).asks
    )


# -- the doors ------------------------------------------------------------------------------------


# Work of the caller's own on the sync thread once a call is audited, in the call's own hop (a
# turn stores its reply there): it gets the outcome; its failure is logged, never the call's.
Then = Callable[[Outcome], None]


def here(call: Call, then: Then | None = None) -> Outcome:
    """The whole pipeline on this thread: decide, gate, run, audit (and then the caller's ``then``)."""
    with telemetry.tool_span(call) as call.span:
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
        with telemetry.tool_span(call) as call.span:
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
