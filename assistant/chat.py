"""One conversation turn, shared by every transport: store, plan, dispatch, stream, store."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import DatabaseError, transaction

from . import events
from .conf import assistant_settings
from .confirmation import acancel_action, aconfirm_action
from .dispatch import DispatchCancelled, Outcome, adispatch, redacted
from .exceptions import ActionNotFound, AssistantError, ConversationNotFound, InvalidMessage
from .lifecycle import CancellationToken, ToolSession, new_session
from .models import Conversation, Message, PendingAction
from .permissions import refresh_access
from .registry import ToolRegistry, registry
from .runner import Publisher, keep, lane, loop_state
from .storable import storable_text

logger = logging.getLogger("assistant.chat")
MESSAGE_NOT_STORED = "Sorry, your message could not be saved. Please try again."
TURN_FAILED = (
    "Sorry, something went wrong while answering; your message is saved. Please try again."
)


@dataclass(kw_only=True, slots=True)
class TurnResult:
    conversation: Conversation
    user_message: Message | None
    assistant_message: Message
    outcomes: list[Outcome] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    run_id: str = ""

    @property
    def pending_actions(self) -> list[Any]:
        return [
            o.pending_action
            for o in self.outcomes
            if o.decision == "confirmation_requested" and o.pending_action is not None
        ]


def check_message(text: Any) -> str:
    """The message as it will be stored, or ``InvalidMessage``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessage("The message is empty.")
    limit = int(assistant_settings.MAX_MESSAGE_LENGTH)
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
        raise ConversationNotFound("No such conversation of yours.") from None
    conversation = Conversation.objects.filter(pk=pk, user_id=user.pk).first()
    if conversation is None:
        raise ConversationNotFound("No such conversation of yours.")
    return conversation


def tool_call_record(outcome: Outcome, tool_call_id: str | None = None) -> dict[str, Any]:
    """How a dispatch is remembered in the conversation (entities already redacted)."""
    return {
        "tool_call_id": tool_call_id,
        "operation": outcome.operation,
        "entities": outcome.entities,
        "decision": outcome.decision,
        "text": outcome.text,
        "code": outcome.code,
        "task_id": outcome.result.task_id if outcome.result else None,
        "audit_id": outcome.audit_id,
        "pending_action": str(outcome.pending_action.pk) if outcome.pending_action else None,
    }


def redact_message(message: Message, intents: list[Any], site: ToolRegistry) -> None:
    """Blank out sensitive entity values the user typed, now that the planner has found them."""
    text = message.text
    for intent in intents:
        if intent.operation not in site:
            continue
        tool = site.get(intent.operation)
        for name in tool.sensitive_entities:
            value = intent.entities.get(name)
            if isinstance(value, str) and value:
                text = text.replace(value, assistant_settings.REDACTED)
    if text != message.text:
        message.text = text
        message.save(update_fields=["text"])


def start_turn(
    user: Any, text: Any, conversation: Conversation | Any = None
) -> tuple[Conversation, Message]:
    """Store the user's message (and a new conversation) before anything else can fail.

    ``conversation`` is one the caller already checked belongs to ``user``, an id to check,
    or None for a new conversation.
    """
    text = check_message(text)
    with transaction.atomic():
        if isinstance(conversation, Conversation):
            pass
        elif conversation:
            conversation = conversation_for(user, conversation)
        else:
            conversation = Conversation.objects.create(user=user, title=text[:80])
        message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, text=text
        )
    return conversation, message


class Turn:
    """One run on a conversation: what planners call to speak and to use tools."""

    def __init__(
        self,
        *,
        user: Any,
        conversation: Conversation,
        user_message: Message | None,
        source: str,
        request_ip: str | None = None,
        site: ToolRegistry = registry,
        cancel: CancellationToken | None = None,
        run_id: str | None = None,
        session: ToolSession | None = None,
    ) -> None:
        self.user = user
        self.conversation = conversation
        self.user_message = user_message
        self.source = source
        self.request_ip = request_ip
        self.site = site
        self.session = session
        self.cancel = cancel or CancellationToken()
        self.thread_id = str(conversation.pk)
        self.run_id = run_id or uuid.uuid4().hex
        self.message_id = str(uuid.uuid4())  # the stored assistant message will have this id
        self.outcomes: list[Outcome] = []
        self.records: list[dict[str, Any]] = []
        self.interrupts: list[Any] = []
        self.frames: list[dict[str, Any]] = []
        self._parts: list[str] = []
        self._text_open = False
        self.publisher = Publisher(self.thread_id)

    @property
    def text(self) -> str:
        return "".join(self._parts)

    async def emit(self, event: Any) -> dict[str, Any]:
        """Queue the event for every socket on the conversation (numbered when it is sent)."""
        frame = events.frame(event, thread_id=self.thread_id, run_id=self.run_id)
        self.frames.append(frame)
        self.publisher.put(frame)
        return frame

    async def say(self, delta: str) -> None:
        """Stream reply text."""
        if not delta:
            return
        if not self._text_open:
            self._text_open = True
            await self.emit(events.text_start(self.message_id))
        self._parts.append(delta)
        await self.emit(events.text_content(self.message_id, delta))

    async def announce_call(self, tool_call_id: str, operation: str, arguments: str) -> None:
        await self.emit(events.tool_call_start(tool_call_id, operation, self.message_id))
        if arguments:
            await self.emit(events.tool_call_args(tool_call_id, arguments))
        await self.emit(events.tool_call_end(tool_call_id))

    async def call(
        self,
        operation: str,
        entities: dict[str, Any] | None,
        *,
        tool_call_id: str | None = None,
        announced: bool = False,
    ) -> Outcome:
        """Dispatch one intent (the only door) and stream the call and its result."""
        tool_call_id = tool_call_id or f"call_{uuid.uuid4().hex[:16]}"
        if not announced:
            shown = redacted(operation, entities, self.site)
            await self.announce_call(tool_call_id, operation, json.dumps(shown))
        try:
            outcome = await adispatch(
                operation,
                entities,
                user=self.user,
                conversation=self.conversation,
                source=self.source,
                request_ip=self.request_ip,
                site=self.site,
                cancel=self.cancel.child(),
                session=self.session,
            )
        except DispatchCancelled as stopped:
            await asyncio.shield(self.record(stopped.outcome, tool_call_id))
            raise
        await self.record(outcome, tool_call_id)
        return outcome

    async def record(self, outcome: Outcome, tool_call_id: str) -> None:
        """Remember an outcome and stream its result (and any approval it waits for)."""
        self.outcomes.append(outcome)
        record = tool_call_record(outcome, tool_call_id)
        self.records.append(record)
        await self.emit(
            events.tool_call_result(f"{tool_call_id}-result", tool_call_id, outcome.text)
        )
        await self.emit(events.custom("assistant.outcome", record))
        if outcome.decision == "confirmation_requested" and outcome.pending_action is not None:
            self.interrupts.append(
                events.confirmation_interrupt(
                    outcome.pending_action, tool_call_id, outcome.entities
                )
            )

    async def finish(self, status: str, error: AssistantError | None = None) -> Message:
        """Store the assistant message and close the run: finished, interrupted, cancelled or failed."""
        if status == Message.Status.FAILED and not self._parts:
            self._parts.append(error.message if error else TURN_FAILED)
        if self._text_open:
            await self.emit(events.text_end(self.message_id))
        message = await sync_to_async(self._store)(status)
        if status == Message.Status.FAILED:
            code = error.code if error else "turn_failed"
            await self.emit(events.run_error(error.message if error else TURN_FAILED, code))
        else:
            await self.emit(
                events.run_finished(
                    self.thread_id,
                    self.run_id,
                    result={"message": self.message_id, "status": status},
                    interrupts=self.interrupts,
                    cancelled=status == Message.Status.CANCELLED,
                )
            )
        return message

    def _store(self, status: str) -> Message:
        actions = [a for o in self.outcomes if o.result for a in o.result.actions]
        message = Message.objects.create(
            id=uuid.UUID(self.message_id),
            conversation=self.conversation,
            role=Message.Role.ASSISTANT,
            text=self.text,
            status=status,
            tool_calls=self.records,
            actions=actions,
        )
        self.conversation.touch()
        return message


Work = Callable[[Turn], Awaitable[None]]


async def execute(turn: Turn, work: Work) -> Message:
    """Run ``work`` as one AG-UI run; whatever happens, the run ends stored and announced."""
    loop = asyncio.get_running_loop()
    refresh_access(turn.user)  # a long-lived user object reloads what may have changed
    control = loop_state().control
    control.register(turn.thread_id, turn.run_id, turn.cancel)
    await turn.emit(events.run_started(turn.thread_id, turn.run_id))
    if turn.user_message is not None:
        await _echo_user_message(turn, turn.user_message)
    task = asyncio.ensure_future(work(turn))

    def stop_work() -> None:
        loop.call_soon_threadsafe(task.cancel)

    stop = turn.cancel.add_callback(stop_work)
    status, error, shutdown = Message.Status.COMPLETE, None, False
    try:
        await task
    except asyncio.CancelledError:
        status = Message.Status.CANCELLED
        shutdown = not turn.cancel.is_cancelled
    except AssistantError as exc:
        status, error = Message.Status.FAILED, exc
    except Exception:
        logger.exception("Turn failed in conversation %s", turn.thread_id)
        status = Message.Status.FAILED
    finally:
        stop()
    try:
        message = await asyncio.shield(turn.finish(status, error))
    finally:
        control.unregister(turn.thread_id, turn.run_id)
        await turn.publisher.close()
    if shutdown:
        raise asyncio.CancelledError
    return message


async def _echo_user_message(turn: Turn, message: Message) -> None:
    """The user's message as events too, so every tab on the conversation shows it."""
    await turn.emit(events.user_text_start(str(message.pk)))
    await turn.emit(events.text_content(str(message.pk), message.text))
    await turn.emit(events.text_end(str(message.pk)))


def planner_for(turn: Turn) -> Work:
    from .planner import get_planner

    return get_planner().run


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
) -> TurnResult:
    """A whole turn: the user's message is stored first, the reply whatever happens.

    Without a ``session`` (REST, CLI) the turn gets its own, whose toolsets start on first use
    and stop when the turn ends.
    """
    conversation, user_message = await sync_to_async(start_turn)(user, text, conversation_id)
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
    )
    try:
        return await run_started_turn(turn)
    finally:
        if own and turn.session is not None:
            await turn.session.stop()


async def run_started_turn(turn: Turn, work: Work | None = None) -> TurnResult:
    message = await execute(turn, work or planner_for(turn))
    if turn.session is not None and turn.session.closed:
        await turn.session.stop()  # its connection closed while this turn was still running
    return TurnResult(
        conversation=turn.conversation,
        user_message=turn.user_message,
        assistant_message=message,
        outcomes=turn.outcomes,
        frames=turn.frames,
        run_id=turn.run_id,
    )


async def _in_lane(turn: Turn, work: Work | None) -> TurnResult:
    async with lane():
        return await run_started_turn(turn, work)


def launch(turn: Turn, work: Work | None = None) -> asyncio.Task[TurnResult]:
    """Run a turn in the background on a lane, independent of the socket that asked for it."""
    return keep(asyncio.ensure_future(_in_lane(turn, work)))


async def _message_in_lane(
    user: Any,
    text: str,
    conversation: Any,
    source: str,
    request_ip: str | None,
    on_started: Callable[[Conversation], Awaitable[None]],
    on_refused: Callable[[AssistantError], Awaitable[None]],
    session: ToolSession | None,
) -> TurnResult | None:
    # A Stop may come while the turn still waits for a lane: its token listens from now on.
    cancel = CancellationToken()
    control = loop_state().control
    waiting = str(getattr(conversation, "pk", conversation)) if conversation else None
    queued = f"queued-{uuid.uuid4().hex}"
    if waiting:
        control.register(waiting, queued, cancel)
    try:
        async with lane():
            try:
                conversation, message = await sync_to_async(start_turn)(user, text, conversation)
            except AssistantError as exc:
                await on_refused(exc)
                return None
            except DatabaseError:
                # (say, the user or the conversation was deleted meanwhile): nothing was stored
                logger.exception("Storing a message failed")
                await on_refused(AssistantError(MESSAGE_NOT_STORED, code="message_not_stored"))
                return None
            except Exception:
                logger.exception("Starting a turn failed")
                await on_refused(AssistantError(MESSAGE_NOT_STORED, code="internal_error"))
                return None
            await on_started(conversation)
            turn = Turn(
                user=user,
                conversation=conversation,
                user_message=message,
                source=source,
                request_ip=request_ip,
                session=session,
                cancel=cancel,
            )
            return await run_started_turn(turn)
    finally:
        if waiting:
            control.unregister(waiting, queued)


def launch_message(
    user: Any,
    text: str,
    conversation: Any,
    *,
    source: str,
    request_ip: str | None,
    on_started: Callable[[Conversation], Awaitable[None]],
    on_refused: Callable[[AssistantError], Awaitable[None]],
    session: ToolSession | None = None,
) -> asyncio.Task[TurnResult | None]:
    """Store a message and run its turn on a lane; ``on_started`` runs before any event is sent."""
    return keep(
        asyncio.ensure_future(
            _message_in_lane(
                user, text, conversation, source, request_ip, on_started, on_refused, session
            )
        )
    )


def run_turn(
    user: Any,
    text: Any,
    *,
    conversation_id: Any = None,
    source: str = "rest",
    request_ip: str | None = None,
    site: ToolRegistry = registry,
) -> TurnResult:
    """The sync twin of ``arun_turn`` (REST, CLI): the same turn, returned whole."""
    return async_to_sync(arun_turn)(
        user,
        text,
        conversation_id=conversation_id,
        source=source,
        request_ip=request_ip,
        site=site,
    )


def decision_turn(
    user: Any, action_id: Any, *, confirm: bool, source: str, session: ToolSession | None = None
) -> Turn:
    """A run for answering one of the user's pending actions, on its conversation (or a new one)."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound("No such pending action is waiting for you.") from None
    action = (
        PendingAction.objects.owned_by(user).select_related("conversation").filter(pk=pk).first()
    )
    if action is None:
        raise ActionNotFound("No such pending action is waiting for you.")
    conversation = action.conversation
    if conversation is None:
        title = f"{'Confirm' if confirm else 'Reject'} {action.operation}"
        conversation = Conversation.objects.create(user=user, title=title)
    return Turn(
        user=user, conversation=conversation, user_message=None, source=source, session=session
    )


async def answer_action(turn: Turn, action_id: Any, *, confirm: bool) -> None:
    """The work of a confirm or reject run: decide through dispatch and stream the outcome."""
    tool_call_id = f"call_{uuid.uuid4().hex[:16]}"
    if confirm:
        outcome = await aconfirm_action(
            action_id,
            user=turn.user,
            source=turn.source,
            cancel=turn.cancel.child(),
            session=turn.session,
        )
    else:
        outcome = await acancel_action(action_id, user=turn.user, source=turn.source)
    await turn.announce_call(tool_call_id, outcome.operation, json.dumps(outcome.entities))
    await turn.record(outcome, tool_call_id)
    await turn.say(outcome.text)
