"""Launching a turn in the background (the websocket): the requests, their lane, what refuses them before they start."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.utils.translation import gettext, gettext_lazy

from ..access.caches import refresh_access
from ..access.credentials import Credential
from ..access.rates import TurnRate
from ..access.tokens import Ceiling
from ..core.cancellation import CancellationToken
from ..core.lifecycle import ToolSession
from ..dispatch.audit import write_audit
from ..dispatch.calls import CallContext, Decision, Outcome
from ..dispatch.confirmation import acancel_action, aconfirm_action, answerable
from ..exceptions import ActionNotFound, AssistantError, CredentialLapsed, MessageNotStored, outage
from ..models import AuditEntry, Conversation, PendingAction
from .conversations import take_client_results
from .lanes import Hygiene, keep, loop_state, on_turn_threads
from .messages import TurnResult, start_turn
from .planners import KeywordPlanner, get_planner
from .planners.keywords import Intent
from .records import secrets_of
from .runs import Work, run_started_turn
from .turn import ClientResult, ClientTool, Turn

logger = logging.getLogger("assistant.chat")
FRAME_FAILED = gettext_lazy("Something went wrong; please try again.")
Listener = Callable[[dict[str, Any]], None]


# -- turns in the background (the websocket) ---------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class NewMessage:
    """A message (as ``check_message`` returned it) for one of the user's conversations, by
    object (already checked to be theirs) or id, or for a new one (None)."""

    text: str
    conversation: Conversation | Any = None
    client_tools: tuple[ClientTool, ...] = ()  # an AG-UI client's own, for the LLM to offer


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionAnswer:
    """An answer to a pending action the user may decide: confirm it (with what its policy
    asks for: a reason, the typed phrase) or reject it."""

    action: Any
    confirm: bool
    reason: str = ""
    phrase: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Resumption:
    """Answers to actions waiting in one conversation, given in one run (AG-UI's resume).

    An action of another conversation is not found; approving an expired one fails the run
    (``expired``); one already answered the same way by this user is told so, not run again.
    """

    conversation: Conversation
    answers: tuple[ActionAnswer, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResults:
    """What the client's own tools returned for the calls the conversation's last reply made
    (``pending_client_calls``, checked by the caller): that reply goes on in a run of its own."""

    conversation: Conversation
    results: tuple[ClientResult, ...]
    client_tools: tuple[ClientTool, ...] = ()


Request = NewMessage | ActionAnswer | Resumption | ToolResults


class Launch:
    """A turn launched on a lane, independent of whoever asked for it.

    ``async with launch.start() as conversation`` waits until the turn is stored and may run,
    or raises why it was refused; the run begins when the block ends, so the caller can start
    listening to the conversation first.
    """

    def __init__(self) -> None:
        self._stored: asyncio.Future[Conversation] = asyncio.get_running_loop().create_future()
        self._go = asyncio.Event()
        self.task: asyncio.Task[TurnResult | None] | None = None

    @asynccontextmanager
    async def start(self) -> AsyncIterator[Conversation]:
        try:
            yield await asyncio.shield(self._stored)
        finally:
            self._go.set()

    def go(self) -> None:
        """Let the run begin (what the end of ``start``'s block does)."""
        self._go.set()


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """How a transport wants its run: its id, its stop token, and a listener of its frames."""

    run_id: str | None = None
    cancel: CancellationToken | None = None
    listener: Listener | None = None
    ceiling: Ceiling | None = None  # a bearer token's: the turn's calls and catalog stay under it
    client: str = ""  # the audit's client column (a token's name)
    # The transport's turn rate, counted in the turn's first sync step before anything is
    # stored: past it the turn is refused (``Throttled``).
    throttle: TurnRate | None = None
    # What signed the transport's user in: confirmed in the turn's first sync step (a session
    # that ended refuses the turn there), then before each of the turn's model and tool calls.
    credential: Credential | None = None
    # Where the run's frames go when the channel layer cannot carry them: the inbox of the
    # socket that started it (it is in this process, and its user waits on this run).
    undelivered: asyncio.Queue[list[str]] | None = None


def launch(
    user: Any,
    request: Request,
    *,
    source: str,
    request_ip: str | None = None,
    session: ToolSession | None = None,
    run: Run | None = None,
) -> Launch:
    """Store a message (or find the pending action) and run its turn on a lane, in the background.

    ``run`` lets a transport that serves one run per request (AG-UI over HTTP) name it, stop it
    and hear its frames itself, besides the conversation's sockets.
    """
    launched = Launch()
    launched.task = keep(
        asyncio.ensure_future(
            _in_lane(launched, user, request, source, request_ip, session, run or Run())
        )
    )
    return launched


async def _in_lane(
    launched: Launch,
    user: Any,
    request: Request,
    source: str,
    request_ip: str | None,
    session: ToolSession | None,
    run: Run,
) -> TurnResult | None:
    # A Stop may come while the turn still waits for a lane: its token listens from now on.
    cancel = run.cancel or CancellationToken()
    control = loop_state().control
    target = None if isinstance(request, ActionAnswer) else request.conversation
    waiting = str(getattr(target, "pk", target)) if target else None
    queued = f"queued-{uuid.uuid4().hex}"
    if waiting:
        control.register(waiting, queued, cancel)
    try:
        async with on_turn_threads() as hygiene:
            try:
                turn = await sync_to_async(_begin)(
                    hygiene,
                    user,
                    request,
                    source=source,
                    request_ip=request_ip,
                    session=session,
                    cancel=cancel,
                    run_id=run.run_id,
                    throttle=run.throttle,
                    ceiling=run.ceiling,
                    client=run.client,
                    credential=run.credential,
                )
            except Exception as exc:
                launched._stored.set_exception(_refusal(exc, request))
                launched._stored.exception()  # (retrieved: a caller that left is no error)
                return None
            turn.listener = run.listener
            turn.publisher.undelivered = run.undelivered
            turn.hygiene = hygiene
            launched._stored.set_result(turn.conversation)
            await launched._go.wait()
            work: Work | None = None
            if isinstance(request, Resumption):
                work = functools.partial(answer_actions, answers=request.answers)
            elif isinstance(request, ActionAnswer):
                work = functools.partial(
                    answer_action,
                    action_id=request.action,
                    confirm=request.confirm,
                    reason=request.reason,
                    phrase=request.phrase,
                )
            return await run_started_turn(turn, work, slot=True)
    finally:
        if waiting:
            control.unregister(waiting, queued)


def _begin(
    hygiene: Hygiene,
    user: Any,
    request: Request,
    *,
    source: str,
    request_ip: str | None,
    session: ToolSession | None,
    cancel: CancellationToken,
    run_id: str | None = None,
    throttle: TurnRate | None = None,
    ceiling: Ceiling | None = None,
    client: str = "",
    credential: Credential | None = None,
) -> Turn:
    hygiene.begin()
    planned = None
    vouched = credential is not None and still_signed_in(
        credential, user, _requested(request), source=source, request_ip=request_ip, client=client
    )
    if throttle is not None:
        throttle.admit(user)
    if isinstance(request, ActionAnswer):
        answering = decision_turn(
            user,
            request.action,
            confirm=request.confirm,
            reason=request.reason,
            phrase=request.phrase,
            source=source,
            session=session,
        )
        answering.credential, answering.vouched = credential, vouched
        return answering
    if isinstance(request, Resumption):
        for answer in request.answers:
            action = answerable(
                answer.action,
                user,
                confirm=answer.confirm,
                reason=answer.reason,
                phrase=answer.phrase,
            )
            if action.conversation_id != request.conversation.pk:
                raise ActionNotFound()
        conversation, message = request.conversation, None
    elif isinstance(request, ToolResults):
        take_client_results(request.conversation)
        conversation, message = request.conversation, None
    else:
        planned = _plan_ahead(user, request.text, session, ceiling)
        secrets = None if planned is None else secrets_of(planned)
        conversation, message = start_turn(
            user, request.text, request.conversation, secrets=secrets
        )
    turn = Turn(
        user=user,
        conversation=conversation,
        user_message=message,
        source=source,
        request_ip=request_ip,
        session=session,
        cancel=cancel,
        run_id=run_id,
        ceiling=ceiling,
        client=client,
        credential=credential,
    )
    turn.vouched = vouched
    if isinstance(request, NewMessage | ToolResults):
        turn.client_tools = request.client_tools
    if isinstance(request, ToolResults):
        turn.client_results = request.results
    if planned is not None:
        turn.planned = planned
    return turn


START_TURN = "start_turn"  # how a turn refused before it started is named in the audit trail


def still_signed_in(
    credential: Credential,
    user: Any,
    requested: dict[str, Any],
    *,
    source: str,
    request_ip: str | None,
    client: str = "",
    operation: str = START_TURN,
) -> bool:
    """Whether the credential holds (a turn's first hop: then it is vouched for its first step).

    A lapsed one raises ``CredentialLapsed``, audited ``denied`` once as ``operation`` with
    what was ``requested``, before anything is stored; a deactivated user's turn still runs,
    for its first step to say so, as it always has.
    """
    lapse = credential.lapse()
    if lapse is None or lapse.code == "account_inactive":
        return lapse is None
    context = CallContext(user=user, source=source, request_ip=request_ip, client=client)
    refused = Outcome(
        operation=operation,
        decision=Decision.DENIED,
        entities=requested,
        error_summary=lapse.message,
    )
    write_audit(context, refused, domain="assistant")
    raise lapse


def _requested(request: Request) -> dict[str, Any]:
    """What a refused turn was asked for, as its audit entry names it."""
    if isinstance(request, ActionAnswer):
        verb = "confirm" if request.confirm else "reject"
        return {"request": verb, "action": str(request.action)[:100]}
    if isinstance(request, Resumption):
        return {"request": "resume", "actions": [str(a.action)[:100] for a in request.answers]}
    return {"request": "tool_results" if isinstance(request, ToolResults) else "message"}


def _plan_ahead(
    user: Any, text: str, session: ToolSession | None, ceiling: Ceiling | None
) -> list[Intent] | None:
    """The keyword planner plans in the turn's first hop, before the message is stored: the
    run needs no hop of its own for it, and the message and a new conversation's title are
    stored redacted at once. None for other planners, or when planning fails here (the run
    plans again, and fails as it would)."""
    planner = get_planner()
    if not isinstance(planner, KeywordPlanner):
        return None
    refresh_access(user)
    try:
        return planner.plan_text(text, user, session, ceiling)
    except Exception:
        return None


def _refusal(exc: Exception, request: Request) -> AssistantError:
    """What the client is told when a turn cannot start (nothing was stored)."""
    if isinstance(exc, AssistantError):
        return exc
    unavailable = outage(exc)
    if unavailable is not None:
        logger.warning("A turn could not start: the database is unavailable (%s)", exc)
        return unavailable
    if isinstance(request, ActionAnswer | Resumption):
        logger.exception("Starting a decision turn failed", exc_info=exc)
        return AssistantError(FRAME_FAILED, code="internal_error")
    if isinstance(exc, DatabaseError):
        # (say, the user or the conversation was deleted meanwhile): nothing was stored
        logger.exception("Storing a message failed", exc_info=exc)
        return MessageNotStored()
    logger.exception("Starting a turn failed", exc_info=exc)
    return MessageNotStored(code="internal_error")


def decision_turn(
    user: Any,
    action_id: Any,
    *,
    confirm: bool,
    reason: str = "",
    phrase: str = "",
    source: str,
    session: ToolSession | None = None,
) -> Turn:
    """A run for answering a pending action, on its conversation (or a new one of the user's:
    a second person's answer never runs in the requester's conversation)."""
    action = answerable(action_id, user, confirm=confirm, reason=reason, phrase=phrase)
    conversation = action.conversation if action.user_id == user.pk else None
    if conversation is None:
        title = f"{'Confirm' if confirm else 'Reject'} {action.operation}"
        conversation = Conversation.objects.create(user=user, title=title)
    return Turn(
        user=user, conversation=conversation, user_message=None, source=source, session=session
    )


async def answer_action(
    turn: Turn, action_id: Any, *, confirm: bool, reason: str = "", phrase: str = ""
) -> Outcome:
    """The work of a confirm or reject run: decide through dispatch and stream the outcome."""
    tool_call_id = f"call_{uuid.uuid4().hex[:16]}"
    context = turn.step_context()
    if confirm:
        outcome = await aconfirm_action(action_id, reason=reason, phrase=phrase, context=context)
    else:
        outcome = await acancel_action(action_id, reason=reason, context=context)
    await turn.announce_call(tool_call_id, outcome.operation, json.dumps(outcome.entities))
    await turn.record(outcome, tool_call_id)
    if isinstance(outcome.error, CredentialLapsed):
        raise outcome.error  # nothing more runs under it (the answer's audit says denied)
    await turn.say(outcome.text)
    return outcome


async def answer_actions(turn: Turn, answers: tuple[ActionAnswer, ...]) -> None:
    """The work of a resumption: answer each action in turn (see ``Resumption``)."""
    for index, answer in enumerate(answers):
        if index:
            await turn.say("\n")
        if await sync_to_async(_answered_alike)(turn.user, answer):
            if answer.confirm:
                await turn.say(gettext("This action was already approved."))
            else:
                await turn.say(gettext("This action was already rejected."))
            continue
        outcome = await answer_action(
            turn, answer.action, confirm=answer.confirm, reason=answer.reason, phrase=answer.phrase
        )
        if answer.confirm and outcome.decision == AuditEntry.Decision.EXPIRED and outcome.error:
            raise outcome.error  # (refusing an expired action is done: it can no longer run)


def _answered_alike(user: Any, answer: ActionAnswer) -> bool:
    """Whether this user already gave the action this answer (a resume sent twice)."""
    status = PendingAction.Status.CONFIRMED if answer.confirm else PendingAction.Status.CANCELLED
    return PendingAction.objects.filter(
        pk=answer.action, status=status, decided_by_id=user.pk
    ).exists()
