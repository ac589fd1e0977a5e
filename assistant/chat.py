"""One conversation turn, shared by every transport: store, plan, dispatch, stream, store."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import DatabaseError, IntegrityError, transaction

from . import events
from .conf import assistant_settings
from .confirmation import acancel_action, aconfirm_action
from .dispatch import DispatchCancelled, Outcome, adispatch
from .exceptions import (
    ActionNotFound,
    AssistantError,
    ConversationNotFound,
    InvalidIdempotencyKey,
    InvalidMessage,
    MessageNotStored,
    ReplyNotStored,
    TurnInProgress,
)
from .lifecycle import CancellationToken, ToolSession, new_session
from .models import AuditEntry, Conversation, Message, PendingAction
from .permissions import refresh_access
from .redaction import redact_text, redacted, sensitive_values, unfinished_secret
from .registry import ToolRegistry, ToolResult, registry
from .runner import Publisher, keep, lane, loop_state
from .storable import storable_text

logger = logging.getLogger("assistant.chat")
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


def settle_user_message(message: Message, conversation: Conversation, secrets: set[str]) -> None:
    """Store the user's message redacted and title a new conversation by it (never before)."""
    before = message.text
    text = redact_text(before, secrets)
    if text != before:
        message.text = text
        message.save(update_fields=["text"])
    if not conversation.title or conversation.title == before[:80]:
        title = text[:80]  # (a secret cut short at the 80th character must go whole)
    else:
        title = redact_text(conversation.title, secrets)
    if title != conversation.title:
        conversation.title = title
        Conversation.objects.filter(pk=conversation.pk).update(title=title)


def stored_key(user: Any, idempotency_key: Any) -> str | None:
    """How a client's ``Idempotency-Key`` is kept on a message (one namespace per user)."""
    if idempotency_key is None:
        return None
    key = str(idempotency_key)
    if not 1 <= len(key) <= 200 or not all(" " <= char <= "~" for char in key):
        raise InvalidIdempotencyKey()
    return f"{user.pk}:{key}"


def start_turn(
    user: Any, text: Any, conversation: Conversation | Any = None, idempotency_key: Any = None
) -> tuple[Conversation, Message]:
    """Store the user's message (and a new conversation) before anything else can fail.

    ``conversation`` is one the caller already checked belongs to ``user``, an id to check,
    or None for a new conversation. A new conversation gets its title once the planner had
    the chance to find secrets in the message (``Turn.show_user_message``).
    """
    text = check_message(text)
    key = stored_key(user, idempotency_key)
    try:
        with transaction.atomic():
            if isinstance(conversation, Conversation):
                pass
            elif conversation:
                conversation = conversation_for(user, conversation)
            else:
                conversation = Conversation.objects.create(user=user)
            message = Message.objects.create(
                conversation=conversation, role=Message.Role.USER, text=text, idempotency_key=key
            )
    except IntegrityError:
        if key is not None and Message.objects.filter(idempotency_key=key).exists():
            raise TurnInProgress() from None  # the same request, sent twice at once
        raise
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
    """An outcome as the conversation remembers it (``tool_call_record``): no ``data``."""
    code, text = record.get("code"), record.get("text") or ""
    pending = record.get("pending_action")
    return Outcome(
        operation=record["operation"],
        decision=record["decision"],
        entities=record.get("entities") or {},
        result=None if code else ToolResult(text=text, task_id=record.get("task_id")),
        error=AssistantError(text, code=code) if code else None,
        pending_action=actions.get(uuid.UUID(pending)) if pending else None,
        audit_id=record.get("audit_id"),
        duration_ms=durations.get(record.get("audit_id") or 0, 0.0),
    )


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
        self.secrets: set[str] = set()  # what sensitive entities of this turn's calls hold
        self._shown: set[str] = set()  # the secrets known when the user's message was echoed
        self._echoed = False
        self._held = ""  # reply text not streamed yet: it may be the start of a secret
        self.publisher = Publisher(self.thread_id)
        self.model = ""  # the language model that answered, if one did
        self.usage: dict[str, int] = {}  # its tokens, summed over the turn's model calls
        self._step_usage: dict[str, int] | None = None

    @property
    def text(self) -> str:
        return "".join(self._parts)

    async def emit(self, event: Any) -> dict[str, Any]:
        """Queue the event for every socket on the conversation (numbered when it is sent)."""
        frame = events.frame(event, thread_id=self.thread_id, run_id=self.run_id)
        self.frames.append(frame)
        self.publisher.put(frame)
        return frame

    def identify(self, operation: Any, entities: Any) -> None:
        """Learn what a call's sensitive entities hold: from now on nothing of the turn shows it."""
        tool = self.site._tools.get(operation) if isinstance(operation, str) else None
        self.secrets |= sensitive_values(tool, entities)

    async def show_user_message(self) -> None:
        """Echo the user's message, redacted with what the planner found, once (before any reply)."""
        if self._echoed or self.user_message is None:
            return
        self._echoed = True
        self._shown = set(self.secrets)
        await self._settle()
        await _echo_user_message(self, self.user_message)

    async def _settle(self) -> None:
        assert self.user_message is not None
        try:
            await sync_to_async(settle_user_message)(
                self.user_message, self.conversation, self._shown
            )
        except DatabaseError:  # the echo is still redacted: the text changed before the save
            logger.exception("Storing the redacted message in %s failed", self.thread_id)

    async def say(self, delta: str) -> None:
        """Stream reply text (what may be the start of a secret waits for the next words)."""
        text = redact_text(self._held + delta, self.secrets)
        hold = unfinished_secret(text, self.secrets)
        self._held = text[len(text) - hold :]
        await self._stream(text[: len(text) - hold])

    async def _stream(self, delta: str) -> None:
        if not delta:
            return
        await self.show_user_message()
        if not self._text_open:
            self._text_open = True
            await self.emit(events.text_start(self.message_id))
        self._parts.append(delta)
        await self.emit(events.text_content(self.message_id, delta))

    def count_usage(self, model: str, usage: dict[str, int] | None) -> None:
        """Note a model call's reported usage; servers that repeat it cumulatively count once."""
        self.model = model or self.model
        if usage is not None:
            self._step_usage = usage

    def end_step(self) -> None:
        """Add the finished model call's usage to the turn's."""
        if self._step_usage is not None:
            for name, value in self._step_usage.items():
                self.usage[name] = self.usage.get(name, 0) + value
        self._step_usage = None

    async def announce_call(self, tool_call_id: str, operation: str, arguments: str) -> None:
        await self.show_user_message()
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
        self.identify(operation, entities)
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
        if outcome.result is not None and self.secrets:  # what the handler said, redacted
            outcome.result = replace(
                outcome.result, text=redact_text(outcome.result.text, self.secrets)
            )
        self.outcomes.append(outcome)
        record = tool_call_record(outcome, tool_call_id)
        record["text"] = redact_text(record["text"], self.secrets)  # (an error's message too)
        self.records.append(record)
        await self.emit(
            events.tool_call_result(f"{tool_call_id}-result", tool_call_id, record["text"])
        )
        await self.emit(events.custom("assistant.outcome", record))
        if outcome.decision == "confirmation_requested" and outcome.pending_action is not None:
            self.interrupts.append(
                events.confirmation_interrupt(
                    outcome.pending_action, tool_call_id, outcome.entities
                )
            )

    async def finish(self, status: str, error: AssistantError | None = None) -> Message:
        """Store the assistant message and close the run: finished, interrupted, cancelled or failed.

        The run always ends: when the reply cannot be stored (say, the database went away), a
        ``RUN_ERROR`` says so (``reply_not_stored``) and ``ReplyNotStored`` is raised.
        """
        held, self._held = self._held, ""
        await self._stream(held)
        if status == Message.Status.FAILED and not self._parts:
            self._parts.append(error.message if error else TURN_FAILED)
        await self.show_user_message()
        if self.user_message is not None and self.secrets - self._shown:
            # found after the echo (an LLM may speak first): the stored message forgets them
            await self.forget_late_secrets()
        if self._text_open:
            await self.emit(events.text_end(self.message_id))
        try:
            message = await sync_to_async(self._store)(status)
        except Exception as exc:
            logger.exception("Storing the reply failed in conversation %s", self.thread_id)
            await sync_to_async(self._release_key)()
            lost = ReplyNotStored()
            await self.emit(events.run_error(lost.message, lost.code))
            raise lost from exc
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

    async def forget_late_secrets(self) -> None:
        """Redact the stored user message and the replay log with secrets found after the echo."""
        self._shown = set(self.secrets)
        await self._settle()
        secrets = self._shown
        self.publisher.redact(lambda text: redact_text(text, secrets))

    def _release_key(self) -> None:
        """A turn whose reply was lost frees its Idempotency-Key, so a retry runs it again."""
        key = getattr(self.user_message, "idempotency_key", None)
        if key is None:
            return
        try:
            Message.objects.filter(idempotency_key=key).update(idempotency_key=None)
        except DatabaseError:
            logger.exception("Releasing the Idempotency-Key of a lost reply failed")

    def _store(self, status: str) -> Message:
        actions = [a for o in self.outcomes if o.result for a in o.result.actions]
        with transaction.atomic():
            message = Message.objects.create(
                id=uuid.UUID(self.message_id),
                conversation=self.conversation,
                role=Message.Role.ASSISTANT,
                text=redact_text(self.text, self.secrets),
                status=status,
                tool_calls=self.records,
                actions=actions,
                model=self.model[:200],
                prompt_tokens=self.usage.get("prompt_tokens"),
                completion_tokens=self.usage.get("completion_tokens"),
                total_tokens=self.usage.get("total_tokens"),
                idempotency_key=getattr(self.user_message, "idempotency_key", None),
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
    # The user's message is echoed once the planner had the chance to find its secrets.
    await turn.emit(events.run_started(turn.thread_id, turn.run_id))
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
    async def plan(turn: Turn) -> None:
        from .planner import get_planner

        # chosen inside the run: a planner that cannot load ends the run as RUN_ERROR
        await get_planner().run(turn)

    return plan


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
) -> TurnResult:
    """A whole turn: the user's message is stored first, the reply whatever happens.

    Without a ``session`` (REST, CLI) the turn gets its own, whose toolsets start on first use
    and stop when the turn ends. A turn sent again with the same ``idempotency_key`` is not
    run again: the first one is returned as stored.
    """
    earlier = await sync_to_async(earlier_turn)(user, idempotency_key)
    if earlier is not None:
        return earlier
    conversation, user_message = await sync_to_async(start_turn)(
        user, text, conversation_id, idempotency_key
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
                await _tell(on_refused, exc)
                return None
            except DatabaseError:
                # (say, the user or the conversation was deleted meanwhile): nothing was stored
                logger.exception("Storing a message failed")
                await _tell(on_refused, MessageNotStored())
                return None
            except Exception:
                logger.exception("Starting a turn failed")
                await _tell(on_refused, MessageNotStored(code="internal_error"))
                return None
            await _tell(on_started, conversation)
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


async def _tell(callback: Callable[[Any], Awaitable[None]], argument: Any) -> None:
    """Let the transport know; its failure (say, its socket has gone) never stops the turn."""
    try:
        await callback(argument)
    except Exception:
        logger.exception("Telling the transport about a turn failed; the turn goes on")


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
    idempotency_key: str | None = None,
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
    )


def decision_turn(
    user: Any, action_id: Any, *, confirm: bool, source: str, session: ToolSession | None = None
) -> Turn:
    """A run for answering one of the user's pending actions, on its conversation (or a new one)."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound() from None
    action = (
        PendingAction.objects.owned_by(user).select_related("conversation").filter(pk=pk).first()
    )
    if action is None:
        raise ActionNotFound()
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
