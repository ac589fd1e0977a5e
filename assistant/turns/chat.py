"""The turn runner, shared by every transport: store the message, run the turn, store the reply."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from .. import liveness
from ..access.credentials import Credential
from ..access.credentials import watch as watch_credential
from ..access.permissions import refresh_access
from ..access.tokens import Ceiling
from ..conf import assistant_settings
from ..core.cancellation import CancellationToken
from ..core.lifecycle import ToolSession, new_session
from ..core.redaction import redact_text
from ..core.registry import ToolRegistry, ToolResult, registry
from ..core.storable import storable_text
from ..dispatch.audit import write_audit
from ..dispatch.bounds import within_deadline
from ..dispatch.calls import CallContext, Decision, Outcome
from ..dispatch.confirmation import (
    acancel_action,
    aconfirm_action,
    answerable,
    recorded,
    withdraw_action,
)
from ..exceptions import (
    ActionNotFound,
    AssistantError,
    ConversationNotFound,
    CredentialLapsed,
    InvalidIdempotencyKey,
    InvalidMessage,
    InvalidRunInput,
    InvalidTitle,
    MessageNotStored,
    TurnInProgress,
    outage,
)
from ..models import AuditEntry, Conversation, Job, Message, PendingAction
from ..stream import events
from .lanes import Hygiene, keep, loop_state, on_turn_threads, request_stop, turn_slot
from .planners import KeywordPlanner, get_planner
from .planners.keywords import Intent
from .turn import (
    CLIENT_TOOL,
    ClientResult,
    ClientTool,
    Turn,
    nested_savepoint,
    secrets_of,
    short_title,
)

logger = logging.getLogger("assistant.chat")
FRAME_FAILED = "Something went wrong; please try again."
# The conversation a client's own thread id names for one user (AG-UI clients choose the ids).
THREADS = uuid.UUID("6f1d3a52-6c1b-4f5e-9a59-2d5bfe0c6a11")
Listener = Callable[[dict[str, Any]], None]


@dataclass(kw_only=True, slots=True)
class TurnResult:
    conversation: Conversation
    user_message: Message | None
    assistant_message: Message
    outcomes: list[Outcome] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    run_id: str = ""
    error: AssistantError | None = None  # what the run failed with, if it did

    @property
    def pending_actions(self) -> list[Any]:
        return [
            o.pending_action
            for o in self.outcomes
            if o.decision == AuditEntry.Decision.CONFIRMATION_REQUESTED
            and o.pending_action is not None
        ]


def check_message(text: Any) -> str:
    """The message as it will be stored, or ``InvalidMessage``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessage("The message is empty.")
    limit = assistant_settings.MAX_MESSAGE_LENGTH
    if len(text) > limit:
        raise InvalidMessage(f"The message is longer than {limit} characters.")
    if storable_text(text) != text:
        raise InvalidMessage("The message contains a NUL character or an unpaired surrogate.")
    return text.strip()


def conversation_for(user: Any, conversation_id: Any) -> Conversation:
    """The user's own conversation with this id, or ``ConversationNotFound`` (never someone else's)."""
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        raise ConversationNotFound() from None
    conversation = Conversation.objects.filter(pk=pk, user_id=user.pk).first()
    if conversation is None:
        raise ConversationNotFound()
    return conversation


def thread_conversation(user: Any, thread_id: str) -> Conversation:
    """The conversation an AG-UI thread id names for this user: their own with that id, else the
    one the id names for them alone (not saved until a message is), so another user's id, a
    missing one and a malformed one all answer alike: a new thread."""
    with contextlib.suppress(ConversationNotFound):
        return conversation_for(user, thread_id)
    pk = uuid.uuid5(THREADS, f"{user.pk}:{thread_id}")
    conversation = Conversation.objects.filter(pk=pk).first()
    if conversation is None:
        return Conversation(pk=pk, user=user)
    if conversation.user_id != user.pk:  # (a uuid5 collision): never someone else's
        raise ConversationNotFound()
    return conversation


def waiting_actions(user: Any, conversation: Conversation) -> list[PendingAction]:
    """The user's actions waiting for an answer in this conversation, oldest first."""
    if conversation._state.adding:
        return []
    waiting = PendingAction.objects.owned_by(user).waiting().filter(conversation=conversation)
    return list(waiting.select_related("user").order_by("created_at"))


def running_jobs(user: Any, conversation: Conversation) -> list[Job]:
    """The user's jobs of this conversation that are queued or running, oldest first."""
    if conversation._state.adding:
        return []
    jobs = Job.objects.owned_by(user).active().filter(conversation=conversation)
    return list(jobs.order_by("created_at"))


def pending_client_calls(conversation: Conversation) -> list[str]:
    """The calls of the client's own tools that the conversation's last reply made and no run
    has answered yet (AG-UI client tools), in order."""
    last = _waiting_reply(conversation)
    if last is None:
        return []
    return [r["tool_call_id"] for r in last.tool_calls or [] if r.get("decision") == CLIENT_TOOL]


def _waiting_reply(conversation: Conversation) -> Message | None:
    """The conversation's last message, if it is a reply no run has taken client results for."""
    if conversation._state.adding:
        return None
    last = Message.objects.filter(conversation=conversation).order_by("-created_at", "-id").first()
    if last is None or last.role != Message.Role.ASSISTANT or last.answered_at is not None:
        return None
    return last


def take_client_results(conversation: Conversation) -> None:
    """Claim the last reply's client tool calls for this run; ``InvalidRunInput`` if another
    run took them first (the same results sent twice at once)."""
    reply = _waiting_reply(conversation)
    if reply is None or not reply.take_client_results():
        raise InvalidRunInput(
            "The tool messages must answer the calls of your tools the last run made, each once.",
            code="unknown_tool_call",
        )


def check_title(title: Any) -> str:
    """A conversation title as it will be stored, or ``InvalidTitle``."""
    if not isinstance(title, str) or not title.strip():
        raise InvalidTitle("The title is empty.")
    limit = Conversation._meta.get_field("title").max_length or 0
    title = " ".join(title.split())
    if len(title) > limit:
        raise InvalidTitle(f"The title is longer than {limit} characters.")
    if storable_text(title) != title:
        raise InvalidTitle("The title contains a NUL character or an unpaired surrogate.")
    return title


def rename_conversation(user: Any, conversation_id: Any, title: Any) -> Conversation:
    """Give one of the user's conversations the title they chose (its place in the list stays)."""
    conversation = conversation_for(user, conversation_id)
    conversation.title = check_title(title)
    Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
    return conversation


def search_conversations(
    conversations: QuerySet[Conversation], text: str
) -> QuerySet[Conversation]:
    """The conversations holding every word of ``text`` (any case) in their title or a message."""
    words = text.split()
    for word in words:
        found = Message.objects.filter(conversation=OuterRef("pk"), text__icontains=word)
        conversations = conversations.filter(Q(title__icontains=word) | Exists(found))
    return conversations


def delete_conversations(
    user: Any,
    conversations: QuerySet[Conversation],
    *,
    source: str,
    request_ip: str | None = None,
    as_staff: bool = False,
) -> int:
    """Delete these conversations of the user's (any of them ``as_staff``, the caller having
    checked the permission), hard: their messages go, the audit stays.

    Actions still waiting in them are refused first (audited ``cancelled``, naming who deleted
    them when not their requester: nobody can approve what its user no longer sees), and turns
    running in them are asked to stop. Audit entries, jobs and decided actions keep their rows,
    with the conversation unset. Staff deleting someone's conversations is audited too.
    """
    if not as_staff:
        conversations = conversations.filter(user_id=user.pk)
    owners = dict(conversations.values_list("pk", "user_id"))
    ids = list(owners)
    context = CallContext(user=user, source=source, request_ip=request_ip)
    waiting = PendingAction.objects.waiting().filter(conversation_id__in=ids)
    for action_id in waiting.values_list("pk", flat=True):
        with contextlib.suppress(AssistantError):  # decided meanwhile elsewhere: not waiting either
            withdraw_action(action_id, reason="conversation deleted", context=context)
    try:
        for pk in ids:
            async_to_sync(request_stop)(str(pk))
    except Exception:  # (the channel layer is down): a turn still running ends unstored
        logger.exception("Asking the turns of deleted conversations to stop failed")
    deleted = Conversation.objects.filter(pk__in=ids).delete()[1]
    if as_staff:
        for pk, owner in owners.items():
            entities = {"conversation": str(pk), "user": owner}
            recorded(context, "delete_conversation", entities, domain="conversations")
    return deleted.get(Conversation._meta.label, 0)


def stored_key(user: Any, idempotency_key: Any) -> str | None:
    """How a client's ``Idempotency-Key`` is kept on a message (one namespace per user)."""
    if idempotency_key is None:
        return None
    key = str(idempotency_key)
    if not 1 <= len(key) <= 200 or not all(" " <= char <= "~" for char in key):
        raise InvalidIdempotencyKey()
    return f"{user.pk}:{key}"


def start_turn(
    user: Any,
    text: str,
    conversation: Conversation | Any = None,
    idempotency_key: Any = None,
    *,
    secrets: set[str] | None = None,
) -> tuple[Conversation, Message]:
    """Store the user's message (and a new conversation) before anything else can fail.

    ``text`` is what ``check_message`` returned. ``conversation`` is one the caller already
    checked belongs to ``user``, an id to check, or None for a new conversation. A new
    conversation gets its title once the planner had the chance to find secrets in the
    message (``Turn.show_user_message``); with ``secrets`` (a planner that planned already
    found these), the message is stored redacted and a new conversation with its title.
    """
    key = stored_key(user, idempotency_key)
    if secrets is not None:
        text = redact_text(text, secrets)
    # A new conversation and its first message are stored together; a message alone needs no
    # transaction of its own (no BEGIN and COMMIT round trips).
    new = conversation._state.adding if isinstance(conversation, Conversation) else not conversation
    title = short_title(text) if new and secrets is not None else ""
    process = liveness.tracking()  # (the turn's process, in the message's own INSERT)
    try:
        with transaction.atomic() if new else nested_savepoint():
            if isinstance(conversation, Conversation):
                if conversation._state.adding:  # a new thread's (``thread_conversation``)
                    conversation.title = conversation.title or title
                    conversation.save(force_insert=True)
            elif conversation:
                conversation = conversation_for(user, conversation)
            else:
                conversation = Conversation.objects.create(user=user, title=title)
            message = Message.objects.create(
                conversation=conversation,
                role=Message.Role.USER,
                text=text,
                idempotency_key=key,
                process=process,
            )
    except IntegrityError:
        if key is not None and Message.objects.filter(idempotency_key=key).exists():
            raise TurnInProgress() from None  # the same request, sent twice at once
        if not isinstance(conversation, Conversation):
            raise
        stored = Conversation.objects.filter(pk=conversation.pk, user_id=user.pk).first()
        if stored is None:
            raise ConversationNotFound() from None  # deleted meanwhile (from another tab)
        if not conversation._state.adding:
            raise
        # A new thread's first two runs at once: the other stored the thread first.
        return start_turn(user, text, stored, idempotency_key)
    liveness.running(message)
    return conversation, message


def earlier_turn(user: Any, idempotency_key: Any) -> TurnResult | None:
    """The turn a request with this key already ran (as stored), or None if there was none."""
    key = stored_key(user, idempotency_key)
    if key is None:
        return None
    found = Message.objects.filter(idempotency_key=key).select_related("conversation")
    messages = {message.role: message for message in found}
    if not messages:
        return None
    reply = messages.get(Message.Role.ASSISTANT)
    if reply is None:
        raise TurnInProgress()
    waiting = [uuid.UUID(r["pending_action"]) for r in reply.tool_calls if r.get("pending_action")]
    actions = PendingAction.objects.owned_by(user).in_bulk(waiting)
    audited = [r["audit_id"] for r in reply.tool_calls if r.get("audit_id")]
    durations = dict(AuditEntry.objects.filter(pk__in=audited).values_list("pk", "duration_ms"))
    return TurnResult(
        conversation=reply.conversation,
        user_message=messages.get(Message.Role.USER),
        assistant_message=reply,
        outcomes=[_stored_outcome(r, actions, durations) for r in reply.tool_calls],
    )


def _stored_outcome(
    record: dict[str, Any], actions: dict[Any, PendingAction], durations: dict[int, float]
) -> Outcome:
    """An outcome as the conversation remembers it (``tool_call_record``)."""
    code, text = record.get("code"), record.get("text") or ""
    pending = record.get("pending_action")
    return Outcome(
        operation=record["operation"],
        decision=record["decision"],
        entities=record.get("entities") or {},
        result=None
        if code
        else ToolResult(text=text, task_id=record.get("task_id"), data=record.get("data")),
        error=AssistantError(text, code=code) if code else None,
        pending_action=actions.get(uuid.UUID(pending)) if pending else None,
        audit_id=record.get("audit_id"),
        duration_ms=durations.get(record.get("audit_id") or 0, 0.0),
    )


Work = Callable[[Turn], Awaitable[Any]]


async def run_started_turn(
    turn: Turn, work: Work | None = None, *, slot: bool = False
) -> TurnResult:
    """Run ``work`` (by default the planner's) as one AG-UI run; whatever happens, the run ends
    stored and announced. The planner is chosen inside the run: one that cannot load ends it as
    RUN_ERROR. With ``slot`` the work waits for one of the process's turn slots (the run has
    started and says it is queued meanwhile)."""
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

    def when_stored(self, callback: Callable[[Conversation | None], None]) -> None:
        """``start`` without a task: call ``callback`` with the conversation once the turn is
        stored (None: it was refused), from the event loop; the run waits for ``go``."""

        def stored(future: asyncio.Future[Conversation]) -> None:
            try:
                callback(None if future.exception() else future.result())
            except Exception:
                logger.exception("A launched turn's callback failed; the run begins")
                self.go()

        self._stored.add_done_callback(stored)


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """How a transport wants its run: its id, its stop token, and a listener of its frames."""

    run_id: str | None = None
    cancel: CancellationToken | None = None
    listener: Listener | None = None
    ceiling: Ceiling | None = None  # a bearer token's: the turn's calls and catalog stay under it
    client: str = ""  # the audit's client column (a token's name)
    # A check of the transport's (its rate limit), run with the user first in the turn's first
    # sync step, before anything is stored: it raises an AssistantError to refuse the turn.
    admit: Callable[[Any], None] | None = None
    # What signed the transport's user in: confirmed in the turn's first sync step (a session
    # that ended refuses the turn there), then before each of the turn's model and tool calls.
    credential: Credential | None = None
    # Where the run's frames go when the channel layer cannot carry them (the socket that
    # started it: it is in this process, and its user waits on this run).
    undelivered: Callable[[list[str]], Awaitable[None]] | None = None


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
                    admit=run.admit,
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
    admit: Callable[[Any], None] | None = None,
    ceiling: Ceiling | None = None,
    client: str = "",
    credential: Credential | None = None,
) -> Turn:
    hygiene.begin()
    planned = None
    vouched = credential is not None and still_signed_in(
        credential, user, _requested(request), source=source, request_ip=request_ip, client=client
    )
    if admit is not None:
        admit(user)
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
            verb = "approved" if answer.confirm else "rejected"
            await turn.say(f"This action was already {verb}.")
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
