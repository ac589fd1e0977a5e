"""A turn as planners see it: what they call to speak and to use tools, and how it is stored."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.utils.translation import gettext_lazy

from .. import signals
from ..access.caches import access_for
from ..access.credentials import Credential
from ..access.permissions import hidden_from
from ..access.tokens import Ceiling
from ..core.cancellation import CancellationToken
from ..core.lifecycle import ToolSession
from ..core.redaction import (
    redact_data,
    redact_text,
    redacted_entities,
    sensitive_values,
    unfinished_secret,
)
from ..core.registry import AssistantTool, ToolRegistry, registry
from ..dispatch.audit import write_audit
from ..dispatch.bounds import kept_instead, too_large
from ..dispatch.calls import CallContext, Decision, DispatchCancelled, Outcome
from ..dispatch.door import adispatch
from ..exceptions import AssistantError, CredentialLapsed, CutShort, ReplyNotStored
from ..liveness import reply_id
from ..models import Conversation, Message
from ..stream import events
from ..stream.broadcast import Publisher
from .lanes import Hygiene
from .records import nested_savepoint, settle_user_message, settled, shown_data, tool_call_record

# (``assistant.turn``, the deprecated path of this module, still gives these for one release)
from .records import secrets_of as secrets_of
from .records import short_title as short_title

logger = logging.getLogger("assistant.turn")
TURN_FAILED = gettext_lazy(
    "Sorry, something went wrong while answering; your message is saved. Please try again."
)
CLIENT_TOOL = "client_tool"  # a stored call's decision: the client's own tool, run by the client
MODEL_CALL = "llm_call"  # how a refused model call is named in the audit trail (it is no tool)
# How a bound that ended a turn is named in the audit trail (neither is a tool).
CUT_SHORT_OPERATIONS = {"turn_deadline": "turn", "reply_too_long": "llm_reply"}


# What a planner will say once its last call is made, by the turn's outcomes (``Turn.call``).
Reply = Callable[[list[Outcome]], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Ahead:
    """A reply stored in its last call's hop: that call's outcome and record, and what was stored."""

    outcome: Outcome
    record: dict[str, Any]
    message: Message
    fields: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientTool:
    """A tool of the AG-UI client's own, as it declared it (its name unprefixed)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientResult:
    """What the client's tool returned for one call the last run made."""

    tool_call_id: str
    content: str


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
        ceiling: Ceiling | None = None,
        client: str = "",
        credential: Credential | None = None,
    ) -> None:
        self.user = user
        self.conversation = conversation
        self.user_message = user_message
        self.source = source
        self.request_ip = request_ip
        self.site = site
        self.session = session
        self.ceiling = (
            ceiling  # a bearer token's: its calls and its planner's catalog stay under it
        )
        self.client = client
        # what signed the run in, confirmed before each model and tool call (``step_context``);
        # ``vouched``: the turn's first hop confirmed it, for its first step
        self.credential = credential
        self.vouched = False
        self.cancel = cancel or CancellationToken()
        self.thread_id = str(conversation.pk)
        self.run_id = run_id or uuid.uuid4().hex
        # the stored assistant message will have this id (a user message's reply: derived from it)
        self.message_id = str(uuid.uuid4()) if user_message is None else reply_id(user_message.pk)
        self.outcomes: list[Outcome] = []
        self.records: list[dict[str, Any]] = []
        # what the model sent with a call besides its id and function (Gemini's thought
        # signature), by call id: stored with the call, sent back with it in later history
        self.call_extras: dict[str, dict[str, Any]] = {}
        self.interrupts: list[Any] = []
        self.frames: list[dict[str, Any]] = []
        self._parts: list[str] = []
        self._text_open = False
        self.secrets: set[str] = set()  # what sensitive entities of this turn's calls hold
        self._shown: set[str] = set()  # the secrets known when the user's message was echoed
        self._echoed = False
        self._held = ""  # reply text not streamed yet: it may be the start of a secret
        self.publisher = Publisher(self.thread_id)
        self.listener: Callable[[dict[str, Any]], None] | None = None  # a transport's own tap
        self.hygiene: Hygiene | None = None  # the lane's, when the turn runs on one
        self.planned: Any = None  # what the planner made ahead, in the turn's first hop
        self._ahead: Ahead | None = None  # the reply, if stored in its last call's hop
        # the operations its planner offered a model (None: the keyword planner, which plans
        # only the user's tools and those whose refusal may name them)
        self.offered: frozenset[str] | None = None
        # AG-UI client tools: the client's own (offered by the LLM planner, never dispatched),
        # the results it sends for the ones the last run called, and the ones this run calls
        self.client_tools: tuple[ClientTool, ...] = ()
        self.client_results: tuple[ClientResult, ...] = ()
        self.client_calls: list[str] = []
        self.model = ""  # the language model that answered, if one did
        self.usage: dict[str, int] = {}  # its tokens, summed over the turn's model calls
        self.lapse: CredentialLapsed | None = None  # its credential lapsed while a step ran
        self._step_usage: dict[str, int] | None = None
        self.steps = 0  # model calls made
        self.repeats: list[str] = []  # identical calls a model made again, answered, not run
        self.answered_by = ""  # the planner that answered: "llm", "keywords", or a fallback

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def call_context(self) -> CallContext:
        """The context of a call this turn makes (a child of its stop token, so a stop reaches it)."""
        return CallContext(
            user=self.user,
            source=self.source,
            conversation=self.conversation,
            request_ip=self.request_ip,
            cancel=self.cancel.child(),
            session=self.session,
            site=self.site,
            ceiling=self.ceiling,
            client=self.client,
        )

    def step_context(self) -> CallContext:
        """The context of the turn's next step: with its credential, for dispatch to confirm."""
        if self.vouched:
            self.vouched = False
            return self.call_context()
        return self.call_context()._replace(credential=self.credential)

    async def confirm_credential(self) -> None:
        """Before a model call: stop the turn (audited once) if its credential no longer holds."""
        context = self.step_context()
        if context.credential is not None and not context.credential.known_to_hold():
            await sync_to_async(confirm_step)(context)

    async def emit(self, event: Any) -> dict[str, Any]:
        """Queue the event for every socket on the conversation (numbered when it is sent)."""
        frame = events.frame(event, thread_id=self.thread_id, run_id=self.run_id)
        self.frames.append(frame)
        self.publisher.put(frame)
        if self.listener is not None:
            self.listener(frame)
        return frame

    def identify(self, operation: Any, entities: Any) -> None:
        """Learn what a call's sensitive entities hold: from now on nothing of the turn shows it."""
        tool = self.site.find(operation)
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
        text, title = settled(self.user_message, self.conversation, self._shown)
        if text == self.user_message.text and title == self.conversation.title:
            return  # (most turns: nothing to redact, the title stands): no thread hop
        try:
            await sync_to_async(settle_user_message)(
                self.user_message, self.conversation, text, title
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

    @property
    def step_usage(self) -> dict[str, int] | None:
        """The running model call's reported usage, until ``end_step`` adds it to the turn's."""
        return self._step_usage

    def end_step(self) -> None:
        """Add the finished model call's usage to the turn's."""
        self.steps += 1
        if self._step_usage is not None:
            for name, value in self._step_usage.items():
                self.usage[name] = self.usage.get(name, 0) + value
        self._step_usage = None

    def token_usage(self) -> list[Any] | None:
        """The turn's usage as AG-UI reports it, when the language model reported any."""
        return events.token_usage(self.model, self.usage)

    async def announce_call(self, tool_call_id: str, operation: str, arguments: str) -> None:
        await self.show_user_message()
        await self.emit(events.tool_call_start(tool_call_id, operation, self.message_id))
        if arguments:
            await self.emit(events.tool_call_args(tool_call_id, arguments))
        await self.emit(events.tool_call_end(tool_call_id))

    async def known_tool(self, operation: str) -> AssistantTool | None:
        """The tool ``operation`` names, unless it is hidden from this user: its arguments are then
        shown as a missing operation's are (all redacted), as dispatch will answer it."""
        tool = self.site.find(operation)
        if tool is None or self.offered is None or operation in self.offered:
            return tool
        # a model's call outside its catalog (rare): one hop to ask, object permissions too
        hidden = await sync_to_async(self._hides)(tool)
        return None if hidden else tool

    def _hides(self, tool: AssistantTool) -> bool:
        return hidden_from(access_for(self.user), tool, self.site)

    async def propose_client_call(self, tool_call_id: str, name: str, arguments: str) -> None:
        """Stream a call of one of the client's own tools: the client runs it, not dispatch."""
        await self.announce_call(tool_call_id, name, arguments)
        try:
            entities = json.loads(arguments) if arguments else {}
        except ValueError:
            entities = {"arguments": arguments}
        entities = entities if isinstance(entities, dict) else {"arguments": entities}
        # never dispatched (the client runs it), but the trail says the model proposed it
        proposed = Outcome(operation=name[:64], decision=Decision.CLIENT_TOOL, entities=entities)
        audit_id = await sync_to_async(write_audit)(self.call_context(), proposed, domain="client")
        self.records.append(
            {
                "tool_call_id": tool_call_id,
                "operation": name,
                "entities": entities,
                "decision": CLIENT_TOOL,
                "text": "",
                "code": None,
                "task_id": None,
                "data": None,
                "audit_id": audit_id,
                "pending_action": None,
                **self._extra_of(tool_call_id),
            }
        )
        self.client_calls.append(tool_call_id)

    async def call(
        self,
        operation: str,
        entities: dict[str, Any] | None,
        *,
        tool_call_id: str | None = None,
        announced: bool = False,
        refusal: bool = False,
        reply: Reply | None = None,
        arrival: str = "",
        after_results: bool = False,
    ) -> Outcome:
        """Dispatch one intent (the only door) and stream the call and its result.

        ``refusal``: the planner sends a tool it knows the user may not use, for dispatch's
        refusal to say what it needs; dispatched the same (an evaluation does not count it).
        ``reply``: this is the planner's last call, and this says what it will say after it, by
        the turn's outcomes: the reply is stored in the call's own sync hop (``finish`` checks
        it, and corrects it where the turn ended otherwise).
        ``arrival``: how a model's call came, "native" or "text" (the audit keeps it).
        ``after_results``: the model proposed it with a tool's output in what it read (the
        approval may ask first, ``LLM["CONFIRM_AFTER_RESULTS"]``).
        """
        tool_call_id = tool_call_id or f"call_{uuid.uuid4().hex[:16]}"
        self.identify(operation, entities)
        if not announced:
            tool = await self.known_tool(operation)
            encoded = too_large(entities)
            if encoded is None:
                shown = redacted_entities(tool, entities)
            else:  # (dispatch refuses it: only its digest and preview are shown, as stored)
                shown = kept_instead(tool, entities, encoded)
            await self.announce_call(tool_call_id, operation, json.dumps(shown))
        then = None if reply is None else functools.partial(self._store_ahead, tool_call_id, reply)
        try:
            context = self.step_context().but(
                call_id=tool_call_id, arrival=arrival, after_results=after_results
            )
            outcome = await adispatch(operation, entities, context=context, then=then)
        except DispatchCancelled as stopped:
            await asyncio.shield(self.record(stopped.outcome, tool_call_id))
            raise
        await self.record(outcome, tool_call_id)
        if isinstance(outcome.error, CredentialLapsed):
            raise outcome.error  # nothing more runs under it (dispatch audited the refusal)
        return outcome

    def _remembered(self, outcome: Outcome, tool_call_id: str) -> dict[str, Any]:
        """The outcome redacted (what the handler said too), and its record as stored."""
        if outcome.result is not None and self.secrets:
            outcome.result = replace(
                outcome.result,
                text=redact_text(outcome.result.text, self.secrets),
                data=redact_data(outcome.result.data, self.secrets),
            )
        record = shown_data(tool_call_record(outcome, tool_call_id))
        record["text"] = redact_text(record["text"], self.secrets)  # (an error's message too)
        record.update(self._extra_of(tool_call_id))
        return record

    def _extra_of(self, tool_call_id: str) -> dict[str, Any]:
        """What a call's stored record keeps of what the model sent with it, if anything."""
        extra = self.call_extras.get(tool_call_id)
        return {"provider_extra": extra} if extra else {}

    async def record(self, outcome: Outcome, tool_call_id: str) -> None:
        """Remember an outcome and stream its result (and any approval it waits for)."""
        ahead = self._ahead
        if ahead is not None and ahead.outcome is outcome:
            record = ahead.record  # made, and the outcome redacted, where the reply was stored
        else:
            record = self._remembered(outcome, tool_call_id)
        self.outcomes.append(outcome)
        self.records.append(record)
        shown = record
        if self.lapse is not None:  # a step that ended after the credential lapsed: not shown
            shown = {**record, "text": self.lapse.message, "data": None}
        await self.emit(
            events.tool_call_result(f"{tool_call_id}-result", tool_call_id, shown["text"])
        )
        await self.emit(events.custom("assistant.outcome", shown))
        if (
            outcome.decision == Decision.CONFIRMATION_REQUESTED
            and outcome.pending_action is not None
        ):
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
        if isinstance(error, CutShort):
            await self.cut_short(error)
        if status == Message.Status.FAILED and not self._parts:
            self._parts.append(error.message if error else str(TURN_FAILED))
        await self.show_user_message()
        if self.user_message is not None and self.secrets - self._shown:
            # found after the echo (an LLM may speak first): the stored message forgets them
            await self.forget_late_secrets()
        if self._text_open:
            await self.emit(events.text_end(self.message_id))
        fields = self._fields(status)
        ahead = self._ahead
        try:
            if ahead is not None and ahead.fields == fields:
                message = ahead.message  # stored as it is, in the last call's hop
            else:
                message = await sync_to_async(self._store_final)(fields)
        except Exception as exc:
            logger.exception("Storing the reply failed in conversation %s", self.thread_id)
            if self._ahead is None:  # (else a reply is stored under the key: a retry returns it)
                await sync_to_async(self._release_key)()
            lost = ReplyNotStored()
            await self.emit(events.run_error(lost.message, lost.code, usage=self.token_usage()))
            raise lost from exc
        if status == Message.Status.FAILED:
            code = error.code if error else "turn_failed"
            await self.emit(
                events.run_error(
                    error.message if error else str(TURN_FAILED), code, usage=self.token_usage()
                )
            )
        else:
            await self.emit(
                events.run_finished(
                    self.thread_id,
                    self.run_id,
                    result={"message": self.message_id, "status": status},
                    interrupts=self.interrupts,
                    cancelled=status == Message.Status.CANCELLED,
                    pending_tool_calls=self.client_calls,
                    usage=self.token_usage(),
                )
            )
        await signals.asend(
            signals.turn_finished,
            Message,
            message=message,
            conversation=self.conversation,
            status=status,
            user=self.user,
        )
        return message

    async def cut_short(self, error: CutShort) -> None:
        """Say where a bound ended the reply, and audit it (once: the turn ends here)."""
        if self._parts:
            await self._stream(f"\n\n({error.message})")
        ended = Outcome(
            operation=CUT_SHORT_OPERATIONS.get(error.code, "turn"),
            decision=Decision.OVER_LIMIT,
            entities={},
            error=error,
            error_summary=f"{error.code}: {error.message}",
        )
        try:
            await sync_to_async(write_audit)(self.call_context(), ended, domain="assistant")
        except DatabaseError:  # the reply is still stored and the run still ends
            logger.exception("Auditing the cut-short turn in %s failed", self.thread_id)

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

    def _fields(
        self,
        status: str,
        text: str | None = None,
        outcomes: list[Outcome] | None = None,
        records: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """What the stored reply holds, by the turn so far (or by what a planner will say)."""
        outcomes = self.outcomes if outcomes is None else outcomes
        return {
            "text": redact_text(self.text if text is None else text, self.secrets),
            "status": status,
            "tool_calls": self.records if records is None else records,
            "actions": [a for o in outcomes if o.result for a in o.result.actions],
            "model": self.model[:200],
            "prompt_tokens": self.usage.get("prompt_tokens"),
            "completion_tokens": self.usage.get("completion_tokens"),
            "total_tokens": self.usage.get("total_tokens"),
        }

    def _store_ahead(self, tool_call_id: str, reply: Reply, outcome: Outcome) -> None:
        """In the last call's sync hop, once it is audited: store the reply the planner will
        give, and end the lane's hygiene. A stop asked for already leaves it to ``finish``."""
        if self.cancel.is_cancelled or isinstance(outcome.error, CredentialLapsed):
            return
        record = self._remembered(outcome, tool_call_id)
        outcomes = [*self.outcomes, outcome]
        said = self.text + self._held + reply(outcomes)  # (``finish`` streams what is held)
        fields = self._fields(Message.Status.COMPLETE, said, outcomes, [*self.records, record])
        message = self._store_last(fields)  # (if it fails, ``finish`` stores the reply)
        self._ahead = Ahead(outcome=outcome, record=record, message=message, fields=fields)

    def _store_final(self, fields: dict[str, Any]) -> Message:
        """Store the reply, or correct the one stored ahead where the turn ended otherwise.

        What was stored ahead is read here, in the turn's sync thread: a call's hop the turn
        stopped waiting for (a shutdown's cancellation) has finished by now, as it came first.
        """
        ahead = self._ahead
        if ahead is None:
            return self._store_last(fields)
        if ahead.fields == fields:
            return ahead.message
        return self._correct(ahead.message, fields)

    def _store_last(self, fields: dict[str, Any]) -> Message:
        """Store the reply: the turn's last sync step, which ends its lane's hygiene too."""
        message = self._store(fields)
        if self.hygiene is not None:
            self.hygiene.end()
        return message

    def _correct(self, message: Message, fields: dict[str, Any]) -> Message:
        """The reply stored ahead, made what the turn ended with after all (one UPDATE, through
        ``save`` so what is stored is storable)."""
        try:
            for name, value in fields.items():
                setattr(message, name, value)
            message.save(update_fields=list(fields))
        finally:
            if self.hygiene is not None:
                self.hygiene.end()  # (again: this hop came after the one that ended it)
        return message

    def _store(self, fields: dict[str, Any]) -> Message:
        # Two statements on their own (a crash between them leaves the reply stored and the
        # conversation where it was in the list): no BEGIN and COMMIT round trips for them.
        with nested_savepoint():
            message = Message.objects.create(
                id=uuid.UUID(self.message_id),
                conversation=self.conversation,
                role=Message.Role.ASSISTANT,
                idempotency_key=getattr(self.user_message, "idempotency_key", None),
                **fields,
            )
            self.conversation.touch()
        return message


def confirm_step(
    context: CallContext, operation: str = MODEL_CALL, entities: dict[str, Any] | None = None
) -> None:
    """Raise ``CredentialLapsed`` (audited ``denied``, once) if the context's credential lapsed."""
    assert context.credential is not None
    lapse = context.credential.lapse()
    if lapse is None:
        return
    refused = Outcome(
        operation=operation,
        decision=Decision.DENIED,
        entities=entities or {},
        error_summary=lapse.message,
    )
    write_audit(context, refused, domain="assistant")
    raise lapse


async def _echo_user_message(turn: Turn, message: Message) -> None:
    """The user's message as events too, so every tab on the conversation shows it."""
    await turn.emit(events.text_start(str(message.pk), role="user"))
    await turn.emit(events.text_content(str(message.pk), message.text))
    await turn.emit(events.text_end(str(message.pk)))
