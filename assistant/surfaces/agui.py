"""AG-UI over HTTP: a ``RunAgentInput`` posted, the run's events streamed back as Server-Sent Events.

A thin transport, like the websocket: the REST API's authentication and throttle, then the
turn runner's ``launch`` (whose frames it hears itself), then the package's encoder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    TextPart,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError
from django.http import StreamingHttpResponse
from django.utils.translation import gettext
from pydantic import TypeAdapter, ValidationError
from rest_framework.request import Request

from .. import telemetry
from ..access.credentials import Credential
from ..access.tokens import Ceiling
from ..conf import assistant_settings
from ..core.cancellation import CancellationToken
from ..exceptions import AssistantError, InterruptPending, InvalidRunInput
from ..models import Conversation
from ..stream import events
from ..turns.chat import ActionAnswer, Launch, NewMessage, Resumption, Run, ToolResults, launch
from ..turns.conversations import (
    pending_client_calls,
    running_jobs,
    thread_conversation,
    waiting_actions,
)
from ..turns.lanes import loop_state
from ..turns.messages import check_message
from ..turns.turn import ClientResult, ClientTool
from .drf.base import AssistantAPIView

logger = logging.getLogger("assistant.agui")
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
ENDS = ("RUN_FINISHED", "RUN_ERROR")
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")  # and the model sees it prefixed (client__)
KEEPALIVE = 15.0  # seconds of silence after which the stream says it is alive
KEEPALIVE_COMMENT = ": keepalive\n\n"  # an SSE comment: clients read past it
MAX_ID_LENGTH = 200  # of a thread or run id: they travel in every event
TEXT = ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END")


class AgentView(AssistantAPIView):
    """``POST`` a RunAgentInput; the answer is the run's AG-UI events (``text/event-stream``)."""

    applies_ceiling = True  # its runs' tool calls go through dispatch, under the ceiling

    schema = None  # type: ignore[assignment]  # a stream, not a REST resource

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # Clients ask for text/event-stream; a refusal before the stream is JSON all the same.
        return super().perform_content_negotiation(request, force=True)

    def post(self, request: Request) -> StreamingHttpResponse:
        run_input = parse_input(request.data)
        user = request.user
        conversation = thread_conversation(user, run_input.thread_id)
        waiting = {str(action.pk) for action in waiting_actions(user, conversation)}
        refusal: AssistantError | None = None
        wanted: NewMessage | Resumption | ToolResults
        if run_input.resume:
            answers = tuple(answer_of(entry) for entry in run_input.resume)
            wanted = Resumption(conversation=conversation, answers=answers)
            if waiting - {_canonical(answer.action) for answer in answers}:
                refusal = InterruptPending(
                    gettext("Answer every interrupt of the thread in one resume.")
                )
        else:
            tools = client_tools(run_input)
            results = trailing_results(run_input)
            if results:
                check_results(results, pending_client_calls(conversation))
                wanted = ToolResults(conversation=conversation, results=results, client_tools=tools)
            else:
                text = check_message(new_text(run_input))
                wanted = NewMessage(text=text, conversation=conversation, client_tools=tools)
            if waiting:
                refusal = InterruptPending()
        encoder = EventEncoder(accept=request.headers.get("Accept", ""))
        context = self.call_context()  # a bearer token's ceiling and name
        stream = SSERun(
            user,
            wanted,
            run_input,
            encoder,
            request_ip=self.client_ip(),
            refusal=refusal,
            ceiling=context.ceiling,
            client=context.client,
            credential=self.credential(),
            trace_carrier=telemetry.carrier_of(request.headers),
            path=request.path,
        )
        response = StreamingHttpResponse(stream.events(), content_type=encoder.get_content_type())
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response


def parse_input(data: Any) -> RunAgentInput:
    """The body as a RunAgentInput, or ``InvalidRunInput`` naming what is wrong."""
    try:
        run_input = RunAgentInput.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": [str(part) for part in error["loc"]], "msg": error["msg"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise InvalidRunInput(
            gettext("The body is not a valid RunAgentInput."), errors=errors
        ) from None
    for field, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if not 1 <= len(value) <= MAX_ID_LENGTH or not value.isprintable():
            raise InvalidRunInput(
                gettext("The body is not a valid RunAgentInput."),
                errors=[{"loc": [field], "msg": f"1 to {MAX_ID_LENGTH} printable characters"}],
            )
    interrupts = [entry.interrupt_id for entry in run_input.resume or []]
    if len(set(interrupts)) != len(interrupts):
        raise InvalidRunInput(gettext("Each interrupt is answered once."), code="invalid_resume")
    return run_input


def new_text(run_input: RunAgentInput) -> str:
    """The trailing user message's text: the only part of ``messages`` taken (history is ours)."""
    if not run_input.messages:
        raise InvalidRunInput(gettext("The run has no new user message."), code="no_user_message")
    last = run_input.messages[-1]
    if not isinstance(last, UserMessage):
        raise InvalidRunInput(gettext("The run has no new user message."), code="no_user_message")
    return _text_of(last.content)


def _text_of(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    if not all(isinstance(part, TextPart) for part in content):
        raise InvalidRunInput(gettext("Only text is understood here."), code="unsupported_content")
    return "".join(part.text for part in content if isinstance(part, TextPart))


def client_tools(run_input: RunAgentInput) -> tuple[ClientTool, ...]:
    """The client's own tools, when ``AGUI_CLIENT_TOOLS`` lets the LLM offer them (else none)."""
    if not assistant_settings.AGUI_CLIENT_TOOLS:
        return ()
    tools = []
    for index, tool in enumerate(run_input.tools or []):
        parameters = tool.parameters if tool.parameters is not None else {"type": "object"}
        if not TOOL_NAME.fullmatch(tool.name) or not isinstance(parameters, dict):
            raise InvalidRunInput(
                gettext("The body is not a valid RunAgentInput."),
                errors=[
                    {
                        "loc": ["tools", str(index)],
                        "msg": "a name of 1 to 48 letters, digits, _ or -, and an object schema",
                    }
                ],
            )
        tools.append(
            ClientTool(name=tool.name, description=tool.description, parameters=parameters)
        )
    return tuple(tools)


def trailing_results(run_input: RunAgentInput) -> tuple[ClientResult, ...]:
    """The tool messages that end the input: results of the client's own tools, if any."""
    results: list[ClientResult] = []
    for message in reversed(run_input.messages):
        if not isinstance(message, ToolMessage):
            break
        content = _text_of(message.content)
        if message.error:
            content = json.dumps({"error": message.error, "content": content})
        results.append(ClientResult(tool_call_id=message.tool_call_id, content=content))
    if results and not assistant_settings.AGUI_CLIENT_TOOLS:
        raise InvalidRunInput(
            gettext("Client tools are off here: a tool message answers nothing."),
            code="client_tools_disabled",
        )
    return tuple(reversed(results))


def check_results(results: tuple[ClientResult, ...], pending: list[str]) -> None:
    """Refuse tool messages that are not the answers to the last run's client tool calls."""
    given = [result.tool_call_id for result in results]
    if sorted(given) != sorted(pending):
        raise InvalidRunInput(
            gettext(
                "The tool messages must answer the calls of your tools the last run made, each once."
            ),
            code="unknown_tool_call",
        )


def answer_of(entry: Any) -> ActionAnswer:
    """A resume entry as an answer to its pending action: ``{approved: bool}`` or cancelled."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if entry.status == "cancelled":
        return ActionAnswer(
            action=entry.interrupt_id, confirm=False, reason=_text(payload, "reason")
        )
    approved = payload.get("approved")
    if not isinstance(approved, bool):
        raise InvalidRunInput(
            'A resolved confirmation\'s payload is {"approved": true} or {"approved": false}.',
            code="invalid_resume",
        )
    return ActionAnswer(
        action=entry.interrupt_id,
        confirm=approved,
        reason=_text(payload, "reason"),
        phrase=_text(payload, "phrase"),
    )


def _canonical(action_id: str) -> str:
    """An interrupt's id as ours are spelled (a UUID in any case or form), else as given."""
    try:
        return str(uuid.UUID(action_id))
    except ValueError:
        return action_id


def _text(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key, "")
    if not isinstance(value, str):
        raise InvalidRunInput(f'"{key}" must be text.', code="invalid_resume")
    return value


class SSERun:
    """One run as Server-Sent Events: launched on a lane, heard through its listener."""

    def __init__(
        self,
        user: Any,
        wanted: NewMessage | Resumption | ToolResults,
        run_input: RunAgentInput,
        encoder: EventEncoder,
        *,
        request_ip: str | None,
        refusal: AssistantError | None,
        ceiling: Ceiling | None = None,
        client: str = "",
        credential: Credential | None = None,
        trace_carrier: dict[str, str] | None = None,
        path: str = "",
    ) -> None:
        self.user = user
        self.credential = credential
        self.trace_carrier = trace_carrier
        self.path = path
        self.ceiling = ceiling
        self.client = client
        self.wanted = wanted
        self.thread_id = run_input.thread_id
        self.run_id = run_input.run_id
        self.encoder = encoder
        self.request_ip = request_ip
        self.refusal = refusal
        self.cancel = CancellationToken()
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.echoed: set[str] = set()  # the user's own message: the client has it already

    async def events(self) -> AsyncIterator[str]:
        """The run's events, under its SERVER span (the caller's child, the turn's parent)."""
        attributes = {"http.request.method": "POST", "url.path": self.path}
        attributes["gen_ai.conversation.id"] = self.thread_id
        span_name = f"POST {self.path}".strip()
        with telemetry.server_span(
            span_name, self.trace_carrier, attributes, current=False
        ) as span:
            async for data in self.streamed(span):
                yield data

    async def streamed(self, span: telemetry.Span) -> AsyncIterator[str]:
        if self.refusal is not None:
            for data in self.refused(self.refusal):
                yield data
            return
        try:
            await loop_state().control.start()  # a Stop from a chat tab reaches this run too
        except Exception:
            logger.exception("Joining the control group failed; only a disconnect stops this run")
        with telemetry.within(span):
            launched = launch(
                self.user,
                self.wanted,
                source="agui",
                request_ip=self.request_ip,
                run=Run(
                    run_id=self.run_id,
                    cancel=self.cancel,
                    listener=self.frames.put_nowait,
                    ceiling=self.ceiling,
                    client=self.client,
                    credential=self.credential,
                ),
            )
        try:
            try:
                conversation = await self.started(launched)
            except AssistantError as refused:
                for data in self.refused(refused):
                    yield data
                return
            while True:
                try:
                    frame = await asyncio.wait_for(self.frames.get(), KEEPALIVE)
                except TimeoutError:
                    yield KEEPALIVE_COMMENT  # a long tool: proxies keep the stream open
                    continue
                if frame["type"] in ENDS:
                    snapshot = await self.snapshot(conversation)
                    if snapshot is not None:
                        yield self.encoder.encode(snapshot)
                shown = self.event(frame)
                if shown is not None:
                    yield self.encoder.encode(shown)
                if frame["type"] in ENDS:
                    return
        except BaseException:
            # The client went away (abortRun): the turn stops and is stored cancelled, like Stop.
            self.cancel.cancel()
            raise

    async def started(self, launched: Launch) -> Conversation:
        async with launched.start() as conversation:
            return conversation

    def refused(self, refusal: AssistantError) -> list[str]:
        """A run that could not start: opened and failed at once, nothing stored."""
        return [
            self.encoder.encode(
                RunStartedEvent(
                    thread_id=self.thread_id,
                    run_id=self.run_id,
                    protocol_version=events.PROTOCOL_VERSION,
                )
            ),
            self.encoder.encode(RunErrorEvent(message=refusal.message, code=refusal.code)),
        ]

    def event(self, frame: dict[str, Any]) -> BaseEvent | None:
        """The frame as the AG-UI event this client sees (its thread and run ids, no echo)."""
        data = {
            key: value for key, value in frame.items() if key not in ("seq", "threadId", "runId")
        }
        if frame["type"] in ("RUN_STARTED", "RUN_FINISHED"):
            data.update(threadId=self.thread_id, runId=self.run_id)
        if frame["type"] in TEXT:
            if frame.get("role") == "user":
                self.echoed.add(frame["messageId"])
            if frame["messageId"] in self.echoed:
                return None
        event: BaseEvent = EVENTS.validate_python(data)
        return event

    async def snapshot(self, conversation: Conversation) -> StateSnapshotEvent | None:
        """The thread's waiting actions and running jobs, as the run ends (None if unreadable)."""
        try:
            state = await sync_to_async(thread_state)(self.user, conversation)
        except DatabaseError:  # the run's end still reaches the client
            logger.exception("Reading the state of thread %s failed", conversation.pk)
            return None
        return StateSnapshotEvent(snapshot=state)


def thread_state(user: Any, conversation: Conversation) -> dict[str, Any]:
    """What a client shows beside the messages: approvals waiting and jobs under way."""
    state = {
        "pendingActions": [action.shown() for action in waiting_actions(user, conversation)],
        "jobs": [
            {
                "id": str(job.pk),
                "operation": job.operation,
                "status": job.status,
                "progress": job.progress,
                "message": job.progress_message,
            }
            for job in running_jobs(user, conversation)
        ],
    }
    result: dict[str, Any] = json.loads(json.dumps(state, cls=DjangoJSONEncoder))
    return result
