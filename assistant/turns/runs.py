"""A turn's run: whatever happens, it ends with its reply stored and announced."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from .. import liveness, telemetry
from ..access.caches import refresh_access
from ..access.credentials import Credential
from ..access.credentials import watch as watch_credential
from ..access.tokens import Ceiling
from ..core.cancellation import CancellationToken
from ..core.lifecycle import ToolSession, new_session
from ..core.registry import ToolRegistry, registry
from ..dispatch.audit import write_audit
from ..dispatch.bounds import within_deadline
from ..dispatch.calls import Decision, Outcome
from ..exceptions import AssistantError, CredentialLapsed
from ..models import Message
from ..stream import events
from .lanes import loop_state, turn_slot
from .messages import TurnResult, check_message, earlier_turn, start_turn
from .planners import get_planner
from .turn import Turn

logger = logging.getLogger("assistant.chat")


Work = Callable[[Turn], Awaitable[Any]]


async def run_started_turn(
    turn: Turn, work: Work | None = None, *, slot: bool = False
) -> TurnResult:
    """Run ``work`` (by default the planner's) as one AG-UI run; whatever happens, the run ends
    stored and announced. The planner is chosen inside the run: one that cannot load ends it as
    RUN_ERROR. With ``slot`` the work waits for one of the process's turn slots (the run has
    started and says it is queued meanwhile). Traced as the turn's ``invoke_agent`` span."""
    with telemetry.turn_span(turn) as span:
        result = await _run(turn, work, slot)
        status = result.assistant_message.status
        span.set("assistant.turn.status", status)
        if status == Message.Status.FAILED:
            span.fail(result.error.code if result.error is not None else "turn_failed")
        return result


async def _run(turn: Turn, work: Work | None, slot: bool) -> TurnResult:
    loop = asyncio.get_running_loop()
    refresh_access(turn.user)  # a long-lived user object reloads what may have changed
    control = loop_state().control
    control.register(turn.thread_id, turn.run_id, turn.cancel)
    if turn.user_message is None:  # (one with a message is known by its message's row)
        liveness.running_run(turn.thread_id, turn.run_id, turn.message_id)
    # The user's message is echoed once the planner had the chance to find its secrets.
    await turn.emit(events.run_started(turn.thread_id, turn.run_id))
    status, shutdown = Message.Status.COMPLETE, False
    error: AssistantError | None = None
    lapses: list[CredentialLapsed] = []
    end_watch: Callable[[], None] | None = None
    try:
        task = asyncio.ensure_future(_admitted(turn, work) if slot else _work(turn, work))

        def stop_work() -> None:
            loop.call_soon_threadsafe(task.cancel)

        def lapsed(lapse: CredentialLapsed) -> None:
            # a token revoked (a session ended) while a step ran long, a tool or a job it waits
            # on: the run stops as a Stop stops it, and ends with the lapse, not the step's result
            lapses.append(lapse)
            turn.lapse = lapse
            turn.cancel.cancel()

        stop = turn.cancel.add_callback(stop_work)
        if turn.credential is not None:
            end_watch = watch_credential(turn.credential, lapsed)
        try:
            await within_deadline(task, turn.cancel.cancel)  # TURN_DEADLINE: the whole turn
        finally:
            stop()
            if end_watch is not None:
                end_watch()
    except asyncio.CancelledError:
        status = Message.Status.CANCELLED
        shutdown = not turn.cancel.is_cancelled
        if lapses and not shutdown:
            status, error = Message.Status.FAILED, lapses[0]
            await asyncio.shield(sync_to_async(audit_lapse)(turn, lapses[0]))
    except AssistantError as exc:
        status, error = Message.Status.FAILED, exc
    except Exception:
        logger.exception("Turn failed in conversation %s", turn.thread_id)
        status = Message.Status.FAILED
    answered = False
    try:
        message = await asyncio.shield(turn.finish(status, error))
        answered = True
    finally:
        control.unregister(turn.thread_id, turn.run_id)
        liveness.finished(turn.user_message, turn.run_id, answered=answered)
        await turn.publisher.close()
    if shutdown:
        raise asyncio.CancelledError
    if turn.session is not None and turn.session.closed:
        await turn.session.stop()  # its connection closed while this turn was still running
    return TurnResult(
        conversation=turn.conversation,
        user_message=turn.user_message,
        assistant_message=message,
        outcomes=turn.outcomes,
        frames=turn.frames,
        run_id=turn.run_id,
        error=error,
    )


def audit_lapse(turn: Turn, lapse: CredentialLapsed) -> None:
    """The run's credential lapsed while a step ran: audited ``denied`` once, as the turn."""
    refused = Outcome(
        operation="turn", decision=Decision.DENIED, entities={}, error_summary=lapse.message
    )
    write_audit(turn.call_context(), refused, domain="assistant")


async def _work(turn: Turn, work: Work | None) -> Any:
    return await (work or get_planner().run)(turn)


async def _admitted(turn: Turn, work: Work | None) -> Any:
    """The work, once a turn slot is free (a queued notice first when none is)."""

    async def queued() -> None:
        await turn.emit(events.custom("assistant.queued", {"runId": turn.run_id}))

    async with turn_slot(queued):
        return await _work(turn, work)


async def arun_turn(
    user: Any,
    text: Any,
    *,
    conversation_id: Any = None,
    source: str = "websocket",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
    cancel: CancellationToken | None = None,
    run_id: str | None = None,
    session: ToolSession | None = None,
    idempotency_key: str | None = None,
    ceiling: Ceiling | None = None,
    client: str = "",
    credential: Credential | None = None,
) -> TurnResult:
    """A whole turn: the user's message is stored first, the reply whatever happens.

    Without a ``session`` (REST, CLI) the turn gets its own, whose toolsets start on first use
    and stop when the turn ends. A turn sent again with the same ``idempotency_key`` is not
    run again: the first one is returned as stored. A bearer token's ``ceiling`` bounds both
    the planner's catalog and the turn's calls; ``client`` names the caller in their audit.
    ``credential``, what signed the request in just now, is confirmed again before every step
    after the first.
    """
    earlier = await sync_to_async(earlier_turn)(user, idempotency_key)
    if earlier is not None:
        return earlier
    conversation, user_message = await sync_to_async(start_turn)(
        user, check_message(text), conversation_id, idempotency_key
    )
    own = session is None
    turn = Turn(
        user=user,
        conversation=conversation,
        user_message=user_message,
        source=source,
        request_ip=request_ip,
        site=site,
        cancel=cancel,
        run_id=run_id,
        session=session or new_session(),
        ceiling=ceiling,
        client=client,
        credential=credential,
    )
    turn.vouched = credential is not None  # (the request was authenticated just now)
    try:
        return await run_started_turn(turn)
    finally:
        if own and turn.session is not None:
            await turn.session.stop()


def run_turn(
    user: Any,
    text: Any,
    *,
    conversation_id: Any = None,
    source: str = "rest",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
    idempotency_key: str | None = None,
    ceiling: Ceiling | None = None,
    client: str = "",
    credential: Credential | None = None,
) -> TurnResult:
    """The sync twin of ``arun_turn`` (REST, CLI): the same turn, returned whole."""
    return async_to_sync(arun_turn)(
        user,
        text,
        conversation_id=conversation_id,
        source=source,
        request_ip=request_ip,
        site=site,
        idempotency_key=idempotency_key,
        ceiling=ceiling,
        client=client,
        credential=credential,
    )
